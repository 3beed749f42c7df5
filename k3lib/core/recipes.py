"""The recipes the kit knows by name: what the source documents require of a model's deployment. A parameters
file may raise a requirement of a recipe named for a known model, never drop or lower one (one line, exit 2): to
judge another build, name another recipe, whose unset requirements then leave their sheet items open.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from .errors import BadInputError


@dataclasses.dataclass(frozen=True)
class KnownRecipe:
    """What the source documents require of a model's deployment; a recipe of this name keeps every one."""

    name: str
    vllm_min: str
    cuda_major: int
    driver_branch_min: int
    required_flags: tuple[str, ...]
    prefix_caching: bool
    basis: str


KNOWN_RECIPES: dict[str, KnownRecipe] = {
    "kimi-k3": KnownRecipe(
        "kimi-k3", vllm_min="0.27.1", cuda_major=13, driver_branch_min=580,
        required_flags=("--enable-auto-tool-choice", "--tool-call-parser kimi_k3", "--reasoning-parser kimi_k3",
                        "--trust-remote-code"),
        prefix_caching=True,
        basis="seed 000: Kimi K3 runs vLLM 0.27.1+, a CUDA 13 build on a host driver R580 or newer, with "
              "--enable-auto-tool-choice, the kimi_k3 parsers and prefix caching (passed explicitly: off by default "
              "for K3); vLLM's K3 recipe: --trust-remote-code"),
}


def _version_tuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in str(v).split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_recipe(recipe: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
                 default_source: str = "parameters") -> None:
    """A recipe named for a known model may raise its requirements, never drop or lower one (one line, exit 2):
    to judge another build, name another recipe — whose unset requirements then leave their sheet items open."""
    known = KNOWN_RECIPES.get(str(recipe.get("name") or ""))
    if known is None:
        return
    prov = prov or {}
    hint = f"name another recipe (recipe.name) to judge another build ({known.basis})"

    def refuse(field: str, what: str) -> None:
        raise BadInputError(f"the {known.name} recipe requires {what}; {hint}",
                            source=prov.get(f"recipe.{field}", prov.get("recipe", default_source)),
                            field=f"recipe.{field}")

    vmin = recipe.get("vllm_min")
    if vmin is None or _version_tuple(vmin) < _version_tuple(known.vllm_min):
        refuse("vllm_min", f"vLLM {known.vllm_min} or newer (got {vmin!r})")
    if recipe.get("cuda_major") != known.cuda_major:
        refuse("cuda_major", f"a CUDA {known.cuda_major} build (got {recipe.get('cuda_major')!r})")
    driver = recipe.get("driver_branch_min")
    if driver is None or driver < known.driver_branch_min:
        refuse("driver_branch_min", f"a host driver branch R{known.driver_branch_min} or newer (got {driver!r})")
    below = [b for b in recipe.get("driver_branches_compatible") or () if b < known.driver_branch_min]
    if below:
        refuse("driver_branches_compatible", f"a host driver branch R{known.driver_branch_min} or newer (a CUDA "
               f"{known.cuda_major} build runs on no older branch; got R{below[0]})")
    flags = {" ".join(str(f).split()) for f in recipe.get("required_flags") or ()}
    missing = [f for f in known.required_flags if f not in flags]
    if missing:
        refuse("required_flags", "the server flags " + ", ".join(missing))
    if known.prefix_caching and not recipe.get("prefix_caching"):
        refuse("prefix_caching", "prefix caching on")

"""The recipes the kit knows: what the source documents require of a model's deployment, found by the model the
target serves (`/v1/models`: `moonshotai/Kimi-K3`) and by the recipe's name.

A parameters file may raise a requirement of a recipe named for a known model, never drop or lower one (one line,
exit 2); a name is read by its skeleton, so `kіmi-k3` with a Cyrillic і is `kimi-k3`. Whatever the name typed, the
requirements of the model the target serves apply: a recipe weaker than them is a loosened threshold
(`recipe_loosened`), listed in the decision and forbidding production unless attested.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from typing import Any, Iterable, Mapping

from .errors import BadInputError
from .roles import Loosened, same
from .versions import at_least


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
    models: tuple[str, ...] = ()  # the model ids/roots a target serves it under (/v1/models)
    # the settings whose floor this recipe gives (the judged fields of basis "recipe", `k3lib.core.roles`), by path:
    # how the model is used in production and what its roofline rests on
    judged: tuple[tuple[str, Any], ...] = ()


KNOWN_RECIPES: dict[str, KnownRecipe] = {
    "kimi-k3": KnownRecipe(
        "kimi-k3", vllm_min="0.27.1", cuda_major=13, driver_branch_min=580,
        required_flags=("--enable-auto-tool-choice", "--tool-call-parser kimi_k3", "--reasoning-parser kimi_k3",
                        "--trust-remote-code"),
        prefix_caching=True,
        basis="seed 000: Kimi K3 runs vLLM 0.27.1+, a CUDA 13 build on a host driver R580 or newer, with "
              "--enable-auto-tool-choice, the kimi_k3 parsers and prefix caching (passed explicitly: off by default "
              "for K3); vLLM's K3 recipe: --trust-remote-code",
        models=("moonshotai/Kimi-K3", "Kimi-K3"),
        # Moonshot's API pins temperature 1.0 and top_p 0.95 and thinking is on (Kimi-Vendor-Verifier, vLLM's K3
        # blog); DSpark accepts ~2.6 tokens per step, 2.0 the floor; 2.8T parameters, 16 of 896 experts active per
        # token (~50B read per token), MXFP4 weights (parameters/kimi-k3.yaml says the same, with its sources)
        judged=(("recipe.sampling.temperature", 1.0), ("recipe.sampling.top_p", 0.95),
                ("recipe.sampling.thinking", True), ("recipe.spec_decode_min_acceptance_length", 2.0),
                ("axes.capacity.roofline.active_params_b", 50.0), ("axes.capacity.roofline.weight_dtype", "mxfp4"))),
}

# Letters of other scripts drawn like Latin ones (Cyrillic, Greek): a name is compared by its skeleton.
_CONFUSABLE = str.maketrans("аеіорсухѕјԁһӏкмнтвАЕІОРСУХЅЈКМНТВαοιεκνρτχΑΟΙΕΚΝΡΤΧ",
                            "aeiopcyxsjdhlkmhtbAEIOPCYXSJKMHTBaoieknptxAOIEKNPTX")


def skeleton(text: object) -> str:
    """How a name reads: NFKC, look-alike letters of other scripts mapped to Latin, case and spacing folded."""
    folded = unicodedata.normalize("NFKC", str(text or "")).translate(_CONFUSABLE)
    return "".join(folded.casefold().split())


def known_recipe(name: object) -> KnownRecipe | None:
    """The known recipe a recipe name reads as (by its skeleton)."""
    key = skeleton(name)
    return next((r for n, r in KNOWN_RECIPES.items() if skeleton(n) == key), None)


def served_recipe(models: Iterable[str]) -> tuple[KnownRecipe, str] | None:
    """The known recipe of a model the target serves (its `/v1/models` ids and roots), with the name matched."""
    for model in models:
        base = skeleton(str(model).rstrip("/").rsplit("/", 1)[-1])
        for known in KNOWN_RECIPES.values():
            # a variant of the model (`Kimi-K3-Instruct`, `…/Kimi-K3-FP8`) keeps its requirements
            if skeleton(model) in {skeleton(m) for m in known.models} or \
                    any(base.startswith(skeleton(m.rsplit("/", 1)[-1])) for m in known.models):
                return known, str(model)
    return None


def check_recipe(recipe: Mapping[str, Any], prov: Mapping[str, str] | None = None, *,
                 default_source: str = "parameters") -> None:
    """A recipe named for a known model may raise its requirements, never drop or lower one (one line, exit 2):
    to judge another build, name another recipe — whose unset requirements then leave their sheet items open."""
    known = known_recipe(recipe.get("name"))
    if known is None:
        return
    prov = prov or {}
    hint = f"name another recipe (recipe.name) to judge another build ({known.basis})"

    def refuse(field: str, what: str) -> None:
        raise BadInputError(f"the {known.name} recipe requires {what}; {hint}",
                            source=prov.get(f"recipe.{field}", prov.get("recipe", default_source)),
                            field=f"recipe.{field}")

    vmin = recipe.get("vllm_min")
    if vmin is None or not at_least(vmin, known.vllm_min):  # PEP 440: 0.27.0rc9 is below 0.27.1
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


RECIPE_FIELDS = ("vllm_min", "cuda_major", "driver_branch_min", "driver_branches_compatible", "required_flags",
                 "prefix_caching")


def weaker_fields(recipe: Mapping[str, Any], known: KnownRecipe) -> list[tuple[str, Any, Any]]:
    """(field, the recipe's value, the known recipe's) for every requirement `recipe` drops or lowers."""
    out: list[tuple[str, Any, Any]] = []
    vmin = recipe.get("vllm_min")
    if vmin is None or not at_least(vmin, known.vllm_min):
        out.append(("vllm_min", vmin, known.vllm_min))
    if recipe.get("cuda_major") != known.cuda_major:
        out.append(("cuda_major", recipe.get("cuda_major"), known.cuda_major))
    driver = recipe.get("driver_branch_min")
    if driver is None or driver < known.driver_branch_min:
        out.append(("driver_branch_min", driver, known.driver_branch_min))
    below = [b for b in recipe.get("driver_branches_compatible") or () if b < known.driver_branch_min]
    if below:
        out.append(("driver_branches_compatible", list(recipe.get("driver_branches_compatible") or ()),
                    f"none below R{known.driver_branch_min}"))
    flags = {" ".join(str(f).split()) for f in recipe.get("required_flags") or ()}
    if any(f not in flags for f in known.required_flags):
        out.append(("required_flags", list(recipe.get("required_flags") or ()), list(known.required_flags)))
    if known.prefix_caching and not recipe.get("prefix_caching"):
        out.append(("prefix_caching", recipe.get("prefix_caching"), True))
    return out


def recipe_loosened(recipe: Mapping[str, Any], served_models: Iterable[str], accepted: Iterable[Any] = (),
                    who: str | None = None, when: str | None = None) -> list[Any]:
    """The requirements of the model the target serves that the run's recipe drops or lowers, each a loosened
    threshold (`k3lib.core.roles.Loosened`), accepted only by an attestation entry of the same path and value."""

    found = served_recipe(served_models)
    if found is None:
        return []
    known, model = found
    by_path = {str(getattr(a, "path", "")): a for a in accepted}
    out = []
    for field, value, floor in weaker_fields(recipe, known):
        path = f"recipe.{field}"
        entry = by_path.get(path)
        ok = entry is not None and same(getattr(entry, "value", None), value)
        out.append(Loosened(path=path, value=value, default=floor, bounds="the served model's recipe",
                            basis=known.basis, source=None, accepted_by=who if ok else None,
                            accepted_on=when if ok else None, why=getattr(entry, "why", None) if ok else None,
                            floor_basis=f"the recipe of the model the target serves ({model}: {known.name}), whatever "
                            f"recipe.name says ({recipe.get('name')!r})"))
    return out

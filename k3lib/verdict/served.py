"""What the target showed of itself, as the settings table's floors need it (`k3lib.core.thresholds.SERVED`): the
model it serves (its `/v1/models`, from the probe's record) and that model's known recipe, and the GPU its samples
show with the bandwidth the kit's table gives it (the capacity record's roofline). Read from the records alone, so a
run is judged again the same way; whatever the parameters say, these are the target's own answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.evidence import EvidenceRecord
from ..core.recipes import known_recipe, served_recipe
from .shapes import ServedFacts

if TYPE_CHECKING:  # the capacity package loads its whole axis: a batch's start must not (tests/test_deferred_imports.py)
    from ..axes.capacity.run_shapes import RooflineBound

__all__ = ["served_facts", "served_models"]


def served_models(records: dict[str, EvidenceRecord]) -> list[str]:
    """The model ids and roots the target serves (the probe's `/v1/models`), whatever the parameters name."""
    probe = records.get("probe")
    if probe is None or probe.axis != "probe":
        return []
    cards = probe.typed().served_models
    return [str(v) for c in cards for v in (c.id, c.root) if v]


def _roofline_bound(records: dict[str, EvidenceRecord]) -> RooflineBound:
    cap = records.get("capacity")
    for f in (cap.findings if cap is not None else ()):
        if f.rule == "capacity.roofline" and isinstance(f.evidence, dict):
            bound: RooflineBound | None = f.evidence.get("bound")
            return bound if isinstance(bound, dict) else {}
    return {}


def served_facts(records: dict[str, EvidenceRecord], recipe_name: object = None) -> ServedFacts:
    """The facts the served-basis floors rest on. The recipe is the served model's; where the kit knows no model the
    target serves (none read, or served under a name of its own: `--served-model-name llm` from `/mnt/models`), the
    one `recipe_name` names, if the kit knows it — a model's name is the target's to choose, and a name the kit
    does not know must not drop the floors of the model the operator says it is."""
    models = served_models(records)
    found = served_recipe(models)
    if found is None and (named := known_recipe(recipe_name)) is not None:
        found = (named, f"{', '.join(models)}, named {recipe_name} by the parameters" if models else str(recipe_name))
    out: ServedFacts = {}
    if found is not None:
        out.update({"recipe": dict(found[0].judged), "recipe_name": found[0].name, "recipe_model": found[1]})
    bound = _roofline_bound(records)
    if gpu := bound.get("gpu_shown"):
        out.update({"gpu": gpu, "hbm_tb_s": bound.get("hbm_table_tb_s")})
    return out

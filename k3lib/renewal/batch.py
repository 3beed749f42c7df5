"""The review batch: the six axis notebooks then the summary, each rendered to offline HTML, and the decision.

It mirrors the acceptance batch (`k3lib.runner`) and reuses its notebook execution, progress lines, failure
records and report rendering. A failing axis notebook is recorded as a failing axis, and the decision is then
taken without that axis' evidence (never counted as favourable).
"""

from __future__ import annotations

from typing import Callable

from ..errors import BadInputError
from ..report import write_index
from ..runner import PRELOAD, Progress, render_pages, run_notebooks
from ..session import PROJECT_ROOT, read_records
from ..store import RunStore
from .decision import DECISIONS, RenewalDecision
from .params import RenewalParams, load_review_params
from .records import decide_review
from .review import write_axes_cache

# (notebook file in notebooks/, axis id written to evidence/<axis>.json), by stage: the analyses only read the
# run's inputs, so they run two at a time; the drill (15) is the only one that touches a target.
REVIEW_STAGES: tuple[tuple[tuple[str, str], ...], ...] = (
    (("11_load.ipynb", "load"), ("12_useful_production.ipynb", "production")),
    (("13_api_comparison.ipynb", "comparison"), ("14_cost.ipynb", "cost")),
    (("15_stability.ipynb", "stability"), ("16_operations.ipynb", "operations")),
)
REVIEW: tuple[tuple[str, str], ...] = tuple(pair for stage in REVIEW_STAGES for pair in stage)
REVIEW_SUMMARY = "19_renewal.ipynb"
DEMO_PARAMS = PROJECT_ROOT / "parameters" / "renewal-demo.yaml"


def run_review(params: RenewalParams, store: RunStore, *, progress: Progress | None = None,
               on_start: Callable[[str], None] | None = None) -> RenewalDecision:
    """Run every review notebook on the run's inputs, then decide from the evidence records."""
    if params.review.demo is not None and params.review.inputs is None:
        from .demo import materialise

        params = materialise(params, store.path("inputs"))
        for f in sorted(store.path("inputs").iterdir()):
            store.adopt(f"inputs/{f.name}")  # the generated inputs are evidence too
    if on_start:
        s = params.review.series
        on_start(s.history_file or s.prometheus_url or "")  # type: ignore[union-attr]
    stages = [*REVIEW_STAGES, ((REVIEW_SUMMARY, None),)]
    progress = progress or Progress(sum(len(stage) for stage in stages))
    store.write_json("params.json", params.public_dict())

    def prepare() -> None:  # while the first notebooks' kernels start: the inputs read, the axes computed, once
        try:
            write_axes_cache(params, store)  # each notebook reads them (review/axes.json)
        except Exception:  # noqa: BLE001 - a bad input or an unreachable source: each notebook reports it
            pass

    outcomes = run_notebooks(store, stages, timeout_s=params.run.notebook_timeout_s, progress=progress,
                             preload=(*PRELOAD, "k3lib.renewal"),  # what every review notebook opens with
                             prepare=prepare)
    records = read_records(store)
    data = store.read_json("decision.json")
    if data is None or outcomes[REVIEW_SUMMARY].status != "ok" or data.get("decision") not in DECISIONS \
            or not isinstance(data.get("findings"), list):
        decision = decide_review(params, store, records)  # the summary failed: same rules, same records
    else:
        decision = RenewalDecision.from_dict(data)
    pages = render_pages(store, [nb for stage in stages for nb, _ in stage], dict(REVIEW), records, outcomes)
    shown = {"decision": decision.decision,
             "reasons": [f"rule: {decision.rule}", f"condition: {decision.condition}", parameters_line(params),
                         *decision.reasons]
             + [f"transfer trigger — {t['trigger']}: {t['when']}" for t in (decision.routing or {}).get(
                 "transfer_triggers", [])]}
    write_index(store, "k3kit renewal review", shown, pages, kind="renewal")
    return decision


def parameters_line(params: RenewalParams) -> str:
    """Where the fixed elements and thresholds came from, in one line (19_renewal shows each with its origin)."""
    from collections import Counter

    from .params import tracked_keys

    keys = [k for k in tracked_keys() if k.startswith(("review.fixed.", "review.rules."))]
    by_origin = Counter(params.review.origin(k) for k in keys)
    return ("fixed elements and thresholds (each with its origin on top of 19_renewal): "
            + ", ".join(f"{n} from {origin}" for origin, n in by_origin.most_common()))


def load_review_request(files: list[str], sets: list[str], demo: str | None) -> RenewalParams:
    """The review parameters from `k3 review`'s arguments: the files and overrides, or a demo scenario (whose own
    generated inputs replace any the files give). Bad input raises BadInputError before any run folder exists."""
    from .demo import SCENARIOS

    if demo is not None and demo not in SCENARIOS:
        raise BadInputError(f"unknown demo scenario {demo!r}; expected one of {', '.join(SCENARIOS)}",
                            source="--demo")
    if not files and demo is None:
        raise BadInputError("no parameters file given; expected -p FILE (e.g. -p parameters/renewal-demo.yaml) or "
                            "--demo steady|idle-heavy|spiky|poor", source="k3 review")
    if demo is not None:
        files = files or [str(DEMO_PARAMS)]
        sets = [*sets, f"review.demo={demo}", "review.inputs=null", "review.series=null"]
    return load_review_params(files, sets)

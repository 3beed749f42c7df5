"""The review batch: the six axis notebooks then the summary, each rendered to offline HTML, and the decision.

It stands on the shared batch layer (`k3lib.batch`) as the acceptance batch does: the same notebook execution,
progress lines, failure records and report rendering. A failing axis notebook is recorded as a failing axis, and
the decision is then taken without that axis' evidence (never counted as favourable).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import httpx

from ..core.errors import BadInputError, K3Error
from ..core.plan import REVIEW, REVIEW_STAGES, REVIEW_SUMMARY, review_plan
from ..core.session import PROJECT_ROOT
from ..core.store import RunStore
from ..renewal.decision import DECISIONS, RenewalDecision
from ..renewal.demo import SCENARIOS
from ..renewal.inputs import read_costs, read_hours, read_incidents, read_tasks, resolve_currency
from ..renewal.params import RenewalParams, load_review_params, tracked_keys
from ..renewal.records import decide_review
from ..renewal.review import resolve_run, run_params, write_axes_cache
from ..verdict.shapes import DecisionDoc
from .execute import PRELOAD, Progress, publish, run_batch

__all__ = ["DEMO_PARAMS", "REVIEW", "REVIEW_STAGES", "REVIEW_SUMMARY", "check_review_inputs", "load_review_request",
           "parameters_line", "run_review"]

#: how long the review waits for Prometheus to answer one instant query before the run is refused
PROMETHEUS_CHECK_S = 5.0

DEMO_PARAMS = PROJECT_ROOT / "parameters" / "renewal-demo.yaml"


def run_review(params: RenewalParams, store: RunStore, *, progress: Progress | None = None,
               on_start: Callable[[str], None] | None = None) -> RenewalDecision:
    """Run every review notebook on the run's inputs, then decide from the evidence records. The run is opened by
    the review's entry point (`resolve_run`: the demo's inputs generated, the deployment resolved from its
    acceptance run, params.json written once); what runs after it reads the run's params.json, as each notebook
    does: the axes computed before the notebooks, and the decision when the summary notebook took none."""
    params = resolve_run(params, store)
    if on_start:
        on_start(params.review.series.location)  # type: ignore[union-attr]

    plan = review_plan(REVIEW_STAGES)
    # the batch's progress stream: prepare's error goes there too
    lines = progress or Progress(len(plan.notebooks), run_dir=store.root)

    def prepare() -> None:  # while the first notebooks' kernels start: the inputs read, the axes computed, once
        try:
            write_axes_cache(run_params(store), store)  # each notebook reads them (review/axes.json)
        except BadInputError:
            raise  # a bad input (a history file that does not parse) ends the review before any notebook runs
        except Exception as exc:  # noqa: BLE001 - the batch goes on: each notebook reports it in its own page
            lines.note(f"axes not computed before the notebooks: {_one_line(exc)} (each notebook reports it)")

    result = run_batch(store, plan, timeout_s=params.run.notebook_timeout_s,
                       progress=lines, preload=(*PRELOAD, "k3lib.renewal"),  # what every review notebook opens with
                       prepare=prepare)
    data = result.decision_data
    if data is None or data.get("decision") not in DECISIONS or not isinstance(data.get("findings"), list):
        decision = decide_review(run_params(store), store, result.records)  # the summary failed: same rules, records
    else:
        decision = RenewalDecision.model_validate(data)
    shown: DecisionDoc = {"decision": decision.decision,
             "reasons": [f"rule: {decision.rule}", f"condition: {decision.condition}", parameters_line(params),
                         *decision.reasons]
             + [f"transfer trigger — {t['trigger']}: {t['when']}" for t in (
                 decision.routing["transfer_triggers"] if decision.routing else [])]}
    publish(store, result, shown)
    return decision


def check_review_inputs(params: RenewalParams) -> None:
    """Before a run folder exists: every input file read with the review's own readers (one BadInputError line for
    the first bad value) and Prometheus answering, within seconds. A demo's inputs are generated: nothing to read."""

    inp, series = params.review.inputs, params.review.series
    if inp is not None:
        read_tasks(inp.tasks)
        resolve_currency(params.review.currency, read_costs(inp.costs), inp.costs)
        read_incidents(inp.incidents)
        read_hours(inp.hours)
    if series is not None and series.prometheus_url:
        _reach_prometheus(series.prometheus_url)


def _reach_prometheus(url: str) -> None:
    where = f"{url}/api/v1/query"
    try:
        resp = httpx.get(where, params={"query": "1"}, timeout=PROMETHEUS_CHECK_S)
        body = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        raise BadInputError(f"Prometheus does not answer at {url} ({type(exc).__name__}: {exc}); check the URL and "
                            "that this machine reaches it", field="review.series.prometheus_url") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        raise BadInputError(f"{where} answers {resp.status_code} without a Prometheus query result: is this the "
                            "Prometheus server's root URL?", field="review.series.prometheus_url")


def _one_line(exc: Exception) -> str:
    """An exception as the CLI would print it: a kit error its message, anything else an internal error."""
    if isinstance(exc, BadInputError):
        return exc.one_line()
    if isinstance(exc, K3Error):
        return " ".join(str(exc).split())
    return " ".join(f"internal error: {type(exc).__name__}: {exc}".split())


def parameters_line(params: RenewalParams) -> str:
    """Where the fixed elements and thresholds came from, in one line (19_renewal shows each with its origin)."""

    keys = [k for k in tracked_keys() if k.startswith(("review.fixed.", "review.rules."))]
    by_origin = Counter(params.review.origin(k) for k in keys)
    loosened = params.review.loosened()
    return ("fixed elements and thresholds (each with its origin on top of 19_renewal): "
            + ", ".join(f"{n} from {origin}" for origin, n in by_origin.most_common())
            + ("; loosened toward renew: " + ", ".join(f"{x['name']} {x['value']} (built-in {x['default']})"
                                                       for x in loosened) if loosened else ""))


def load_review_request(files: list[str], sets: list[str], demo: str | None) -> RenewalParams:
    """The review parameters from `k3 review`'s arguments: the files and overrides, or a demo scenario (whose own
    generated inputs replace any the files give). Bad input raises BadInputError before any run folder exists."""

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

"""The go-live kit written from an accepted, intact run: alerts.yml, dashboard.json and ROLLBACK.md, atomic file by
file, and what the operator must know before arming them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import BadInputError, EvidenceError
from ..core.store import RunStore, atomic_write_bytes
from ..core.roles import Loosened
from ..verdict import accepted as acc
from .alerts import alerts_yaml, build_alerts
from .dashboard import build_dashboard
from .options import ACCEPTED_DECISIONS, ALERTS_FILE, DASHBOARD_FILE, ROLLBACK_FILE, GoliveKit, GoliveOptions
from .queries import KitContext, PromQuery, metric_names
from .rollback import rollback_md


def write_golive_kit(run_dir: str | Path, out_dir: str | Path, *, options: GoliveOptions | None = None) -> GoliveKit:
    """Write alerts.yml, dashboard.json and ROLLBACK.md for an accepted, intact run (atomic file by file)."""
    opts = options or GoliveOptions()
    store = RunStore.open(run_dir)
    problems = store.verify()
    if problems:
        raise EvidenceError(f"{store.root}: does not verify, no thresholds taken from it: " + "; ".join(problems))
    run = acc.read_run(run_dir)
    decision = (run.decision or {}).get("decision")
    if decision not in ACCEPTED_DECISIONS:
        raise BadInputError(f"the run's decision is {decision!r}; a go-live kit comes from an accepted run "
                            f"({' or '.join(ACCEPTED_DECISIONS)})", source=str(run_dir))
    version = acc.vllm_version(run).value
    names = metric_names(version, acc.observed_metric_names(run).value)
    levels = acc.levels(run, (acc.queue_time_p95_s, acc.kv_usage_at_planned, acc.preemptions_per_s, acc.error_ratio,
                              acc.prefix_hit_rate, acc.tool_call_validity, acc.planned_concurrency,
                              acc.contract_context_tokens))
    ctx = KitContext(run, version, levels, names, PromQuery(opts, names, version), opts)
    rules, omitted = build_alerts(ctx)
    out = Path(out_dir)
    files = {
        ALERTS_FILE: alerts_yaml(ctx, rules).encode(),
        DASHBOARD_FILE: (json.dumps(build_dashboard(ctx), indent=2, ensure_ascii=False) + "\n").encode(),
        ROLLBACK_FILE: rollback_md(ctx, rules, omitted).encode(),
    }
    try:
        for name, data in files.items():
            atomic_write_bytes(out / name, data)
    except OSError as exc:
        raise BadInputError(f"cannot write the go-live kit: {exc.strerror}", source=str(out)) from None
    return GoliveKit(out, tuple(out / n for n in files), tuple(r["alert"] for r in rules), omitted, names,
                     golive_warnings(run.decision or {}))


def golive_warnings(decision: Mapping[str, Any]) -> tuple[str, ...]:
    """Said before arming: a `limited-observation` run's kit holds under its traffic cap only; a run shortened by
    loosened settings (steps, soak, repetitions below their floors) measured its levels on less load."""
    out = []
    if decision.get("decision") == "limited-observation":
        out.append(f"the run decided limited-observation: these alerts hold only under its traffic cap "
                   f"({json.dumps(decision.get('traffic_cap'), ensure_ascii=False)}), until "
                   f"{decision.get('reexamine_on')}")
    short = []
    for d in decision.get("loosened_thresholds") or ():
        try:
            short.append(Loosened.model_validate(d).short())
        except (TypeError, ValueError):
            continue
    if short:
        out.append("its levels were measured by a shortened run (" + "; ".join(short) + "): run the recipe's "
                   "defaults before arming alerts on production traffic")
    return tuple(out)

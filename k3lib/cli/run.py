"""The commands that run a batch and print its decision: `k3 validate` (and `--resume`), `k3 demo`, `k3 review`,
`k3 paths`, and `k3 emulator`, which serves the embedded emulator. The CLI imports this module when one runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..axes.paths.config import load_paths_params
from ..axes.paths.figures import paths_lines
from ..axes.paths.record import compare_fixed, read_paths_record
from ..axes.paths.run import check_endpoints, run_paths
from ..axes.paths.tasks import load_task_set
from ..batch.acceptance import check_resume, duration, plan_estimates, plan_lines, run_acceptance
from ..batch.preflight import preflight
from ..batch.renewal import check_review_inputs, load_review_request, run_review
from ..batch.stop import Stopped
from ..core.errors import BadInputError
from ..core.layering import check_command
from ..core.params import load_params, load_params_json
from ..core.session import PROJECT_ROOT, adopt_folder, outputs_dir
from ..core.store import RunStore
from ..core.target import require_api_key
from ..emulator.cli import config_from_args
from ..emulator.faults import parse_scoped
from ..emulator.profiles import PROFILES
from ..io.target import emulator_config, resolve_target
from ..renewal.decision import RenewalOutcome
from ..renewal.imports.exports import materialise_from_exports
from ..report.missing import missing_lines
from ..verdict.baseline import compare_with_baseline, precheck_baseline


def _emulator_sets(faults: list[str], profile: str | None) -> list[str]:
    """--fault/--profile as parameter overrides, each checked before anything starts."""
    sets = []
    for fault in faults:
        parse_scoped(fault)  # an unknown fault or a bad value is bad input, named before anything starts
    if profile and profile not in PROFILES:
        raise BadInputError(f"unknown emulator profile {profile!r}; expected one of {sorted(PROFILES)}",
                            source="--profile")
    if faults:
        sets.append("target.emulator.faults=" + json.dumps(faults))
    if profile:
        sets.append(f"target.emulator.profile={profile}")
    return sets


def _load(files: list[str], sets: list[str], faults: list[str], profile: str | None):
    if not files:
        raise BadInputError("no parameters file given; expected -p FILE (e.g. -p parameters/emulator.yaml)",
                            source="k3 validate")
    params = load_params(files, [*sets, *_emulator_sets(faults, profile)])
    if (faults or profile) and not params.target.uses_emulator:
        raise BadInputError("--fault and --profile apply to the embedded emulator only, but target.base_url is "
                            f"set to {params.target.base_url}", source="--fault/--profile")
    if params.target.uses_emulator:
        emulator_config(params)  # a fault on a rank the profile lacks is bad input before a run folder exists
    return params


def _run_acceptance(params, out: str | None, baseline: str | None = None, resume: str | None = None,
                    plan_only: bool = False) -> int:
    """The target resolved (the emulator started when the parameters name none), the preflight, the plan; then,
    unless `plan_only`, the run folder and the batch. Any preflight failure is bad input: exit 2, no run folder."""

    require_api_key(params)
    if baseline:
        precheck_baseline(baseline, params.recipe.build)
    target = resolve_target(params)
    try:
        report = preflight(params, target.base_url, target.metrics_urls, target.headers())
        print(report.line(), file=sys.stderr)
        for note in report.notes:
            print(f"preflight: note: {note}", file=sys.stderr)
        embedded = target.emulator is not None
        for line in plan_lines(params, report.speed, embedded=embedded, measured=report.speed is not None):
            print(line, file=sys.stderr if not plan_only else sys.stdout)
        if plan_only:
            return 0
        axes, total = plan_estimates(params, report.speed, embedded=embedded)
        plan = {"total_s": round(total, 1), "axes": [a.model_dump(mode="json") for a in axes],
                "speed": report.model_dump()["speed"]}
        return _acceptance_batch(params, target, report, plan, out, baseline, resume)
    finally:
        target.stop()


def _acceptance_batch(params, target, report, plan: dict, out: str | None, baseline: str | None,
                      resume: str | None) -> int:
    store = RunStore.open(resume) if resume else RunStore.create(Path(out) if out else outputs_dir(),
                                                                 label=params.run.label)
    print(f"run: {store.root}", file=sys.stderr)
    store.write_json("preflight.json", report.model_dump())
    store.write_json("plan.json", plan)  # what the axes count their time left from
    t0 = time.monotonic()
    try:
        decision = run_acceptance(params, store, resume=bool(resume), target=target)
    except KeyboardInterrupt as exc:
        raise Interrupted(exc, store.root, f"k3 validate --resume {store.root}") from None
    if baseline:
        comparison = compare_with_baseline(store.root, baseline)
        store.write_json("baseline.json", comparison.model_dump(mode="json"))
        for line in comparison.lines():
            print(line)
    _print_decision(decision, store)
    print(f"took {duration(time.monotonic() - t0)} (planned about {duration(plan['total_s'])})", file=sys.stderr)
    return decision.exit_code


def _print_decision(decision, store) -> None:
    print(f"decision: {decision.line}")
    for line in missing_lines(decision.model_dump()):
        print(line)
    print(f"report: {store.path('report/index.html')}")
    print(f"run: {store.root}")


class Interrupted(KeyboardInterrupt):
    """A batch stopped by SIGINT/SIGTERM: what the CLI says (the finished evidence kept, how to go on) and exits
    with (128 + the signal)."""

    def __init__(self, cause: BaseException, run: Path, resume: str | None) -> None:
        self.signal_name = cause.signal_name if isinstance(cause, Stopped) else "SIGINT"
        self.exit_code = cause.exit_code if isinstance(cause, Stopped) else 130
        self.run, self.resume = run, resume
        super().__init__(self.message())

    def message(self) -> str:
        then = f"; to finish it: {self.resume}" if self.resume else "; run the same command again for a new review"
        return (f"stopped by {self.signal_name}: every request in flight was cancelled and the load ended; the "
                f"finished axes are kept in {self.run}{then}")


def cmd_validate(ns: argparse.Namespace) -> int:
    if ns.resume:
        if ns.params or ns.sets or ns.fault or ns.profile or ns.out:
            raise BadInputError("--resume takes the run's own request.json; give no -p, --set, --fault, --profile "
                                "or --out with it", source="--resume")
        request = Path(ns.resume) / "request.json"
        if not request.is_file():
            raise BadInputError("not an acceptance run folder (no request.json)", source=ns.resume)
        check_resume(RunStore.open(ns.resume))  # before trusting request.json or any finished axis
        return _run_acceptance(load_params_json(request), None, ns.baseline, ns.resume, plan_only=ns.plan)
    params = _load(ns.params, ns.sets, ns.fault, ns.profile)
    return _run_acceptance(params, ns.out, ns.baseline, plan_only=ns.plan)


def cmd_demo(ns: argparse.Namespace) -> int:
    name = "emulator-2node.yaml" if ns.two_node else "emulator.yaml"
    params = _load([str(PROJECT_ROOT / "parameters" / name)], [], ns.fault, ns.profile)
    code = _run_acceptance(params, ns.out)
    if not ns.no_review:
        print("", flush=True)
        review_main([], _emulator_sets(ns.fault, ns.profile), ns.out, ns.review)
    return code


def review_main(files: list[str], sets: list[str], out: str | None, demo: str | None,
                from_exports: bool = False) -> int:
    """`k3 review -p FILE … [--set K=V] [--out DIR] [--demo SCENARIO]`: run the review, print the decision, return
    its exit code (`RenewalOutcome.exit_code`: 0 renew, 3 reduce, 4 dual-circuit, 5 exit-to-api). Bad input raises
    BadInputError before any run folder exists."""

    if from_exports and demo is None:
        raise BadInputError("--from-exports reviews a demo scenario from its exports; expected --demo SCENARIO (for "
                            "your own records: k3 import, then k3 review -p FILE)", source="--from-exports")
    params = load_review_request(files, sets, demo)
    check_review_inputs(params)  # every input read and Prometheus reached before a run folder or a notebook
    store = RunStore.create(Path(out) if out else outputs_dir(), label=params.run.label or "review")
    print(f"run: {store.root}", file=sys.stderr)
    if from_exports:  # the sheet's exports written and imported into the run's inputs/, hashed as evidence
        params = materialise_from_exports(params, store.path("inputs"))
        for folder in ("inputs", "inputs/exports", "inputs/imported"):
            adopt_folder(store, folder)
        print(f"imported: {params.review.inputs.costs}, {params.review.inputs.incidents}, "  # type: ignore[union-attr]
              f"{params.review.inputs.hours}", file=sys.stderr)  # type: ignore[union-attr]
    try:
        decision = run_review(params, store, on_start=lambda src: print(f"series: {src}", file=sys.stderr))
    except KeyboardInterrupt as exc:
        raise Interrupted(exc, store.root, None) from None
    print(f"decision: {decision.decision}")
    if decision.target_kind is not None:
        print(f"demo: a generated demonstration (review.demo: {params.review.demo}), its drill the kit's emulator — "
              "not a review of a deployment; `k3 sign` refuses it without --demo")
    print(f"rule: {decision.rule}")
    for reason in decision.reasons:
        print(f"  - {reason}")
    print(f"condition: {decision.condition}")
    print(f"report: {store.path('report/index.html')}")
    print(f"run: {store.root}")
    return RenewalOutcome(decision.decision).exit_code


def cmd_review(ns: argparse.Namespace) -> int:
    check_command(list(ns.params or []), "k3 review")
    return review_main(ns.params, [*ns.sets, *_emulator_sets(ns.fault, ns.profile)], ns.out, ns.demo,
                       ns.from_exports)


def paths_main(files: list[str], sets: list[str], out: str | None, compare: str | None = None) -> int:
    """`k3 paths`: run, write the record, print it; with `compare`, flag any fixed element that changed."""

    params = load_paths_params(list(files), list(sets))
    tasks = load_task_set(params.paths.task_set)  # bad input is refused before a run folder exists
    check_endpoints(params)
    before = read_paths_record(compare) if compare else None
    store = RunStore.create(Path(out) if out else outputs_dir(), label=params.paths.label)
    print(f"run: {store.root}", file=sys.stderr)
    result = run_paths(params, store, tasks)
    for line in paths_lines(result):
        print(line)
    if before is not None:
        changed = compare_fixed(before, result)
        store.write_json("paths/compare.json", {"with": str(compare), "changed": changed})
        for line in changed or ["the four fixed elements are the same as in " + str(compare)]:
            print(("CHANGED " if changed else "") + line)
    print(f"evidence: {store.path('evidence/paths.json')}")
    return 0


def cmd_paths(ns: argparse.Namespace) -> int:
    return paths_main(ns.params, ns.sets, ns.out, ns.compare)


def cmd_emulator(ns: argparse.Namespace) -> int:
    from ..emulator import serve_forever  # the HTTP stack (starlette, uvicorn) loads only to serve

    try:
        cfg = config_from_args(ns)
    except (KeyError, ValueError) as exc:
        raise BadInputError(str(exc).strip("'\""), source="k3 emulator") from None
    serve_forever(cfg, host=ns.host, port=ns.port)
    return 0

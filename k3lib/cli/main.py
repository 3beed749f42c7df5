"""The `k3` command line (also `python -m k3lib`).

Exit codes: 0 production · 3 limited-observation · 4 capacity-extension · 5 environment-rebuild (validate, demo);
0 renew · 3 reduce · 4 dual-circuit · 5 exit-to-api (review);
2 bad input, always one line on stderr naming the input; 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..core.errors import BadInputError, K3Error

from ..io.readers.kinds import KINDS as INSPECTORS


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInputError(f"{message} (see `{self.prog} --help`)", source=self.prog)


def _add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--params", action="append", default=[], metavar="FILE",
                   help="parameters file (YAML); repeat to layer files left to right")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", dest="sets",
                   help="override one parameter after the files, e.g. --set contract.planned_concurrency=8")
    p.add_argument("--out", metavar="DIR", help="folder that receives the run folder (default: outputs/)")
    p.add_argument("--fault", action="append", default=[], metavar="NAME[=VALUE]",
                   help="for the embedded emulator: inject a fault (repeatable), e.g. kv-starved")
    p.add_argument("--profile", metavar="NAME", help="for the embedded emulator: hardware/model profile")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="k3", description="k3kit: evidence-backed acceptance of a vLLM / OpenAI-compatible "
                                            "deployment.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    v = sub.add_parser("validate", help="run the acceptance batch and decide",
                       description="Run the acceptance notebooks against the target, write the evidence, the "
                                   "rendered report and decision.json. Exit 0 production, 3 limited-observation, "
                                   "4 capacity-extension, 5 environment-rebuild, 2 bad input, 1 internal error.")
    _add_target_options(v)
    v.add_argument("--resume", metavar="RUN",
                   help="finish an interrupted run in place: the axes whose notebook and evidence are intact are kept, "
                        "the others re-run against a target started from the run's request.json")
    v.add_argument("--baseline", metavar="RUN",
                   help="an accepted run to compare with: a changed image, driver, vLLM, topology or context limit "
                        "reopens the sheet; metrics outside the accepted band are listed as drift")
    v.set_defaults(func=cmd_validate)

    d = sub.add_parser("demo", help="run the whole demo on the embedded emulator",
                       description="Acceptance batch against the embedded vLLM-compatible emulator with "
                                   "parameters/emulator.yaml; prints the decision and the report path.")
    d.add_argument("--out", metavar="DIR", help="folder that receives the run folder (default: outputs/)")
    d.add_argument("--fault", action="append", default=[], metavar="NAME[=VALUE]",
                   help="inject an emulator fault (repeatable), e.g. --fault tool-markup-leak=0.5")
    d.add_argument("--profile", metavar="NAME", help="emulator profile (demo, demo-2node, kimi-k3-h200x16)")
    d.add_argument("--two-node", action="store_true",
                   help="the two-node case: parameters/emulator-2node.yaml, four DP ranks over two node processes, "
                        "judged per rank (add --fault kv-starved@3 to break one rank)")
    d.add_argument("--review", metavar="SCENARIO", default="steady",
                   help="renewal demo scenario reviewed after the acceptance batch: steady (default), idle-heavy, "
                        "spiky, poor")
    d.add_argument("--no-review", action="store_true", help="run the acceptance batch only")
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("review", help="run the three-week renewal review and decide",
                       description="Read three weeks of operation (series from Prometheus or a history file, task "
                                   "log, costs, incidents, hours), run the incident drill, and decide: exit 0 renew, "
                                   "3 reduce, 4 dual-circuit, 5 exit-to-api, 2 bad input, 1 internal error.")
    _add_target_options(r)  # the embedded emulator there is the incident drill's target
    r.add_argument("--demo", metavar="SCENARIO",
                   help="generate and review a deterministic three-week history: steady, idle-heavy, spiky, poor")
    r.set_defaults(func=cmd_review)

    pa = sub.add_parser("paths", help="run the same task set on each path (self-hosted vs API), live",
                        description="Send one fixed task set to each named endpoint with one request format, one "
                                    "retry policy and one quality rule; print per-path acceptance, paired "
                                    "differences and cost per accepted task. Exit 0 done, 2 bad input.")
    pa.add_argument("-p", "--params", action="append", default=[], metavar="FILE",
                    help="parameters file with a paths: section (see parameters/paths.example.yaml); repeatable")
    pa.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", dest="sets",
                    help="override one parameter after the files, e.g. --set paths.retry.max_retries=1")
    pa.add_argument("--out", metavar="DIR", help="folder that receives the run folder (default: outputs/)")
    pa.add_argument("--compare", metavar="RUN", help="an earlier `k3 paths` run: flag any fixed element that changed")
    pa.set_defaults(func=cmd_paths)

    e = sub.add_parser("emulator", help="serve the vLLM-compatible emulator",
                       description="Serve the embedded vLLM-compatible emulator; prints its URL on the first "
                                   "line and serves until interrupted.")
    _emulator_arguments(e)
    e.set_defaults(func=cmd_emulator)

    i = sub.add_parser("inspect", help="read artifacts and print what the kit finds in them",
                       description="Read artifacts (collect_env report, nvidia-smi output, vLLM log, /metrics "
                                   "exposition, chat reply) and print the fields the kit uses; a field the "
                                   "artifact does not show is null, a cut artifact is marked truncated. Exit 2 "
                                   "when a file is none of the kind's formats.")
    isub = i.add_subparsers(dest="kind", metavar="KIND", parser_class=_Parser)
    kinds = {**{k: what for k, (_, _, what) in INSPECTORS.items()},
             "auto": "any artifact, guessing its kind (printed as kind and kind_reason)"}
    for kind, what in kinds.items():
        k = isub.add_parser(kind, help=f"read {what}", description=f"Read {what} and print its fields.")
        k.add_argument("sources", nargs="+", metavar="PATH" if kind != "metrics" else "PATH|URL",
                       help="files or folders (every file inside, recursively)"
                       + (", or a /metrics URL" if kind == "metrics" else "") + "; - for standard input")
        k.add_argument("--json", action="store_true",
                       help="print one JSON line per file, with its path and kind, instead of aligned text")
        k.set_defaults(func=cmd_inspect, inspect_kind=kind)

    sg = sub.add_parser("sign", help="sign a run's decision as its reviewer",
                        description="Write signature.json (reviewer, time, decision, the manifest's sha256); with "
                                    "--key, also sign manifest.json with `ssh-keygen -Y sign` (manifest.json.sig), "
                                    "verifiable by anyone with an allowed-signers file.")
    sg.add_argument("run", metavar="RUN", help="a run folder under outputs/")
    sg.add_argument("--reviewer", required=True, metavar="NAME", help="who reviewed and signs the sheet")
    sg.add_argument("--key", metavar="SSH_KEY", help="private SSH key to sign manifest.json with")
    sg.add_argument("--identity", metavar="PRINCIPAL",
                    help="signer identity for the allowed-signers file (default: the reviewer)")
    sg.add_argument("--force", action="store_true", help="replace an existing signature")
    sg.set_defaults(func=cmd_sign)

    ver = sub.add_parser("verify", help="check every file of a run against its manifest and signature",
                         description="Recompute the sha256 of every file listed in RUN/manifest.json and check the "
                                     "signature; exit 0 when all match, 1 naming each file that changed or is "
                                     "missing.")
    ver.add_argument("run", metavar="RUN", help="a run folder under outputs/")
    ver.add_argument("--allowed-signers", metavar="FILE",
                     help="ssh allowed-signers file to verify manifest.json.sig against")
    ver.set_defaults(func=cmd_verify)

    gl = sub.add_parser("golive", help="write alert rules, dashboard and rollback triggers from an accepted run",
                        description="From an accepted run: Prometheus alerting rules whose thresholds come from the "
                                    "run, a Grafana dashboard and ROLLBACK.md. A threshold that cannot be derived "
                                    "is omitted and said so, never invented.")
    gl.add_argument("run", metavar="RUN", help="an accepted run folder")
    gl.add_argument("--out", required=True, metavar="DIR", help="folder for alerts.yml, dashboard.json, ROLLBACK.md")
    gl.add_argument("--job", metavar="NAME", help="Prometheus job label of the vLLM scrape (default: vllm)")
    gl.add_argument("--traffic-hit-rate", type=float, metavar="RATE",
                    help="prefix-cache hit rate (0-1) your ordinary traffic reaches: arms the hit-rate alert")
    gl.add_argument("--for", dest="sustained_for", metavar="DURATION",
                    help="how long a breach must last before an alert fires (default: 10m)")
    gl.set_defaults(func=cmd_golive)

    cp = sub.add_parser("compare", help="compare a run with an accepted baseline",
                        description="Exit 0 when the deployment is proven the same and no metric drifted, 1 when "
                                    "the sheet reopens, a metric drifted or an identity item (the image digest…) "
                                    "could not be verified, 2 when the runs cannot be compared.")
    cp.add_argument("run", metavar="RUN", help="the new run folder")
    cp.add_argument("--baseline", required=True, metavar="RUN", help="the accepted run folder")
    cp.set_defaults(func=cmd_compare)

    rp = sub.add_parser("report", help="re-render a run's report; --pdf prints the archive copy",
                        description="Render every executed notebook of RUN and the index that argues the decision "
                                    "(offline, one plotly.js per report folder). With --pdf FILE, print the index and "
                                    "the sheet with its figures to one PDF with headless Chromium and record its "
                                    "sha256 in RUN/report.json, which `k3 verify` checks. Before `k3 sign`: both "
                                    "change the manifest.")
    rp.add_argument("run", metavar="RUN", help="a run folder under outputs/")
    rp.add_argument("--pdf", metavar="FILE", help="write the PDF here (inside RUN, it is listed in the manifest)")
    rp.set_defaults(func=cmd_report)

    hi = sub.add_parser("history", help="trend page over every run under DIR; --textfile for node_exporter",
                        description="Read every run folder under DIR (acceptance and renewal), write DIR/history.html "
                                    "(decision per run, headline figures over time, drift against the accepted "
                                    "baseline) and with --textfile FILE the last run's results in the Prometheus "
                                    "text format for node_exporter's textfile collector.")
    hi.add_argument("dir", metavar="DIR", help="folder holding run folders (e.g. outputs/)")
    hi.add_argument("--out", metavar="FILE", help="trend page to write (default: DIR/history.html)")
    hi.add_argument("--baseline", metavar="RUN", help="the accepted run to compare with (default: the latest earlier "
                                                      "acceptance run that was accepted and signed, else accepted)")
    hi.add_argument("--textfile", metavar="FILE", help="write the last run's metrics here (e.g. "
                                                       "/var/lib/node_exporter/textfile/k3kit.prom)")
    hi.set_defaults(func=cmd_history)

    fl = sub.add_parser("fleet", help="re-validate every deployment of a fleet file; exit 1 when one regressed",
                        description="For each deployment of FLEET (or those named by --deployment): `k3 validate` "
                                    "into OUTPUTS/NAME/ with --baseline (the one named, else the latest accepted run "
                                    "there), then `k3 history` of that folder with its textfile, then the judgement. "
                                    "Exit 0 when none regressed, 1 when one did (its reasons on the line that names "
                                    "it: not comparable, the sheet reopened, an identity item unverified, drift, or "
                                    "a decision stronger than the baseline's), 2 on bad input.")
    fl.add_argument("fleet", metavar="FLEET", help="the fleet file (YAML; see deploy/airflow/fleet.example.yaml)")
    fl.add_argument("--deployment", action="append", default=[], metavar="NAME",
                    help="only this deployment (repeatable); default: all, one after the other")
    fl.add_argument("--list", action="store_true", help="print the deployments' names, one a line, and exit")
    fl.add_argument("--timeout", type=float, metavar="SECONDS", help="kill a deployment's validate after this long")
    fl.set_defaults(func=cmd_fleet)

    sc = sub.add_parser("schemas", help="rewrite the JSON Schemas in schemas/ from the code (for developers)",
                        description="Write the JSON Schemas of the evidence record, of each acceptance axis' data, "
                                    "of each renewal result and of the paths record into the repository's schemas/ "
                                    "folder, one line per file written. The tests fail while a committed schema "
                                    "differs from the code.")
    sc.set_defaults(func=cmd_schemas)
    return parser


def _emulator_arguments(e: argparse.ArgumentParser) -> None:
    try:
        from ..emulator.cli import add_arguments
    except ImportError:  # the emulator package is optional at import time of the CLI
        return
    add_arguments(e)


# ---------------------------------------------------------------------------------------------------------------


def _emulator_sets(faults: list[str], profile: str | None) -> list[str]:
    """--fault/--profile as parameter overrides, each checked before anything starts."""
    from ..emulator.faults import parse_scoped
    from ..emulator.profiles import PROFILES

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
    from ..core.params import load_params

    if not files:
        raise BadInputError("no parameters file given; expected -p FILE (e.g. -p parameters/emulator.yaml)",
                            source="k3 validate")
    params = load_params(files, [*sets, *_emulator_sets(faults, profile)])
    if (faults or profile) and not params.target.uses_emulator:
        raise BadInputError("--fault and --profile apply to the embedded emulator only, but target.base_url is "
                            f"set to {params.target.base_url}", source="--fault/--profile")
    if params.target.uses_emulator:
        from ..core.target import emulator_config

        emulator_config(params)  # a fault on a rank the profile lacks is bad input before a run folder exists
    return params


def _run_acceptance(params, out: str | None, baseline: str | None = None, resume: str | None = None) -> int:
    from ..batch.acceptance import run_acceptance
    from ..core.session import outputs_dir
    from ..core.store import RunStore
    from ..core.target import require_api_key

    require_api_key(params)
    if baseline:
        from ..verdict.baseline import precheck_baseline

        precheck_baseline(baseline, params.recipe.build)
    store = RunStore.open(resume) if resume else RunStore.create(Path(out) if out else outputs_dir(),
                                                                 label=params.run.label)
    print(f"run: {store.root}", file=sys.stderr)
    decision = run_acceptance(params, store, on_start=lambda url: print(f"target: {url}", file=sys.stderr),
                              resume=bool(resume))
    if baseline:
        from ..verdict.baseline import compare_with_baseline

        comparison = compare_with_baseline(store.root, baseline)
        store.write_json("baseline.json", comparison.to_dict())
        for line in comparison.lines():
            print(line)
    print(f"decision: {decision.decision}")
    for reason in decision.reasons:
        print(f"  - {reason}")
    print(f"report: {store.path('report/index.html')}")
    print(f"run: {store.root}")
    return decision.exit_code


def cmd_validate(ns: argparse.Namespace) -> int:
    if ns.resume:
        from ..core.params import load_params_json

        if ns.params or ns.sets or ns.fault or ns.profile or ns.out:
            raise BadInputError("--resume takes the run's own request.json; give no -p, --set, --fault, --profile "
                                "or --out with it", source="--resume")
        request = Path(ns.resume) / "request.json"
        if not request.is_file():
            raise BadInputError("not an acceptance run folder (no request.json)", source=ns.resume)
        return _run_acceptance(load_params_json(request), None, ns.baseline, ns.resume)
    params = _load(ns.params, ns.sets, ns.fault, ns.profile)
    return _run_acceptance(params, ns.out, ns.baseline)


def cmd_demo(ns: argparse.Namespace) -> int:
    from ..core.session import PROJECT_ROOT

    name = "emulator-2node.yaml" if ns.two_node else "emulator.yaml"
    params = _load([str(PROJECT_ROOT / "parameters" / name)], [], ns.fault, ns.profile)
    code = _run_acceptance(params, ns.out)
    if not ns.no_review:
        print("", flush=True)
        review_main([], _emulator_sets(ns.fault, ns.profile), ns.out, ns.review)
    return code


def review_main(files: list[str], sets: list[str], out: str | None, demo: str | None) -> int:
    """`k3 review -p FILE … [--set K=V] [--out DIR] [--demo SCENARIO]`: run the review, print the decision, return
    its exit code (`Decision.exit_code`: 0 renew, 3 reduce, 4 dual-circuit, 5 exit-to-api). Bad input raises
    BadInputError before any run folder exists."""
    from ..renewal.batch import load_review_request, run_review
    from ..renewal.decision import Decision
    from ..core.session import outputs_dir
    from ..core.store import RunStore

    params = load_review_request(files, sets, demo)
    store = RunStore.create(Path(out) if out else outputs_dir(), label=params.run.label or "review")
    print(f"run: {store.root}", file=sys.stderr)
    decision = run_review(params, store, on_start=lambda src: print(f"series: {src}", file=sys.stderr))
    print(f"decision: {decision.decision}")
    print(f"rule: {decision.rule}")
    for reason in decision.reasons:
        print(f"  - {reason}")
    print(f"condition: {decision.condition}")
    print(f"report: {store.path('report/index.html')}")
    print(f"run: {store.root}")
    return Decision(decision.decision).exit_code


def cmd_review(ns: argparse.Namespace) -> int:
    from ..core.params import check_command

    check_command(list(ns.params or []), "k3 review")
    return review_main(ns.params, [*ns.sets, *_emulator_sets(ns.fault, ns.profile)], ns.out, ns.demo)


def paths_main(files: list[str], sets: list[str], out: str | None, compare: str | None = None) -> int:
    """`k3 paths`: run, write the record, print it; with `compare`, flag any fixed element that changed."""
    from ..axes.paths.config import load_paths_params
    from ..axes.paths.record import compare_fixed, read_paths_record
    from ..axes.paths.figures import paths_lines
    from ..axes.paths.run import check_endpoints, run_paths
    from ..axes.paths.tasks import load_task_set
    from ..core.session import outputs_dir
    from ..core.store import RunStore

    params = load_paths_params(list(files), list(sets))
    tasks = load_task_set(params.paths.task_set)  # bad input is refused before a run folder exists
    check_endpoints(params)
    before = read_paths_record(compare) if compare else None
    store = RunStore.create(Path(out) if out else outputs_dir(), label=params.paths.label)
    print(f"run: {store.root}", file=sys.stderr)
    result = run_paths(params, store, tasks)
    _print_lines(paths_lines(result))
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
    from ..emulator import serve_forever
    from ..emulator.cli import config_from_args

    try:
        cfg = config_from_args(ns)
    except (KeyError, ValueError) as exc:
        raise BadInputError(str(exc).strip("'\""), source="k3 emulator") from None
    serve_forever(cfg, host=ns.host, port=ns.port)
    return 0


def _read_source(source: str, kind: str) -> str:
    if source == "-":
        return sys.stdin.read()
    if kind == "metrics" and source.startswith(("http://", "https://")):
        import httpx

        try:
            resp = httpx.get(source, timeout=10.0)
        except httpx.HTTPError as exc:
            raise BadInputError(f"cannot fetch: {exc}", source=source) from None
        if resp.status_code != 200:
            raise BadInputError(f"HTTP {resp.status_code}; expected 200 with a Prometheus exposition", source=source)
        return resp.text
    path = Path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInputError("file not found", source=source) from None
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror}", source=source) from None
    return data.decode("utf-8", errors="replace")


def _expand_sources(sources: list[str]) -> list[str]:
    """Files in the order given; a folder gives every non-hidden file under it, sorted."""
    out: list[str] = []
    for source in sources:
        path = Path(source)
        if source != "-" and path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise BadInputError("the folder holds no file to read", source=source)
            out += [str(p) for p in found]
        else:
            out.append(source)
    return out


def _inspect_one(source: str, kind: str) -> dict[str, Any]:
    from ..io.readers.kinds import guess_kind, inspect_as

    text = _read_source(source, kind)
    try:
        if kind == "auto":
            guessed, reason = guess_kind(text)
            return {"kind": guessed, "kind_reason": reason, **inspect_as(guessed, text)}
        return {"kind": kind, **inspect_as(kind, text)}
    except BadInputError as exc:
        exc.source = exc.source or source
        raise


def cmd_inspect(ns: argparse.Namespace) -> int:
    sources = _expand_sources(ns.sources)
    many = len(sources) > 1
    refused = 0
    for source in sources:
        try:
            result = _inspect_one(source, ns.inspect_kind)
        except BadInputError as exc:
            if not many:
                raise
            # One refused file does not stop the others: its line says why, and the exit code is 2.
            refused += 1
            print(f"k3: {exc.one_line()}", file=sys.stderr)
            if ns.json:
                print(json.dumps({"path": source, "kind": ns.inspect_kind, "error": exc.one_line()},
                                 ensure_ascii=False), flush=True)
            continue
        if ns.json:
            print(json.dumps({"path": source, **result}, ensure_ascii=False, default=str), flush=True)
            continue
        if many:
            print(f"== {source}")
        width = max((len(k) for k in result), default=0)
        for key, value in result.items():
            shown = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (dict, list)) else value
            print(f"{key:<{width}}  {shown}")
    return 2 if refused else 0


# -- post-run tools: the library returns values, these adapters print them -------------------------------------------

def _print_lines(lines: Any) -> None:
    for line in lines:
        print(line)


def cmd_sign(ns: argparse.Namespace) -> int:
    """`k3 sign RUN --reviewer NAME [--key FILE] [--identity ID] [--force]`."""
    from ..report.signing import SSH_SIG, sign_run

    record = sign_run(ns.run, ns.reviewer, key=getattr(ns, "key", None), identity=getattr(ns, "identity", None),
                      force=bool(getattr(ns, "force", False)))
    print(f"signed {record.run_id}: decision {record.decision}, reviewer {record.reviewer}, "
          f"manifest sha256 {record.manifest_sha256}")
    print("ssh signature: " + (f"{SSH_SIG} ({record.key_fingerprint})" if record.namespace else "none (no --key)"))
    return 0


def cmd_verify(ns: argparse.Namespace) -> int:
    """`k3 verify RUN [--allowed-signers FILE]`: 0 when every file and the signature match, 1 otherwise."""
    from ..report.signing import verify_run

    result = verify_run(ns.run, allowed_signers=getattr(ns, "allowed_signers", None))
    _print_lines(result.lines())
    return result.exit_code


def cmd_golive(ns: argparse.Namespace) -> int:
    """`k3 golive RUN --out DIR [--job NAME] [--traffic-hit-rate RATE] [--for DURATION]`."""
    from ..verdict.golive import GoliveOptions, write_golive_kit

    opts = GoliveOptions(job=getattr(ns, "job", None) or "vllm",
                         sustained_for=getattr(ns, "sustained_for", None) or "10m",
                         traffic_hit_rate=getattr(ns, "traffic_hit_rate", None))
    kit = write_golive_kit(ns.run, ns.out, options=opts)
    for path in kit.files:
        print(f"wrote {path}")
    print("alerts: " + ", ".join(kit.alerts))
    for name, why in kit.omitted.items():
        print(f"not armed: {name}: {why}")
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    """`k3 report RUN [--pdf FILE]`: re-render the run's pages and index; with --pdf, print the archive copy."""
    from ..report.pages import REPORT_JSON, print_pdf, rerender
    from ..core.store import RunStore

    store = RunStore.open(ns.run)
    if not ns.pdf or not store.path("report/index.html").is_file():
        print(f"report: {store.path(rerender(store))}")
    if ns.pdf:
        entry = print_pdf(store, ns.pdf)
        print(f"pdf: {entry['file']} ({entry['bytes']} bytes, sha256 {entry['sha256']}) recorded in "
              f"{store.path(REPORT_JSON)}")
    return 0


def cmd_history(ns: argparse.Namespace) -> int:
    """`k3 history DIR [--out FILE] [--baseline RUN] [--textfile FILE]`: one line per run, then the files written."""
    from ..report.history import history
    from ..core.store import MANIFEST

    baseline = Path(ns.baseline) if getattr(ns, "baseline", None) else None
    if baseline is not None and not (baseline / MANIFEST).is_file():
        raise BadInputError("not a k3kit run folder (no manifest.json)", source=str(baseline))
    points, out = history(Path(ns.dir), out=Path(ns.out) if ns.out else None,
                          textfile=Path(ns.textfile) if ns.textfile else None, baseline=baseline)
    for p in points:
        flags = f" drift {len(p.drift)}" if p.drift else ""
        flags += " REOPENED" if p.reopened else ""
        print(f"{p.started:%Y-%m-%d %H:%M} {p.kind:<10} {str(p.decision):<20} {p.run_id}{flags}")
    print(f"history: {out}")
    if ns.textfile:
        print(f"textfile: {ns.textfile}")
    return 0


def cmd_fleet(ns: argparse.Namespace) -> int:
    from ..batch.fleet import fleet_main

    if ns.timeout is not None and not ns.timeout > 0:
        raise BadInputError(f"expected a positive number of seconds, got {ns.timeout}", source="--timeout")
    return fleet_main(ns.fleet, ns.deployment, list_only=ns.list, timeout_s=ns.timeout,
                      out=lambda line: print(line, flush=True),
                      progress=lambda line: print(line, file=sys.stderr, flush=True))


def cmd_compare(ns: argparse.Namespace) -> int:
    """`k3 compare RUN --baseline RUN`: 0 same deployment (every identity item verified) and no drift; 1 the sheet
    reopens, a metric drifted, or an identity item (the image digest, the driver…) could not be verified;
    2 the runs cannot be compared (official vs custom build, or not run folders)."""
    from ..verdict.baseline import compare_with_baseline

    cmp = compare_with_baseline(ns.run, ns.baseline)
    _print_lines(cmp.lines())
    if cmp.refused:
        raise BadInputError(cmp.refused.message, source=str(ns.baseline))
    return 1 if cmp.reopens or cmp.drift or cmp.unverified else 0


def cmd_schemas(ns: argparse.Namespace) -> int:
    """`k3 schemas`: rewrite the JSON Schemas in schemas/ from the code, one line per file written."""
    from ..core.evidence import write_schemas
    from ..axes.paths.record import write_schema as write_paths_schema
    from ..renewal.results import write_schemas as write_renewal_schemas

    _print_lines(f"wrote {path}" for path in [*write_schemas(), *write_renewal_schemas(), write_paths_schema()])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
        if not getattr(ns, "func", None):
            parser.print_help()
            return 2
        return int(ns.func(ns) or 0)
    except BadInputError as exc:
        print(f"k3: {exc.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("k3: interrupted", file=sys.stderr)
        return 130
    except K3Error as exc:
        print(f"k3: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("K3_DEBUG"):
            raise
        print(f"k3: internal error: {type(exc).__name__}: {exc} (set K3_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())

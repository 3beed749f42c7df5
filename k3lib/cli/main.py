"""The `k3` command line (also `python -m k3lib`): the parser, the dispatch, and the two commands that rewrite files
from the code (`k3 report`, `k3 schemas`). The other commands sit in `run`, `inspect`, `sign` and `baseline`.

Exit codes: 0 production · 3 limited-observation · 4 capacity-extension · 5 environment-rebuild (validate, demo);
0 renew · 3 reduce · 4 dual-circuit · 5 exit-to-api (review);
2 bad input, always one line on stderr naming the input; 1 internal error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Callable

from ..batch.stop import stop_signals
from ..core.errors import BadInputError, K3Error
from ..io.readers.kinds import KINDS as INSPECTORS
from . import verbosity
from .imports import add_import_parser


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
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="show the library's log on stderr: -v INFO, -vv DEBUG (default WARNING, or K3_LOG_LEVEL)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    # one function per command group, in the order `k3 --help` lists them
    _add_acceptance_commands(sub)
    _add_renewal_commands(sub)
    _add_setup_commands(sub)
    _add_signature_commands(sub)
    _add_operations_commands(sub)
    _add_fleet_commands(sub)

    sc = sub.add_parser("schemas", help="rewrite the JSON Schemas in schemas/ from the code (for developers)",
                        description="Write the JSON Schemas of the evidence record, of each acceptance axis' data, "
                                    "of each renewal result and of the paths record into the repository's schemas/ "
                                    "folder, one line per file written. The tests fail while a committed schema "
                                    "differs from the code.")
    sc.set_defaults(func=_command("files", "cmd_schemas"))
    return parser


def _add_acceptance_commands(sub: argparse._SubParsersAction) -> None:
    """`validate` and `demo`: the acceptance batch against a target or the embedded emulator."""
    v = sub.add_parser("validate", help="run the acceptance batch and decide",
                       description="Run the acceptance notebooks against the target, write the evidence, the "
                                   "rendered report and decision.json. Exit 0 production, 3 limited-observation, "
                                   "4 capacity-extension, 5 environment-rebuild, 2 bad input, 1 internal error.")
    _add_target_options(v)
    v.add_argument("--resume", metavar="RUN",
                   help="finish an interrupted run in place: the axes whose notebook and evidence are intact are kept, "
                        "the others re-run against a target started from the run's request.json")
    v.add_argument("--plan", action="store_true",
                   help="check the target (the preflight), print what each axis will do and about how long the "
                        "run will take, and exit 0 without sending any load")
    v.add_argument("--baseline", metavar="RUN",
                   help="an accepted run to compare with: a changed image, driver, vLLM, topology or context limit "
                        "reopens the sheet; metrics outside the accepted band are listed as drift")
    v.set_defaults(func=_command("run", "cmd_validate"))

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
    d.set_defaults(func=_command("run", "cmd_demo"))


def _add_renewal_commands(sub: argparse._SubParsersAction) -> None:
    """`review`, `import` and `paths`: the renewal review, the records it reads and the live path comparison."""
    r = sub.add_parser("review", help="run the three-week renewal review and decide",
                       description="Read three weeks of operation (series from Prometheus or a history file, task "
                                   "log, costs, incidents, hours), run the incident drill, and decide: exit 0 renew, "
                                   "3 reduce, 4 dual-circuit, 5 exit-to-api, 2 bad input, 1 internal error.")
    _add_target_options(r)  # the embedded emulator there is the incident drill's target
    r.add_argument("--demo", metavar="SCENARIO",
                   help="generate and review a deterministic three-week history: steady, idle-heavy, spiky, poor")
    r.add_argument("--from-exports", action="store_true",
                   help="with --demo: write the scenario's records as exports (FOCUS bill, PagerDuty, Jira, API "
                        "usage) and review the files `k3 import` makes of them")
    r.set_defaults(func=_command("run", "cmd_review"))

    add_import_parser(sub, _Parser)

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
    pa.set_defaults(func=_command("run", "cmd_paths"))


def _add_setup_commands(sub: argparse._SubParsersAction) -> None:
    """`init`, `emulator` and `inspect`: a parameters file from a target, the emulator, what artifacts show."""
    ini = sub.add_parser("init", help="write a commented parameters file for a target, from what it shows",
                         description="Ask the server at URL what it can tell (kind, version, served models and their "
                                     "context limit, cache configuration, whether it asks for a key, a "
                                     "dcgm-exporter beside it) with a few GETs and no load, and write a commented "
                                     "parameters file: those values filled in, the sources only the operator can "
                                     "provide listed. Exit 0 written, 2 bad input (the server does not answer, the "
                                     "file exists).")
    ini.add_argument("url", metavar="URL", help="the server root, e.g. http://vllm.internal:8000")
    ini.add_argument("--out", metavar="FILE", help="the file to write (default: HOST-acceptance.yaml here)")
    ini.add_argument("--api-key-env", metavar="VAR",
                     help="the NAME of the environment variable holding the server's key (read, never written)")
    ini.add_argument("--force", action="store_true", help="replace FILE if it exists")
    ini.set_defaults(func=_command("init", "cmd_init"))

    e = sub.add_parser("emulator", help="serve the vLLM-compatible emulator",
                       description="Serve the embedded vLLM-compatible emulator; prints its URL on the first "
                                   "line and serves until interrupted.")
    _emulator_arguments(e)
    e.set_defaults(func=_command("run", "cmd_emulator"))

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
        k.set_defaults(func=_command("inspect", "cmd_inspect"), inspect_kind=kind)


def _add_signature_commands(sub: argparse._SubParsersAction) -> None:
    """`sign` and `verify`: the reviewer's signature over a run and its check."""
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
    sg.add_argument("--demo", action="store_true",
                    help="sign a run against the kit's emulator as a demo (refused without it: a demo is not an "
                         "acceptance); signature.json then says demo: true")
    sg.set_defaults(func=_command("sign", "cmd_sign"))

    ver = sub.add_parser("verify", help="check every file of a run against its manifest and signature",
                         description="Recompute the sha256 of every file listed in RUN/manifest.json and check the "
                                     "signature; exit 0 when all match, 1 naming each file that changed or is "
                                     "missing.")
    ver.add_argument("run", metavar="RUN", help="a run folder under outputs/")
    ver.add_argument("--allowed-signers", metavar="FILE",
                     help="ssh allowed-signers file to verify manifest.json.sig against")
    ver.set_defaults(func=_command("sign", "cmd_verify"))


def _add_operations_commands(sub: argparse._SubParsersAction) -> None:
    """`golive`, `compare` and `report`: what follows an accepted run."""
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
    gl.set_defaults(func=_command("baseline", "cmd_golive"))

    cp = sub.add_parser("compare", help="compare a run with an accepted baseline",
                        description="Exit 0 when the deployment is proven the same and no metric drifted, 1 when "
                                    "the sheet reopens, a metric drifted or an identity item (the image digest…) "
                                    "could not be verified, 2 when the runs cannot be compared.")
    cp.add_argument("run", metavar="RUN", help="the new run folder")
    cp.add_argument("--baseline", required=True, metavar="RUN", help="the accepted run folder")
    cp.set_defaults(func=_command("baseline", "cmd_compare"))

    rp = sub.add_parser("report", help="re-render a run's report; --pdf prints the archive copy",
                        description="Render every executed notebook of RUN and the index that argues the decision "
                                    "(offline, one plotly.js per report folder). With --pdf FILE, print the index and "
                                    "the sheet with its figures to one PDF with headless Chromium and record its "
                                    "sha256 in RUN/report.json, which `k3 verify` checks. Before `k3 sign`: both "
                                    "change the manifest.")
    rp.add_argument("run", metavar="RUN", help="a run folder under outputs/")
    rp.add_argument("--pdf", metavar="FILE", help="write the PDF here (inside RUN, it is listed in the manifest)")
    rp.set_defaults(func=_command("files", "cmd_report"))


def _add_fleet_commands(sub: argparse._SubParsersAction) -> None:
    """`history` and `fleet`: the runs of one deployment over time, and every deployment of a fleet."""
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
    hi.set_defaults(func=_command("baseline", "cmd_history"))

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
    fl.set_defaults(func=_command("baseline", "cmd_fleet"))


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command `name` of `k3lib.cli.<module>`, imported when it runs: `k3 --help` loads no command's code."""

    def run(ns: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(f"{__package__}.{module}"), name)(ns) or 0)

    run.__name__ = name
    return run


def _emulator_arguments(e: argparse.ArgumentParser) -> None:
    try:
        from ..emulator.cli import add_arguments
    except ImportError:  # the emulator package is optional at import time of the CLI
        return
    add_arguments(e)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
        verbosity.configure(ns.verbose)
        if not getattr(ns, "func", None):
            parser.print_help()
            return 2
        with stop_signals():  # SIGINT and SIGTERM stop a batch's load and keep what finished (k3lib.batch.stop)
            return int(ns.func(ns) or 0)
    except BadInputError as exc:
        print(f"k3: {exc.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"k3: {exc.message() if hasattr(exc, 'message') else 'interrupted'}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 130))
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

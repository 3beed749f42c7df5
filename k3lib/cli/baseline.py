"""The commands that work from an accepted run: `k3 compare` with it, `k3 golive` from it, `k3 history` over the
runs of a folder, and `k3 fleet`, which re-validates every deployment against its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..batch.fleet import fleet_main
from ..core.errors import BadInputError
from ..core.store import MANIFEST
from ..report.history import history
from ..verdict.baseline import compare_with_baseline
from ..golive import GoliveOptions, write_golive_kit


def cmd_golive(ns: argparse.Namespace) -> int:
    """`k3 golive RUN --out DIR [--job NAME] [--traffic-hit-rate RATE] [--for DURATION]`."""

    opts = GoliveOptions(job=getattr(ns, "job", None) or "vllm",
                         sustained_for=getattr(ns, "sustained_for", None) or "10m",
                         traffic_hit_rate=getattr(ns, "traffic_hit_rate", None))
    kit = write_golive_kit(ns.run, ns.out, options=opts)
    for warning in kit.warnings:
        print(f"golive: warning: {warning}", file=sys.stderr)
    for path in kit.files:
        print(f"wrote {path}")
    print("alerts: " + ", ".join(kit.alerts))
    for name, why in kit.omitted.items():
        print(f"not armed: {name}: {why}")
    return 0


def cmd_history(ns: argparse.Namespace) -> int:
    """`k3 history DIR [--out FILE] [--baseline RUN] [--textfile FILE]`: one line per run, then the files written."""

    baseline = Path(ns.baseline) if getattr(ns, "baseline", None) else None
    if baseline is not None and not (baseline / MANIFEST).is_file():
        raise BadInputError("not a k3kit run folder (no manifest.json)", source=str(baseline))
    points, out = history(Path(ns.dir), out=Path(ns.out) if ns.out else None,
                          textfile=Path(ns.textfile) if ns.textfile else None, baseline=baseline)
    for p in points:
        flags = f" drift {len(p.drift)}" if p.drift else ""
        flags += " REOPENED" if p.reopened else ""
        decided = p.decision or ("no decision (bursts)" if p.kind == "explorer" else "no decision")
        print(f"{p.started:%Y-%m-%d %H:%M} {p.kind:<10} {decided:<20} {p.run_id}{flags}")
    print(f"history: {out}")
    if ns.textfile:
        print(f"textfile: {ns.textfile}")
    return 0


def cmd_fleet(ns: argparse.Namespace) -> int:
    if ns.timeout is not None and not ns.timeout > 0:
        raise BadInputError(f"expected a positive number of seconds, got {ns.timeout}", source="--timeout")
    return fleet_main(ns.fleet, ns.deployment, list_only=ns.list, timeout_s=ns.timeout,
                      out=lambda line: print(line, flush=True),
                      progress=lambda line: print(line, file=sys.stderr, flush=True))


def cmd_compare(ns: argparse.Namespace) -> int:
    """`k3 compare RUN --baseline RUN`: 0 same deployment (every identity item verified) and no drift; 1 the sheet
    reopens, a metric drifted or was not measured where the baseline has a band, or an identity item (the image
    digest, the driver…) could not be verified;
    2 the runs cannot be compared (official vs custom build, or not run folders)."""

    cmp = compare_with_baseline(ns.run, ns.baseline)
    for line in cmp.lines():
        print(line)
    if cmp.refused:
        raise BadInputError(cmp.refused.message, source=str(ns.baseline))
    return 1 if cmp.reopens or cmp.drift or cmp.unverified or cmp.unmeasured else 0

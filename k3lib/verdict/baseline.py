"""Re-validation against an accepted run: what changed in the deployment (reopens the sheet) and what drifted.

A change of image digest, driver, vLLM version, topology or context limit reopens the acceptance sheet; a metric
outside the accepted band is drift. An official and a custom build are never compared as one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, computed_field, model_serializer

from . import accepted as acc
from ..core.errors import BadInputError
from ..core.evidence import Finding
from ..core.jsonvalue import JsonObject, JsonValue
from ..core.numbers import figure
from ..core.record import Record
from ..core.store import RunStore

ACCEPTED_DECISIONS = ("production", "limited-observation")


@dataclasses.dataclass(frozen=True)
class Band:
    """How far a metric may move in its worse direction before it is drift. A review policy, stated in the output;
    the reference value always comes from the baseline's evidence."""

    label: str
    worse: str  # "higher" or "lower"
    relative: float = 0.0  # allowed move as a share of the baseline value
    absolute: float = 0.0  # allowed move in the metric's own unit (added to the relative one)
    unit: str = ""

    def limit(self, reference: float) -> float:
        slack = abs(reference) * self.relative + self.absolute
        return reference + slack if self.worse == "higher" else reference - slack


# Default bands: queue time is noisy at low values (hence the absolute part), a validity rate may not drop at all.
DEFAULT_BANDS: dict[str, Band] = {
    "queue_time_p95_s": Band("queue time p95", "higher", relative=0.25, absolute=0.05, unit="s"),
    "kv_usage_at_planned": Band("KV-cache usage at planned load", "higher", absolute=0.05),
    "prefix_hit_rate": Band("prefix-cache hit rate", "lower", absolute=0.10),
    "tool_call_validity": Band("tool-call validity", "lower"),
}
DRIFT_LEVELS: dict[str, Callable[[acc.RunEvidence], acc.Level]] = {
    "queue_time_p95_s": acc.queue_time_p95_s,
    "kv_usage_at_planned": acc.kv_usage_at_planned,
    "prefix_hit_rate": acc.prefix_hit_rate,
    "tool_call_validity": acc.tool_call_validity,
}


def _items(findings: Sequence[Finding]) -> str:
    """The items a headline names: each finding's `item`, else its rule."""
    return ", ".join(f.observed.get("item", f.rule) if isinstance(f.observed, dict) else f.rule for f in findings)


class BaselineComparison(Record):
    """A run compared with its accepted baseline; `model_dump(mode="json")` is `baseline.json`."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True)

    run_id: str = Field(serialization_alias="run")
    baseline_id: str = Field(serialization_alias="baseline")
    refused: Finding | None  # set when the two runs cannot be compared at all
    reopen: tuple[Finding, ...]  # identity changes: the sheet reopens
    unverified: tuple[Finding, ...]  # identity items that could not be compared (never "unchanged")
    drift: tuple[Finding, ...]  # metrics outside the accepted band
    checks: tuple[Finding, ...]  # everything compared, including what stayed the same
    # metrics the baseline has an accepted value for and this run did not measure: no drift is not shown (never
    # "inside the band")
    unmeasured: tuple[Finding, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reopens(self) -> bool:
        return bool(self.reopen)

    @property
    def findings(self) -> list[Finding]:
        return ([self.refused] if self.refused else []) + list(self.checks)

    @computed_field(alias="headline")  # type: ignore[prop-decorator]
    @property
    def said(self) -> str:
        """`headline()`, as `baseline.json` writes it."""
        return self.headline()

    @model_serializer(mode="wrap")
    def _headline_first(self, dump: SerializerFunctionWrapHandler) -> dict[str, JsonValue | tuple[JsonObject, ...]]:
        """The ids, the headline and whether the sheet reopens first, then the findings (tuples in python's dump,
        lists in JSON's)."""
        row = dump(self)
        return {**{key: row[key] for key in ("run", "baseline", "headline", "reopens")}, **row}

    def headline(self) -> str:
        if self.refused:
            return f"NOT COMPARED: {self.refused.message}"
        if self.reopen:
            return f"THE ACCEPTANCE SHEET REOPENS: {_items(self.reopen)} changed since {self.baseline_id}"
        if self.unverified:
            return (f"SAME DEPLOYMENT NOT PROVEN: {_items(self.unverified)} could not be compared with "
                    f"{self.baseline_id} (no change observed, none ruled out)")
        said = f"same deployment as {self.baseline_id}" + (f"; {len(self.drift)} metric(s) drifted" if self.drift
                                                             else "")
        if self.unmeasured:
            return said + f"; DRIFT NOT RULED OUT: {_items(self.unmeasured)} not measured in this run"
        return said if self.drift else said + "; every compared metric is inside its band"

    def lines(self) -> list[str]:
        """The headline on top, then reopening changes, unverified items, drift, metrics not measured."""
        out = [self.headline()]
        out += [f"REOPEN {f.message}" for f in self.reopen]
        out += [f"UNVERIFIED {f.message}" for f in self.unverified]
        out += [f"DRIFT {f.message}" for f in self.drift]
        out += [f"UNMEASURED {f.message}" for f in self.unmeasured]
        return out


def _fmt(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k.replace('_parallel_size', '').upper()}={v}" for k, v in sorted(value.items()))
    return figure(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def compare_identity(run: acc.RunEvidence, base: acc.RunEvidence) -> list[Finding]:
    out = []
    for key, label, read in acc.IDENTITY:
        now, then = read(run), read(base)
        evidence = {"run_source": now.source, "baseline_source": then.source}
        observed = {"item": label, "run": now.value, "baseline": then.value}
        if not now.known or not then.known:
            missing = "; ".join(f"{who}: {lv.reason}" for who, lv in (("run", now), ("baseline", then)) if not lv.known)
            out.append(Finding(rule=f"baseline.identity.{key}", status="not-observable",
                               message=f"{label}: cannot confirm it is unchanged ({missing})",
                               observed=observed, evidence=evidence))
        elif _same(now.value, then.value):
            out.append(Finding(rule=f"baseline.identity.{key}", status="pass",
                               message=f"{label}: unchanged ({_fmt(now.value)})", observed=observed,
                               evidence=evidence))
        else:
            out.append(Finding(rule=f"baseline.identity.{key}", status="fail",
                               message=f"{label} changed: {_fmt(then.value)} (baseline) → {_fmt(now.value)} "
                                       "— the acceptance sheet reopens",
                               observed=observed, expected=then.value, evidence=evidence))
    return out


def compare_drift(run: acc.RunEvidence, base: acc.RunEvidence,
                  bands: dict[str, Band]) -> tuple[list[Finding], list[Finding]]:
    """(every drift level compared, those the baseline accepted and this run did not measure)."""
    out, unmeasured = [], []
    for key, read in DRIFT_LEVELS.items():
        band = bands[key]
        now, then = read(run), read(base)
        observed = {"item": band.label, "run": now.value, "baseline": then.value}
        evidence = {"run_source": now.source, "baseline_source": then.source,
                    "band": dataclasses.asdict(band)}
        if not then.accepted:
            why = then.reason or f"the baseline's axis status is {then.axis_status}"
            out.append(Finding(rule=f"baseline.drift.{key}", status="not-observable",
                               message=f"{band.label}: no accepted baseline value ({why})", observed=observed,
                               evidence=evidence))
            continue
        if not now.known:
            unmeasured.append(Finding(rule=f"baseline.drift.{key}", status="not-observable",
                                      message=f"{band.label}: not measured in this run ({now.reason})",
                                      observed=observed, evidence=evidence))
            out.append(unmeasured[-1])
            continue
        limit = band.limit(float(then.value))
        beyond = now.value > limit if band.worse == "higher" else now.value < limit
        unit = f" {band.unit}" if band.unit else ""
        sign = "≤" if band.worse == "higher" else "≥"
        text = (f"{band.label}: {_fmt(now.value)}{unit} against accepted {_fmt(then.value)}{unit} "
                f"(band {sign} {_fmt(limit)}{unit})")
        out.append(Finding(rule=f"baseline.drift.{key}", status="warn" if beyond else "pass",
                           message=("outside the accepted band — " if beyond else "inside the band — ") + text,
                           observed=observed, expected=f"{sign} {limit:.6g}", evidence=evidence))
    return out, unmeasured


def compare_runs(run: acc.RunEvidence, base: acc.RunEvidence, *,
                 bands: dict[str, Band] | None = None,
                 baseline_problems: Sequence[str] = ()) -> BaselineComparison:
    """Pure: two runs read back → the comparison."""
    bands = {**DEFAULT_BANDS, **(bands or {})}
    run_build, base_build = acc.build(run), acc.build(base)
    if run_build.known and base_build.known and run_build.value != base_build.value:
        refused = Finding(rule="baseline.build", status="fail",
                          message=f"official and custom builds are never compared as one: this run is "
                                  f"{run_build.value}, the baseline {base.run_id} is {base_build.value}; validate "
                                  f"against an accepted {run_build.value} run",
                          observed=run_build.value, expected=base_build.value)
        return BaselineComparison(run_id=run.run_id, baseline_id=base.run_id, refused=refused, reopen=(),
                                  unverified=(), drift=(), checks=())
    checks: list[Finding] = []
    if baseline_problems:
        checks.append(Finding(rule="baseline.integrity", status="fail",
                              message="the baseline does not verify against its manifest: "
                                      + "; ".join(baseline_problems[:5]), observed=list(baseline_problems)))
    verdict = (base.decision or {}).get("decision")
    if verdict not in ACCEPTED_DECISIONS:
        checks.append(Finding(rule="baseline.accepted", status="warn",
                              message=f"the baseline {base.run_id} was not accepted (decision {verdict!r}): its "
                                      "levels are no accepted band", observed=verdict,
                              expected=" or ".join(ACCEPTED_DECISIONS)))
    if not run_build.known or not base_build.known:
        checks.append(Finding(rule="baseline.build", status="not-observable",
                              message="build method (official/custom) unknown on one side: "
                                      + "; ".join(lv.reason or "" for lv in (run_build, base_build) if not lv.known)))
    identity = compare_identity(run, base)
    drift, unmeasured = compare_drift(run, base, bands)
    checks += identity + drift
    return BaselineComparison(
        run_id=run.run_id, baseline_id=base.run_id, refused=None,
        reopen=tuple(f for f in identity if f.status == "fail"),
        unverified=tuple(f for f in identity if f.status == "not-observable"),
        drift=tuple(f for f in drift if f.status == "warn"),
        checks=tuple(checks),
        unmeasured=tuple(unmeasured))


def compare_with_baseline(run_dir: str | Path, baseline_dir: str | Path, *,
                          bands: dict[str, Band] | None = None) -> BaselineComparison:
    """Read both run folders (the baseline's hashes are checked: a tampered baseline is no reference)."""
    base_store = RunStore.open(baseline_dir)
    return compare_runs(acc.read_run(run_dir), acc.read_run(baseline_dir), bands=bands,
                        baseline_problems=base_store.verify())


def precheck_baseline(baseline_dir: str | Path, build: str) -> None:
    """Before a long validation: the baseline is a run folder of the same build, or BadInputError (exit 2)."""
    base = acc.read_run(baseline_dir)
    base_build = acc.build(base)
    if base_build.known and base_build.value != build:
        raise BadInputError(f"official and custom builds are never compared as one: this run is {build}, the "
                            f"baseline is {base_build.value}", source=str(baseline_dir))

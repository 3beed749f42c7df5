"""A fleet of deployments re-validated as one batch (`k3 fleet FLEET`), the work each task of the Airflow DAG in
deploy/airflow/ and the Kubernetes CronJob in deploy/k8s/ runs.

For each deployment of the fleet file: `k3 validate` (in a child process, so a crashed batch cannot take the others
down) into `outputs/<name>/`, with `--baseline` when the deployment has one, then the trend page and the
node_exporter textfile of that folder (`k3 history`), then the judgement: the deployment **regressed** when

- its baseline cannot be compared with the new run (official vs custom build),
- the acceptance sheet reopens (image digest, driver, vLLM, topology or context limit changed),
- an identity item could not be verified, or a metric left its accepted band (drift),
- or the decision is stronger than the baseline's (production < limited-observation < capacity-extension <
  environment-rebuild),

which is `k3 compare`'s exit 1/2 plus the decision order. With no baseline (none named and no earlier accepted run
in the folder) only the decision speaks: anything but production or limited-observation is a regression. Each run
folder is kept; a deployment's label in every run is its fleet name, so the textfiles of a fleet never collide.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Sequence

import yaml
from pydantic import Field, model_validator

from ..core.errors import BadInputError, K3Error
from ..core.layering import validate_model
from ..core.outcomes import STRENGTH
from ..core.params import _Model
from ..core.yamlsafe import safe_load as yaml_load
from ..report.history import _default_baseline, find_runs, history, read_point
from ..verdict.baseline import compare_with_baseline

if TYPE_CHECKING:
    from ..verdict.baseline import BaselineComparison

NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"
TEXTFILE = "k3kit-{name}.prom"  # one file per deployment in textfile_dir: node_exporter merges *.prom


class FleetDefaults(_Model):
    """What every deployment gets before its own entry: parameter files (first) and --set overrides."""

    params: list[str] = []
    set: list[str] = []


class FleetDeployment(_Model):
    name: Annotated[str, Field(pattern=NAME)]  # its folder under `outputs`, its label in the run ids and textfile
    params: list[str] = []  # layered after the defaults' files
    set: list[str] = []  # applied after the defaults' overrides
    baseline: str | None = None  # the accepted run to compare with; null: the latest accepted run in its folder


class Fleet(_Model):
    outputs: str  # run folders go to <outputs>/<name>/
    textfile_dir: str | None = None  # node_exporter's textfile directory: <textfile_dir>/k3kit-<name>.prom
    defaults: FleetDefaults = FleetDefaults()
    deployments: Annotated[list[FleetDeployment], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique(self) -> "Fleet":
        names = [d.name for d in self.deployments]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"deployment names must be unique; {', '.join(twice)} appears more than once")
        return self


@dataclasses.dataclass(frozen=True)
class FleetFile:
    path: Path
    fleet: Fleet

    def here(self, text: str) -> Path:
        """A path of the fleet file, relative to the file's folder."""
        p = Path(text).expanduser()
        return p if p.is_absolute() else (self.path.parent / p).resolve()

    def deployment(self, name: str) -> FleetDeployment:
        for d in self.fleet.deployments:
            if d.name == name:
                return d
        raise BadInputError(f"no deployment {name!r}; the fleet has {', '.join(self.names)}", source=str(self.path),
                            field="--deployment")

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.fleet.deployments]

    def folder(self, name: str) -> Path:
        return self.here(self.fleet.outputs) / name

    def textfile(self, name: str) -> Path | None:
        return self.here(self.fleet.textfile_dir) / TEXTFILE.format(name=name) if self.fleet.textfile_dir else None

    def validate_args(self, d: FleetDeployment, baseline: Path | None) -> list[str]:
        args = ["validate"]
        for f in [*self.fleet.defaults.params, *d.params]:
            args += ["-p", str(self.here(f))]
        # the label last: the run ids, the history and the textfile name the deployment by its fleet name
        for s in [*self.fleet.defaults.set, *d.set, f"run.label={d.name}"]:
            args += ["--set", s]
        args += ["--out", str(self.folder(d.name))]
        if baseline is not None:
            args += ["--baseline", str(baseline)]
        return args


def load_fleet(path: str | Path) -> FleetFile:
    p = Path(path)
    try:
        data = yaml_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInputError(f"cannot read the fleet file: {exc.strerror}", source=str(p)) from None
    except yaml.YAMLError as exc:
        raise BadInputError(f"not YAML: {' '.join(str(exc).split())}", source=str(p)) from None
    if not isinstance(data, dict):
        raise BadInputError("a fleet file is a mapping with `outputs` and `deployments`", source=str(p))
    fleet = validate_model(Fleet, data, source=str(p), reference="deploy/airflow/fleet.example.yaml")
    return FleetFile(p.resolve(), fleet)


@dataclasses.dataclass(frozen=True)
class FleetOutcome:
    """One deployment's re-validation: its run folder, decision, baseline and what makes it a regression."""

    name: str
    run: Path | None
    decision: str | None
    baseline: Path | None
    baseline_decision: str | None
    regressions: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def line(self) -> str:
        head = f"fleet: {self.name}: "
        if self.regressed:
            return head + "REGRESSED: " + "; ".join(self.regressions) + f" (run {self.run})"
        return head + f"ok: {self.decision}; " + "; ".join(self.notes) + f" (run {self.run})"


def judge(decision: str | None, baseline_decision: str | None,
          comparison: "BaselineComparison | None") -> tuple[list[str], list[str]]:
    """(regressions, notes) of one run against its baseline's decision and `compare_with_baseline`'s result."""

    accepted = ("production", "limited-observation")
    if decision not in STRENGTH:
        return [f"the run reached no decision ({decision!r})"], []
    if comparison is None:
        if decision not in accepted:
            return [f"decision {decision} is not accepted (no accepted baseline to compare with)"], []
        return [], ["no accepted baseline yet: the decision alone was judged"]
    regressions: list[str] = []
    cmp = comparison
    if cmp.refused:
        regressions.append("not comparable with the baseline: " + cmp.refused.message)
    if baseline_decision in STRENGTH and STRENGTH[decision] > STRENGTH[baseline_decision]:
        regressions.append(f"decision {decision} is worse than the baseline's {baseline_decision}")
    if cmp.reopen or cmp.unverified:
        regressions.append(cmp.headline())
    regressions += [f"drift: {f.message}" for f in cmp.drift]
    regressions += [f"drift not ruled out: {f.message}" for f in cmp.unmeasured]
    return regressions, ([] if regressions else [cmp.headline()])


def default_baseline(folder: Path) -> Path | None:
    """`k3 history`'s rule: the latest accepted, verified run in the folder, signed ones first."""

    if not folder.is_dir():
        return None
    return _default_baseline([read_point(r) for r in find_runs(folder)])


RUN_LINE = re.compile(r"^run: (.+)$", re.M)
#: after a timeout's SIGTERM, how long the batch has to stop its kernels' load before the group is killed
STOP_GRACE_S = 10.0


def run_validate(args: Sequence[str], timeout_s: float | None = None) -> tuple[int, Path | None]:
    """`k3 validate ARGS` in a child process (the same interpreter), its output passed through; the exit code and
    the run folder it printed (`run: PATH`, first on stderr when the folder is created)."""
    # its own session: a timeout stops the whole tree. SIGTERM first: the batch then stops its notebook kernels
    # (they run in sessions of their own, out of this group's reach) and their load; SIGKILL what is left after that
    proc = subprocess.Popen([sys.executable, "-m", "k3lib", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        sys.stdout.write(out)
        sys.stderr.write(err)
        raise K3Error(f"k3 validate ran past {timeout_s:.0f} s and was killed") from None
    sys.stderr.write(err)
    sys.stdout.write(out)
    found = RUN_LINE.findall(err) + RUN_LINE.findall(out)
    return proc.returncode, Path(found[-1].strip()) if found else None


def revalidate(ff: FleetFile, name: str, *, timeout_s: float | None = None) -> FleetOutcome:
    """One deployment: validate, refresh its history and textfile, judge it against its baseline."""

    d = ff.deployment(name)
    folder = ff.folder(name)
    baseline: Path | None
    if d.baseline is not None:
        baseline = ff.here(d.baseline)
        if not (baseline / "manifest.json").is_file():
            raise BadInputError("not a k3kit run folder (no manifest.json)", source=str(ff.path),
                                field=f"deployments.{name}.baseline")
    else:
        baseline = default_baseline(folder)
    code, run = run_validate(ff.validate_args(d, baseline), timeout_s)
    if code == 2:
        raise BadInputError("k3 validate refused its input (the line above says which)", source=str(ff.path),
                            field=f"deployments.{name}")
    if run is None or not (run / "decision.json").is_file():
        raise K3Error(f"{name}: k3 validate exited {code} without a decision (run folder {run})")
    decision = json.loads((run / "decision.json").read_text(encoding="utf-8")).get("decision")
    comparison, base_decision = None, None
    if baseline is not None:
        comparison = compare_with_baseline(run, baseline)
        base_file = baseline / "decision.json"
        base_decision = json.loads(base_file.read_text(encoding="utf-8")).get("decision") \
            if base_file.is_file() else None
    # a named baseline holds for the whole trend; else each run is compared with the accepted run before it,
    # which for this run is the baseline just used
    history(folder, textfile=ff.textfile(name), baseline=ff.here(d.baseline) if d.baseline else None)
    regressions, notes = judge(decision, base_decision, comparison)
    return FleetOutcome(name, run, decision, baseline, base_decision, tuple(regressions), tuple(notes))


def fleet_main(path: str, names: Sequence[str], *, list_only: bool = False, timeout_s: float | None = None,
               out: Callable[[str], None], progress: Callable[[str], None]) -> int:
    """`k3 fleet FLEET [--deployment NAME ...] [--list]`: 0 none regressed, 1 at least one did, 2 bad input.
    Each result line goes to `out`, each "validating" line to `progress` (the CLI prints them)."""
    ff = load_fleet(path)
    if list_only:
        for n in ff.names:
            out(n)
        return 0
    chosen = list(names) or ff.names
    for n in chosen:
        ff.deployment(n)  # an unknown name is bad input before anything runs
    if len(chosen) == 1:  # one deployment (an Airflow task): its error is the command's
        outcome = revalidate(ff, chosen[0], timeout_s=timeout_s)
        out(outcome.line())
        return 1 if outcome.regressed else 0
    lines, bad, regressed = [], False, False
    for n in chosen:  # the whole fleet (the CronJob): one deployment's error does not stop the others
        progress(f"fleet: {n}: validating into {ff.folder(n)}")
        try:
            outcome = revalidate(ff, n, timeout_s=timeout_s)
        except BadInputError as exc:
            bad = True
            lines.append(f"fleet: {n}: BAD INPUT: {exc.one_line()}")
            continue
        except K3Error as exc:
            regressed = True
            lines.append(f"fleet: {n}: REGRESSED: not re-validated: {exc}")
            continue
        regressed = regressed or outcome.regressed
        lines.append(outcome.line())
    for line in lines:
        out(line)
    return 2 if bad else 1 if regressed else 0

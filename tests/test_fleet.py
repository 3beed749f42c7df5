"""`k3 fleet`: the fleet file (bad input is one line, exit 2), the arguments each deployment's validate gets, and
the judgement of a run against its baseline (the decision order, then `k3 compare`'s reopen/unverified/drift).

The whole batch against live emulators runs under Airflow in tests/test_airflow.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3lib.verdict.baseline import BaselineComparison
from k3lib.cli.main import main
from k3lib.core.evidence import Finding
from k3lib.batch.fleet import judge, load_fleet

FLEET = """\
outputs: runs
textfile_dir: /var/lib/node_exporter/textfile
defaults:
  params: [../parameters/emulator.yaml]
  set: [contract.planned_concurrency=4]
deployments:
  - name: paris-a
    set: [target.base_url=http://127.0.0.1:9]
    baseline: runs/paris-a/20261201T020000Z-0a1b2c-paris-a
  - name: paris-b
    params: [b.yaml]
"""


def write(tmp_path: Path, text: str, name: str = "fleet.yaml") -> Path:
    (tmp_path / "conf").mkdir(exist_ok=True)
    path = tmp_path / "conf" / name
    path.write_text(text, encoding="utf-8")
    return path


def test_list_prints_each_deployment(tmp_path, capsys):
    assert main(["fleet", str(write(tmp_path, FLEET)), "--list"]) == 0
    assert capsys.readouterr().out.split() == ["paris-a", "paris-b"]


def test_validate_arguments_layer_defaults_then_the_deployment_and_force_its_label(tmp_path):
    ff = load_fleet(write(tmp_path, FLEET))
    conf = tmp_path / "conf"
    base = conf / "runs" / "paris-a" / "20261201T020000Z-0a1b2c-paris-a"
    args = ff.validate_args(ff.deployment("paris-a"), base)
    assert args == ["validate", "-p", str((conf / "../parameters/emulator.yaml").resolve()),
                    "--set", "contract.planned_concurrency=4", "--set", "target.base_url=http://127.0.0.1:9",
                    "--set", "run.label=paris-a", "--out", str(conf / "runs" / "paris-a"), "--baseline", str(base)]
    b = ff.validate_args(ff.deployment("paris-b"), None)
    assert b[b.index("-p", 2) + 1] == str(conf / "b.yaml") and "--baseline" not in b
    assert ff.textfile("paris-b") == Path("/var/lib/node_exporter/textfile/k3kit-paris-b.prom")


@pytest.mark.parametrize("text, expected", [
    (FLEET.replace("outputs: runs", "output: runs"), "output"),
    (FLEET.replace("name: paris-b", "name: paris-a"), "paris-a appears more than once"),
    (FLEET.replace("name: paris-b", "name: 'paris b'"), "deployments.1.name"),
    ("outputs: runs\ndeployments: []\n", "deployments"),
    ("- just a list\n", "a mapping with `outputs` and `deployments`"),
    ("outputs: [unclosed\n", "not YAML"),
])
def test_a_bad_fleet_file_is_one_line_and_exit_2(tmp_path, capsys, text, expected):
    path = write(tmp_path, text)
    assert main(["fleet", str(path), "--list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and expected in err, err


def test_an_unknown_deployment_or_a_missing_file_is_bad_input(tmp_path, capsys):
    path = write(tmp_path, FLEET)
    assert main(["fleet", str(path), "--deployment", "lyon"]) == 2
    assert "no deployment 'lyon'; the fleet has paris-a, paris-b" in capsys.readouterr().err
    assert main(["fleet", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read the fleet file" in capsys.readouterr().err
    assert main(["fleet", str(path), "--timeout", "0"]) == 2
    assert capsys.readouterr().err == "k3: --timeout: expected a positive number of seconds, got 0.0\n"


def test_a_named_baseline_that_is_not_a_run_folder_is_refused_before_validating(tmp_path, capsys):
    assert main(["fleet", str(write(tmp_path, FLEET)), "--deployment", "paris-a"]) == 2
    err = capsys.readouterr().err
    assert "deployments.paris-a.baseline" in err and "no manifest.json" in err


def test_the_whole_fleet_goes_on_past_a_deployment_in_error_and_names_each(tmp_path, capsys):
    """The CronJob's way (every deployment in one command): each deployment's bad input is its own line; the exit
    code is the worst (2); nothing is validated for a deployment refused before its run."""
    text = FLEET.replace("    params: [b.yaml]\n", "    baseline: runs/paris-b/absent\n")
    assert main(["fleet", str(write(tmp_path, text))]) == 2
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": BAD INPUT: ")[0] for line in out] == ["fleet: paris-a", "fleet: paris-b"], out
    assert all("baseline: not a k3kit run folder (no manifest.json)" in line for line in out)
    assert not (tmp_path / "conf" / "runs").exists()


def finding(rule: str, status: str, message: str) -> Finding:
    return Finding(rule=rule, status=status, message=message)


def comparison(*, reopen=(), unverified=(), drift=(), refused=None) -> BaselineComparison:
    return BaselineComparison("run-2", "run-1", refused, tuple(reopen), tuple(unverified), tuple(drift),
                              tuple(reopen) + tuple(unverified) + tuple(drift))


def test_judge_same_deployment_no_drift_same_decision_is_no_regression():
    regressions, notes = judge("limited-observation", "limited-observation", comparison())
    assert regressions == [] and notes == ["same deployment as run-1; every compared metric is inside its band"]


def test_judge_a_stronger_decision_than_the_baseline_regresses_a_weaker_one_does_not():
    assert judge("capacity-extension", "production", comparison())[0] == [
        "decision capacity-extension is worse than the baseline's production"]
    assert judge("production", "limited-observation", comparison())[0] == []


def test_judge_drift_alone_regresses_even_with_an_accepted_decision():
    drift = finding("baseline.drift.tool_call_validity", "fail", "tool-call validity 0.7 below the band 1")
    regressions, _ = judge("limited-observation", "limited-observation", comparison(drift=[drift]))
    assert regressions == ["drift: tool-call validity 0.7 below the band 1"]


def test_judge_reopened_unverified_and_refused_each_regress():
    reopen = finding("baseline.identity.vllm", "fail", "vLLM changed")
    reopen.observed = {"item": "vLLM version"}
    assert judge("production", "production", comparison(reopen=[reopen]))[0] == [
        "THE ACCEPTANCE SHEET REOPENS: vLLM version changed since run-1"]
    unverified = finding("baseline.identity.image_digest", "not-observable", "digest unknown")
    unverified.observed = {"item": "image digest"}
    assert judge("production", "production", comparison(unverified=[unverified]))[0][0].startswith(
        "SAME DEPLOYMENT NOT PROVEN: image digest could not be compared with run-1")
    refused = finding("baseline.build", "fail", "an official and a custom build are never compared")
    assert judge("production", "production", comparison(refused=refused))[0] == [
        "not comparable with the baseline: an official and a custom build are never compared"]


def test_judge_without_a_baseline_only_an_accepted_decision_passes():
    assert judge("limited-observation", None, None) == ([], ["no accepted baseline yet: the decision alone was judged"])
    assert judge("environment-rebuild", None, None)[0] == [
        "decision environment-rebuild is not accepted (no accepted baseline to compare with)"]
    assert judge(None, None, None)[0] == ["the run reached no decision (None)"]

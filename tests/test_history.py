"""`k3 history DIR`: the trend over nightly re-validations, and the textfile a monitoring system scrapes — checked
by promtool, with the README's alert rule exercised by `promtool test rules` on the series the kit wrote."""

from __future__ import annotations

import html
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import needs_tool
import yaml
from prometheus_client.parser import text_string_to_metric_families

from k3lib.verdict.baseline import compare_with_baseline
from k3lib.cli.main import main
from k3lib.core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "k3lib" / "data" / "revalidation-alerts.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = needs_tool(PROMTOOL is not None, "promtool (Debian's prometheus) is installed by .ci/run")

ACCEPTED = "20261201T010000Z-aaaaaa-nightly"
TONIGHT = "20261202T010000Z-bbbbbb-nightly"
RENEWAL = "20261202T020000Z-cccccc-renewal-demo"


@pytest.fixture(scope="module")
def runs(healthy_run, renewal_run, tmp_path_factory):
    """Three nights: an accepted, signed acceptance run; tonight's, decided limited-observation; a renewal review."""
    code, store = healthy_run
    assert store.read_json("decision.json")["decision"] == "production"
    folder = tmp_path_factory.mktemp("nightly")
    shutil.copytree(store.root, folder / ACCEPTED)
    # the healthy demo stands for an accepted run here: a demo signs only as one (issue 43)
    assert main(["sign", str(folder / ACCEPTED), "--reviewer", "Night Reviewer", "--demo"]) == 0
    shutil.copytree(store.root, folder / TONIGHT)
    tonight = RunStore(folder / TONIGHT)
    decision = tonight.read_json("decision.json")
    decision.update(decision="limited-observation", reasons=["limited-observation: C12 still open (test)"])
    tonight.write_json("decision.json", decision)
    shutil.copytree(renewal_run.root, folder / RENEWAL)
    return folder


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _value(samples, name: str, **labels) -> float:
    hits = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} series"
    return hits[0]


def test_history_page_and_textfile_of_three_nights(runs, tmp_path, capsys):
    prom = tmp_path / "textfile" / "k3kit.prom"
    assert main(["history", str(runs), "--textfile", str(prom)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "nightly" in line or "renewal" in line]
    assert [line.split()[-1] for line in lines if not line.startswith(("history", "textfile"))][:3] == \
        [ACCEPTED, TONIGHT, RENEWAL]
    page = (runs / "history.html").read_text(encoding="utf-8")
    for run in (ACCEPTED, TONIGHT, RENEWAL):
        assert f"href='{run}/report/index.html'" in page
    assert ">limited-observation<" in page and ">production<" in page and ">renew<" in page
    assert str(runs) not in page and (runs / "plotly.min.js").is_file() and "plotly.js v" not in page
    assert page.count('class="plotly-graph-div"') >= 4
    # tonight is compared with the signed, accepted run: same evidence, so nothing drifted
    headline = compare_with_baseline(runs / TONIGHT, runs / ACCEPTED).headline()
    assert f"<td>{ACCEPTED}</td>" in page and html.escape(headline) in page and "DRIFT" not in page

    samples = _samples(prom.read_text(encoding="utf-8"))
    tonight = {"kind": "acceptance", "run": TONIGHT, "label": "nightly"}
    assert _value(samples, "k3kit_decision", **tonight, decision="limited-observation") == 1
    assert _value(samples, "k3kit_decision", **tonight, decision="production") == 0
    assert _value(samples, "k3kit_decision", kind="renewal", run=RENEWAL, decision="renew") == 1
    assert not [k for k in samples if k[0] == "k3kit_decision" and ("run", ACCEPTED) in k[1]], "last run only"
    passed = [k for k, v in samples.items() if k[0] == "k3kit_check_status" and ("status", "pass") in k[1]
              and ("kind", "acceptance") in k[1] and v == 1]
    assert len(passed) == 16
    assert _value(samples, "k3kit_run_timestamp_seconds", **tonight) == 1796173200  # 2026-12-02T01:00:00Z
    assert _value(samples, "k3kit_run_duration_seconds", **tonight) > 0
    assert _value(samples, "k3kit_run_verified", **tonight) == 1
    assert _value(samples, "k3kit_drift_metrics", **tonight, baseline=ACCEPTED) == 0
    assert _value(samples, "k3kit_drift_unmeasured_metrics", **tonight, baseline=ACCEPTED) == 0
    assert _value(samples, "k3kit_sheet_reopened", **tonight, baseline=ACCEPTED) == 0
    assert prom.stat().st_mode & 0o004, "node_exporter must be able to read it"


@needs_promtool
def test_textfile_passes_promtool_check_metrics(runs, tmp_path):
    prom = tmp_path / "k3kit.prom"
    assert main(["history", str(runs), "--out", str(tmp_path / "h.html"), "--textfile", str(prom)]) == 0
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=prom.read_text(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _rule_test(prom: Path, expect: list[dict]) -> dict:
    series = []
    for (name, labels), value in sorted(_samples(prom.read_text()).items(), key=lambda kv: kv[0][0]):
        sel = ",".join(f'{k}="{v}"' for k, v in sorted(labels))
        series.append({"series": f"{name}{{{sel}}}", "values": f"{format(value, '.17g')}x10"})
    return {"interval": "1m", "input_series": series,
            "alert_rule_test": [{"eval_time": "5m", "alertname": "K3kitRevalidationNotProduction",
                                 "exp_alerts": expect},
                                {"eval_time": "5m", "alertname": "K3kitRevalidationStale", "exp_alerts": []}]}


@needs_promtool
def test_the_alert_fires_on_a_night_that_is_not_production(runs, tmp_path):
    """The rule, as the README shows it, on the series `k3 history` wrote: it fires for tonight's
    limited-observation, and not for a folder whose last night was production (the rule can fail)."""
    readme = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    assert RULES.read_text(encoding="utf-8").strip() in readme, "docs/report.md shows the shipped rule file"
    bad, good = tmp_path / "bad.prom", tmp_path / "good.prom"
    assert main(["history", str(runs), "--out", str(tmp_path / "a.html"), "--textfile", str(bad)]) == 0
    only_good = tmp_path / "good"
    shutil.copytree(runs / ACCEPTED, only_good / ACCEPTED)
    assert main(["history", str(only_good), "--textfile", str(good)]) == 0
    firing = [{"exp_labels": {"alertname": "K3kitRevalidationNotProduction", "severity": "warning",
                              "kind": "acceptance", "decision": "limited-observation", "run": TONIGHT,
                              "label": "nightly"},
               "exp_annotations": {
                   "summary": f"re-validation not production: limited-observation ({TONIGHT})",
                   "description": f"Open outputs/{TONIGHT}/report/index.html for the reasons and the traffic cap."}}]
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [_rule_test(bad, firing), _rule_test(good, [])]}
    test_file = tmp_path / "rules.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["history", str(tmp_path / "missing")]) == 2
    assert main(["history", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a folder" in err[0] and "no run folder" in err[1]

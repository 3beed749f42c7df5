"""Each review input reader: good files read, and every bad value is ONE line naming file, line, column."""

from __future__ import annotations

import pytest

from k3lib.core.errors import ArtifactError, BadInputError
from k3lib.renewal.inputs import (TASK_COLUMNS, read_costs, read_hours, read_incidents, read_tasks)
from k3lib.renewal.params import load_review_params
from k3lib.renewal.series import Grid, read_history

TASK_HEADER = ",".join(TASK_COLUMNS)
GOOD_TASK = "T1,agent,self-hosted,2026-07-24T09:00:00Z,2026-07-24T09:01:00Z,2026-07-24T09:10:00Z,true,0,0,false,false,false,60"
INC_HEADER = ("id,started_at,category,detected_automatically,previous_version_restored,in_flight_resumed_or_cancelled,"
              "api_failover_without_contract_change,fields_preserved,minutes_to_recover")


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _one_line(exc: BadInputError, path, *needles):
    line = exc.one_line()
    assert "\n" not in line
    assert str(path) in line
    for n in needles:
        assert n in line, line
    return line


def test_good_task_log(tmp_path):
    p = _write(tmp_path, "tasks.csv", f"{TASK_HEADER}\n{GOOD_TASK}\n\nT1,agent,api,2026-07-24T09:00:00Z,,,false,1,0,"
                                     "false,false,false,0\n")
    tasks = read_tasks(p)
    assert [t.path for t in tasks] == ["self-hosted", "api"]
    assert tasks[1].started_at is None and tasks[0].wait_s == 60.0
    assert tasks[0].submitted_at.utcoffset().total_seconds() == 0


@pytest.mark.parametrize("row, needles", [
    pytest.param(GOOD_TASK.replace("agent", "chat"), ["line 2", "column category", "batch"], id="bad-category"),
    pytest.param(GOOD_TASK.replace("self-hosted", "cloud"), ["line 2", "column path", "api"], id="bad-path"),
    pytest.param(GOOD_TASK.replace(",true,", ",yes,"), ["line 2", "column accepted", "true or false"], id="bad-bool"),
    pytest.param(GOOD_TASK.replace("true,0,0", "true,-1,0"), ["line 2", "column retries", "-1"], id="negative-retries"),
    pytest.param(GOOD_TASK.replace("2026-07-24T09:00:00Z", "24/07/2026"), ["line 2", "column submitted_at", "ISO 8601"],
                 id="bad-time"),
    pytest.param(GOOD_TASK.replace(",60", ",soon"), ["line 2", "column wait_s"], id="bad-wait"),
    pytest.param(GOOD_TASK.replace("2026-07-24T09:10:00Z", "2026-07-24T08:10:00Z"),
                 ["line 2", "column finished_at", "started_at"], id="finished-before-started"),
    pytest.param(GOOD_TASK + ",extra", ["line 2", "14 cells", "expected 13"], id="extra-cell"),
    pytest.param(f"{GOOD_TASK}\n{GOOD_TASK}", ["line 3", "column task_id", "twice"], id="duplicate-task"),
])
def test_task_log_errors(tmp_path, row, needles):
    p = _write(tmp_path, "tasks.csv", f"{TASK_HEADER}\n{row}\n")
    with pytest.raises(BadInputError) as ei:
        read_tasks(p)
    _one_line(ei.value, p, *needles)


@pytest.mark.parametrize("header, needles", [
    pytest.param(TASK_HEADER.replace(",wait_s", ""), ["line 1", "missing column 'wait_s'"], id="missing-column"),
    pytest.param(TASK_HEADER + ",owner", ["line 1", "unknown column 'owner'"], id="unknown-column"),
    pytest.param("", ["line 1", "empty file"], id="empty"),
])
def test_task_log_header_errors(tmp_path, header, needles):
    p = _write(tmp_path, "tasks.csv", header + "\n" if header else "")
    with pytest.raises(BadInputError) as ei:
        read_tasks(p)
    _one_line(ei.value, p, *needles)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(BadInputError) as ei:
        read_tasks(tmp_path / "nope.csv")
    _one_line(ei.value, tmp_path / "nope.csv", "file not found")


def test_incidents_blank_answers_stay_unknown(tmp_path):
    p = _write(tmp_path, "inc.csv", f"{INC_HEADER}\nI1,2026-07-30T10:00:00Z,vllm-engine,true,,false,true,true,\n")
    (inc,) = read_incidents(p)
    assert inc.previous_version_restored is None and inc.in_flight_resumed_or_cancelled is False
    assert inc.minutes_to_recover is None


@pytest.mark.parametrize("row, needles", [
    pytest.param("I1,2026-07-30T10:00:00Z,gpu-fire,true,true,true,true,true,5", ["line 2", "column category"],
                 id="bad-category"),
    pytest.param("I1,2026-07-30T10:00:00Z,vllm-engine,maybe,true,true,true,true,5",
                 ["line 2", "column detected_automatically", "true or false"], id="bad-answer"),
    pytest.param("I1,2026-07-30T10:00:00Z,vllm-engine,true,true,true,true,true,-3",
                 ["line 2", "column minutes_to_recover"], id="negative-minutes"),
])
def test_incident_errors(tmp_path, row, needles):
    p = _write(tmp_path, "inc.csv", f"{INC_HEADER}\n{row}\n")
    with pytest.raises(BadInputError) as ei:
        read_incidents(p)
    _one_line(ei.value, p, *needles)


@pytest.mark.parametrize("text, needles", [
    pytest.param("week,category,hours\n2026-W31,coffee,3\n", ["line 2", "column category", "install"], id="bad-cat"),
    pytest.param("week,category,hours\n2026-W31,install,lots\n", ["line 2", "column hours"], id="bad-hours"),
    pytest.param("week,category\n2026-W31,install\n", ["line 1", "missing column 'hours'"], id="missing-col"),
])
def test_hours_errors(tmp_path, text, needles):
    p = _write(tmp_path, "hours.csv", text)
    with pytest.raises(BadInputError) as ei:
        read_hours(p)
    _one_line(ei.value, p, *needles)


def test_costs_blank_stays_blank(tmp_path):
    p = _write(tmp_path, "costs.yaml", "currency: EUR\ncapacity: 21000\nstorage:\nnetwork: ''\n")
    costs = read_costs(p)
    assert costs.capacity == 21000 and costs.storage is None and costs.api_bill_same_tasks is None


@pytest.mark.parametrize("text, needles", [
    pytest.param("capacity: 100\nstorage: -5\n", ["line 2", "key storage", "≥ 0 or blank"], id="negative"),
    pytest.param("capacity: lots\n", ["line 1", "key capacity"], id="not-a-number"),
    pytest.param("capacity: 1\ncoffee: 3\n", ["line 2", "key coffee", "unknown cost item"], id="unknown-item"),
    pytest.param("capacity: [1\n", ["not valid YAML"], id="bad-yaml"),
    pytest.param("- 1\n- 2\n", ["expected a mapping"], id="a-list"),
])
def test_costs_errors(tmp_path, text, needles):
    p = _write(tmp_path, "costs.yaml", text)
    with pytest.raises(BadInputError) as ei:
        read_costs(p)
    _one_line(ei.value, p, *needles)


@pytest.mark.parametrize("text, needles", [
    pytest.param("# TYPE x gauge\nx 1\n# EOF\n", ["line 2", "no timestamp"], id="no-timestamp"),
    pytest.param("x 1 1785000000000\n# EOF\n", ["line 1", "milliseconds"], id="milliseconds"),
    pytest.param("x 1 1785000300\nx 2 1785000000\n# EOF\n", ["line 2", "ascending time order"], id="out-of-order"),
    pytest.param("x one 1785000000\n", ["line 1", "Unix timestamp"], id="bad-value"),
    pytest.param("# EOF\n", ["no samples"], id="empty"),
])
def test_history_errors(tmp_path, text, needles):
    p = _write(tmp_path, "h.om", text)
    with pytest.raises(ArtifactError) as ei:
        read_history(p)
    _one_line(ei.value, p, *needles)


def test_history_reads_labels_with_escapes(tmp_path):
    p = _write(tmp_path, "h.om", 'x{a="b\\"c",d="e"} 1.5 1785000000\nx{a="b\\"c",d="e"} 2 1785000300.5\n# EOF\n')
    h = read_history(p)
    assert h["x"][(("a", 'b"c'), ("d", "e"))] == [(1785000000.0, 1.5), (1785000300.5, 2.0)]


def test_history_reads_an_escaped_backslash_before_n_as_a_backslash_not_a_newline(tmp_path):
    # `C:\\new` in the file: an escaped backslash, then the letters `new` (issue 17: the hand-written reader
    # unescaped `\n` first and read a newline); prometheus_client's OpenMetrics parser reads it right.
    p = _write(tmp_path, "h.om", 'x{path="C:\\\\new",q="tab\\\\t"} 1 1785000000\n'
                                 'x{path="C:\\\\new",q="tab\\\\t"} 2 1785000300\n# EOF\n')
    assert 'path="C:\\\\new"' in p.read_text()
    [(key, points)] = read_history(p)["x"].items()
    assert dict(key) == {"path": "C:\\new", "q": "tab\\t"} and "\n" not in dict(key)["path"]
    assert points == [(1785000000.0, 1.0), (1785000300.0, 2.0)]


def test_history_refuses_a_value_written_with_underscores_after_the_first_line(tmp_path):
    p = _write(tmp_path, "h.om", "x 1 1785000000\nx 1_000 1785000300\n# EOF\n")
    with pytest.raises(ArtifactError) as ei:
        read_history(p)
    _one_line(ei.value, p, "line 2", "Unix timestamp")


@pytest.mark.parametrize("sets, needles", [
    pytest.param(["review.series.prometheus_url=http://127.0.0.1:9090"], ["review.series", "exactly one"],
                 id="two-sources"),
    pytest.param(["review.rules.min_acceptance_rate=1.5"], ["review.rules.min_acceptance_rate"], id="rate-above-1"),
    pytest.param(["review.rules.coffee=1"], ["review.rules.coffee", "unknown key"], id="unknown-rule"),
    pytest.param(["review.series.end=2026-07-01T00:00:00Z"], ["end after start"], id="window-backwards"),
    pytest.param(["review.drill.kill=[{argv: [kill, '1'], http: {path: /x}}]"], ["exactly one of http or argv"],
                 id="kill-step-both"),
    pytest.param(["review.rules.timezone=Mars/Olympus"], ["review.rules.timezone", "IANA"], id="bad-timezone"),
    pytest.param(["review.rules.business_hours=[18, 9]"], ["review.rules.business_hours"], id="hours-backwards"),
])
def test_review_parameter_errors(tmp_path, sets, needles):
    p = _write(tmp_path, "review.yaml",
               "review:\n  inputs: {tasks: t.csv, costs: c.yaml, incidents: i.csv, hours: h.csv}\n"
               "  series: {history_file: h.om, start: 2026-07-24T00:00:00Z, end: 2026-08-14T00:00:00Z}\n")
    with pytest.raises(BadInputError) as ei:
        load_review_params([p], sets)
    line = ei.value.one_line()
    assert "\n" not in line
    for n in needles:
        assert n in line, line


def test_review_paths_are_relative_to_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    p = _write(tmp_path / "sub", "review.yaml",
               "review:\n  inputs: {tasks: t.csv, costs: c.yaml, incidents: i.csv, hours: h.csv}\n"
               "  series: {history_file: h.om, start: 2026-07-24T00:00:00Z, end: 2026-08-14T00:00:00Z}\n"
               "  deployment: {acceptance_run: ../runs/accepted}\n")
    params = load_review_params([p])
    assert params.review.inputs.tasks == str((tmp_path / "sub" / "t.csv").resolve())
    assert params.review.series.history_file == str((tmp_path / "sub" / "h.om").resolve())
    assert params.review.deployment.acceptance_run == str((tmp_path / "runs" / "accepted").resolve())


def test_grid_respects_the_prometheus_points_limit():
    import datetime as dt

    start = dt.datetime(2026, 7, 24, tzinfo=dt.timezone.utc)
    grid = Grid.for_window(start, start + dt.timedelta(days=21), 60)
    assert len(grid.times()) <= 11_000 and grid.step_s >= 165
    assert Grid.for_window(start, start + dt.timedelta(days=21), 300).step_s == 300

"""Bad input refused: property-based tests over the parameter files, the renewal review's readers and the metrics
exposition parser. Whatever the bytes, the answer is a result or one `BadInputError` line naming the input —
never a traceback. (collect_env, nvidia-smi, the vLLM log and tool replies have their own property tests in
tests/test_reader_*.py.)
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import os
import tempfile
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from k3lib.cli.main import main
from k3lib.core.errors import BadInputError
from k3lib.io.metrics import inspect_metrics, parse_exposition
from k3lib.core.params import Params, load_params
from k3lib.renewal import inputs as renewal_inputs
from k3lib.renewal.params import DeploymentLabels
from k3lib.renewal.series import Grid, read_history, series_from_file

# K3_PROPERTY_EXAMPLES=2000 for a deep search; the default keeps `make test` quick
SETTINGS = settings(max_examples=int(os.environ.get("K3_PROPERTY_EXAMPLES", "80")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

TEXT = st.characters(blacklist_categories=("Cs",))  # no lone surrogates: they cannot be written as UTF-8


def refused_in_one_line(exc: BadInputError, *names: str) -> str:
    """The CLI's line for this error: one line, naming one of `names` (the file, or the --set that was wrong)."""
    line = exc.one_line()
    assert "\n" not in line and line.strip(), repr(line)
    assert any(n in line for n in names), f"{line!r} names none of {names}"
    return line


def _write(folder: str, name: str, data: bytes | str) -> Path:
    path = Path(folder) / name
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------------------------------------------
# Parameter files


def _schema_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every section and field of the parameter model, as key paths (so generated files go deep)."""
    out = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        out.append(path)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_schema_paths(ann, path))
    return out


PATHS = _schema_paths(Params)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**13), st.floats(allow_nan=True, allow_infinity=True),
    st.text(TEXT, max_size=24),
    st.sampled_from(["http://127.0.0.1:8000", "https://x", "ftp://h", "http://h:99999", "http://[::1", "localhost",
                     "VLLM_API_KEY", "sk-not-a-name", "0.27.1", "nvml", "dcgm", "prometheus", "salt", "demo",
                     "kv-starved", "1e400", "-1", "0", "", "~", "null", "http:POST:{base_url}/x:{}", "[1, 2]"]))
VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=3)
                      | st.dictionaries(st.text(TEXT, max_size=8), kids, max_size=3), max_leaves=6)


@st.composite
def parameter_documents(draw) -> dict:
    """A mapping with some schema paths set to random values (sometimes a whole section replaced by a scalar),
    plus now and then an unknown key."""
    doc: dict = {"target": {}}  # the one required section, so most documents reach the field checks
    for path in draw(st.lists(st.sampled_from(PATHS), max_size=6)):
        node = doc
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = draw(VALUES)
    if draw(st.booleans()) and draw(st.integers(0, 4)) == 0:
        doc[draw(st.text(TEXT, min_size=1, max_size=8))] = draw(VALUES)
    return doc


@SETTINGS
@given(doc=parameter_documents())
@example(doc={"target": {"base_url": "http://127.0.0.1:99999"}})
@example(doc={"target": {"api_key_env": "sk-live-123"}})
@example(doc={"axes": {"capacity": {"step_max_requests": 0}}})
@example(doc={"axes": {"agent": {"max_duration_s": -5}}})
@example(doc={"target": "http://127.0.0.1:8000"})
@example(doc={"extends": "no-such-parent.yaml"})
@example(doc={"extends": [1, 2]})
def test_parameter_files_load_or_are_refused_in_one_line(doc):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, "params.yaml", yaml.safe_dump(doc, allow_unicode=True))
        try:
            params = load_params([path])
        except BadInputError as exc:
            refused_in_one_line(exc, str(path), "no-such-parent.yaml")
            return
    assert isinstance(params, Params)
    # what loaded is what the models allow: every load bound stays positive
    assert params.axes.agent.max_requests > 0 and params.axes.capacity.step_max_requests > 0


@SETTINGS
@given(data=st.one_of(st.binary(max_size=300), st.text(TEXT, max_size=300).map(lambda t: t.encode())))
@example(data=b"\xff\xfe\x00t\x00a\x00r")
@example(data=b"target: [unclosed")
@example(data=b"- a\n- b\n")
@example(data=b"!!python/object:os.system {}")
@example(data=b"a: &x [*x]")
@example(data=b"target:\n  base_url: http://127.0.0.1:8000\n\ttimeout_s: 3\n")
def test_any_bytes_as_a_parameter_file(data):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, "params.yaml", data)
        try:
            assert isinstance(load_params([path]), Params)
        except BadInputError as exc:
            refused_in_one_line(exc, str(path))


SET_KEYS = st.one_of(st.sampled_from([".".join(p) for p in PATHS]), st.text(TEXT, max_size=16))
SET_VALUES = st.one_of(st.text(TEXT, max_size=16),
                       SCALARS.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...")))


@SETTINGS
@given(sets=st.lists(st.builds(lambda k, v: f"{k}={v}", SET_KEYS, SET_VALUES) | st.text(TEXT, max_size=20),
                     min_size=1, max_size=3))
@example(sets=["target"])
@example(sets=["=3"])
@example(sets=["a..b=1"])
@example(sets=["target.base_url=http://127.0.0.1:8000", "target=3"])
@example(sets=["target.timeout_s=[unclosed"])
def test_set_overrides_load_or_are_refused_in_one_line(sets):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, "params.yaml", "target:\n  base_url: http://127.0.0.1:8000\n")
        try:
            assert isinstance(load_params([path], sets), Params)
        except BadInputError as exc:
            refused_in_one_line(exc, "--set", str(path))


# A handful through the CLI: exit 2 and exactly one line on stderr that names the file, before anything runs.
BAD_FILES = [
    pytest.param("a list.yaml", b"- target\n- recipe\n", "expected a mapping", id="not-a-mapping"),
    pytest.param("broken.yaml", b"target: {base_url: [\n", "not valid YAML", id="invalid-yaml"),
    pytest.param("binary.yaml", b"\x89PNG\r\n\x1a\n\x00\x00\xff", "", id="binary"),
    pytest.param("unknown.yaml", b"target:\n  base_urll: http://127.0.0.1:8000\n", "unknown key", id="unknown-key"),
    pytest.param("negative.yaml", b"target: {}\naxes:\n  capacity:\n    soak_duration_s: -1\n", "greater than 0",
                 id="negative-bound"),
    pytest.param("secret.yaml", b"target:\n  api_key_env: sk-abc123-def\n", "NAME of an environment variable",
                 id="key-value-instead-of-name"),
    pytest.param("loop.yaml", b"extends: loop.yaml\n", "extends itself", id="extends-loop"),
]


@pytest.mark.parametrize("name, data, phrase", BAD_FILES)
def test_cli_refuses_a_bad_parameter_file_in_one_line(tmp_path, capsys, name, data, phrase):
    path = tmp_path / name
    path.write_bytes(data)
    code = main(["validate", "-p", str(path), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert name in lines[0] and phrase in lines[0], lines[0]
    assert "Traceback" not in out + err
    assert not (tmp_path / "out").exists()  # refused before a run folder was made


@pytest.mark.parametrize("argv, phrase", [
    pytest.param(["-p", "{tmp}/missing.yaml"], "file not found", id="missing-file"),
    pytest.param(["-p", "{tmp}"], "cannot read", id="a-folder"),
    pytest.param(["-p", "{ok}", "--set", "target.timeout_s=-3"], "--set target.timeout_s", id="bad-set"),
    pytest.param(["-p", "{ok}", "--set", "nonsense"], "expected key.path=value", id="set-without-value"),
    pytest.param(["-p", "{ok}", "--fault", "no-such-fault"], "unknown fault", id="unknown-fault"),
])
def test_cli_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, phrase):
    ok = tmp_path / "ok.yaml"
    ok.write_text("target:\n  base_url: null\n")
    argv = [a.format(tmp=tmp_path, ok=ok) for a in argv]
    code = main(["validate", *argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert phrase in lines[0], lines[0]


# ---------------------------------------------------------------------------------------------------------------
# The renewal review's input files: task log, incidents, operations hours (CSV) and costs (YAML)

_TIMES = ["2026-07-24T09:30:00Z", "2026-07-24 09:30", "2026-07-24T09:30:00+02:00", "2026-13-40T99:00:00Z",
          "yesterday", "", "1753349400"]
_BOOLS = ["true", "false", "TRUE", " false ", "yes", "1", ""]
_NUMS = ["0", "3", "2.5", "-1", "1e3", "nan", "inf", "", "three"]


def _cells(column: str) -> st.SearchStrategy[str]:
    if column.endswith("_at"):
        pool = _TIMES
    elif column in ("accepted", "timed_out", "manual_correction", "routed_to_api", *renewal_inputs.FIVE_QUESTIONS):
        pool = _BOOLS
    elif column in ("retries", "tool_call_errors", "wait_s", "minutes_to_recover", "hours"):
        pool = _NUMS
    elif column == "category":
        pool = ["batch", "agent", "peak", "vllm-engine", "memory-cache", "install", "documentation", "other", ""]
    elif column == "path":
        pool = ["self-hosted", "api", "both", ""]
    else:
        pool = ["t1", "t2", "2026-W31", "1", "", "inc-1"]
    return st.one_of(st.sampled_from(pool), st.text(TEXT, max_size=12))


@st.composite
def csv_files(draw, columns: tuple[str, ...]) -> str:
    header = list(draw(st.permutations(columns)))
    if draw(st.integers(0, 9)) == 0:
        header.pop(draw(st.integers(0, len(header) - 1)))
    if draw(st.integers(0, 9)) == 0:
        header.append(draw(st.text(TEXT, min_size=1, max_size=8)))
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for _ in range(draw(st.integers(0, 4))):
        row = [draw(_cells(c)) for c in header]
        if draw(st.integers(0, 9)) == 0:
            row = row[:-1]
        writer.writerow(row)
    return buf.getvalue()


READERS = {
    "tasks": (renewal_inputs.read_tasks, renewal_inputs.TASK_COLUMNS),
    "incidents": (renewal_inputs.read_incidents, renewal_inputs.INCIDENT_COLUMNS),
    "hours": (renewal_inputs.read_hours, renewal_inputs.HOURS_COLUMNS),
}


@pytest.mark.parametrize("kind", list(READERS))
@SETTINGS
@given(data=st.data())
def test_review_csv_files_read_or_are_refused_in_one_line(kind, data):
    reader, columns = READERS[kind]
    text = data.draw(st.one_of(csv_files(columns), st.text(TEXT, max_size=200)), label="file")
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, f"{kind}.csv", text)
        try:
            rows = reader(path)
        except BadInputError as exc:
            line = refused_in_one_line(exc, str(path))
            assert "line" in line, line  # which line of the file is wrong
            return
    assert isinstance(rows, list)


@pytest.mark.parametrize("kind", list(READERS))
@pytest.mark.parametrize("data", [
    pytest.param(b"\xff\xfe\xfd not utf-8", id="not-utf8"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\x00\x00\x00", id="nul-bytes"),
    pytest.param(b'"unterminated, quote\n', id="open-quote"),
    pytest.param(b"a" * 200_000, id="one-huge-field"),
])
def test_review_csv_files_in_odd_bytes(tmp_path, kind, data):
    reader, _ = READERS[kind]
    path = tmp_path / f"{kind}.csv"
    path.write_bytes(data)
    with pytest.raises(BadInputError) as info:
        reader(path)
    refused_in_one_line(info.value, str(path))


COST_VALUES = st.one_of(st.none(), st.integers(-5, 10**9), st.floats(allow_nan=True), st.booleans(),
                        st.sampled_from(["", "12.5", "1,200", "EUR 30", "-3"]), st.lists(st.integers(), max_size=2),
                        st.dates())


@SETTINGS
@given(doc=st.one_of(
    st.dictionaries(st.sampled_from(["currency", *renewal_inputs.COST_ITEMS, "capacityy", "total"]), COST_VALUES,
                    max_size=6),
    st.text(TEXT, max_size=80)))
@example(doc={"capacity": float("nan")})
@example(doc={"capacity": float("inf")})
@example(doc={1: 2})
def test_costs_yaml_read_or_refused_in_one_line(doc):
    with tempfile.TemporaryDirectory() as folder:
        text = doc if isinstance(doc, str) else yaml.safe_dump(doc, allow_unicode=True)
        path = _write(folder, "costs.yaml", text)
        try:
            costs = renewal_inputs.read_costs(path)
        except BadInputError as exc:
            refused_in_one_line(exc, str(path))
            return
    # an amount is a finite number ≥ 0 or stays unknown (None); never a guess
    for item in renewal_inputs.COST_ITEMS:
        value = getattr(costs, item)
        assert value is None or (value >= 0), (item, value)


@pytest.mark.parametrize("data", [
    pytest.param(b"\xff\xfe not utf-8: 1\n", id="not-utf8"),
    pytest.param(b"capacity: !!python/name:os.system\n", id="python-tag"),
    pytest.param(b"- 1\n- 2\n", id="a-list"),
])
def test_costs_yaml_in_odd_bytes(tmp_path, data):
    path = tmp_path / "costs.yaml"
    path.write_bytes(data)
    with pytest.raises(BadInputError) as info:
        renewal_inputs.read_costs(path)
    refused_in_one_line(info.value, str(path))


# ---------------------------------------------------------------------------------------------------------------
# The review's OpenMetrics history

_NAMES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:prompt_tokens_total", "vllm:request_success_total", "DCGM_FI_DEV_GPU_UTIL", "other_metric", ""]
_LABELS = ["", '{model_name="kimi-k3",engine="0"}', '{gpu="0"}', "{}", '{a="b', '{a=b}', '{a="x\\"y"}',
           '{a="}"}', "{", "}"]
_VALS = ["1", "0.5", "NaN", "+Inf", "-1", "1e3", "x", ""]
T0 = 1_753_349_400  # 2025-07-24T09:30:00Z


@st.composite
def history_files(draw) -> str:
    lines = []
    t = T0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.sampled_from(["# TYPE vllm:num_requests_running gauge", "# EOF", "", "#"])))
            continue
        t += draw(st.sampled_from([300, 300, 60, 0, -300]))
        ts = draw(st.sampled_from([str(t), str(t), f"{t}.5", str(t * 1000), "", "later", "nan", "-inf"]))
        lines.append(f"{draw(st.sampled_from(_NAMES))}{draw(st.sampled_from(_LABELS))} "
                     f"{draw(st.sampled_from(_VALS))} {ts}".rstrip())
    if draw(st.integers(0, 4)) == 0:
        lines.append(draw(st.text(TEXT, max_size=40)))
    return "\n".join(lines) + "\n"


GRID = Grid.for_window(dt.datetime.fromtimestamp(T0, dt.timezone.utc),
                       dt.datetime.fromtimestamp(T0 + 3600, dt.timezone.utc), 300)


@SETTINGS
@given(text=st.one_of(history_files(), st.text(TEXT, max_size=120)))
def test_history_files_read_or_refused_in_one_line(text):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(folder, "history.om", text)
        try:
            history = read_history(path)
            series = series_from_file(path, GRID, DeploymentLabels()).raw  # every label set: none is another's
        except BadInputError as exc:
            refused_in_one_line(exc, str(path))
            return
    assert isinstance(history, dict)
    for raw in series.values():
        for values in raw.values.values():
            assert len(values) == len(GRID.times())  # NaN where nothing was sampled, never a missing slot


@pytest.mark.parametrize("data", [
    pytest.param(b"vllm:num_requests_running 1 1753349400\n\xff\xfe\n", id="not-utf8"),
    pytest.param(b"", id="empty"),
])
def test_history_file_in_odd_bytes(tmp_path, data):
    path = tmp_path / "history.om"
    path.write_bytes(data)
    with pytest.raises(BadInputError) as info:
        read_history(path)
    refused_in_one_line(info.value, str(path))


def test_history_path_that_is_a_folder(tmp_path):
    with pytest.raises(BadInputError) as info:
        read_history(tmp_path)
    refused_in_one_line(info.value, str(tmp_path))


# ---------------------------------------------------------------------------------------------------------------
# Metrics exposition: `parse_exposition` never raises; `inspect_metrics` gives a report with unreadable values
# null, or ArtifactError when no line is a sample

_EXPO_LINES = st.one_of(
    st.builds(lambda n, l, v: f"{n}{l} {v}", st.sampled_from(_NAMES[:-1] + ["vllm:cache_config_info",
                                                                           "sglang:num_running_reqs"]),
              st.sampled_from(_LABELS), st.sampled_from(_VALS)),
    st.sampled_from(["# HELP vllm:x help 5", "# TYPE vllm:num_requests_running gauge", "```", "$ curl :8000/metrics",
                     "\x1b[32mvllm:num_requests_running 3\x1b[0m", "2026-08-13T10:00:00Z vllm:num_requests_waiting 2",
                     "vllm:num_requests_running{engine=\"0\"} 1\r", "# EOF"]),
    st.text(TEXT, max_size=40))


@SETTINGS
@given(text=st.one_of(st.lists(_EXPO_LINES, max_size=10).map("\n".join), st.text(TEXT, max_size=200)))
@example(text="vllm:num_requests_running NaN\nvllm:kv_cache_usage_perc +Inf\n")
@example(text="vllm:num_requests_running{model_name=\"<script>\"} 1\n")
def test_exposition_parses_and_inspects_without_a_traceback(text):
    expo = parse_exposition(text)
    assert all(isinstance(s.value, float) for s in expo.samples)
    try:
        report = inspect_metrics(text)
    except BadInputError as exc:
        refused_in_one_line(exc, "Prometheus exposition")
        assert not expo.samples
        return
    assert set(report) >= {"engine", "model_name", "engines", "values"}
    for name, value in typing.cast(dict, report["values"]).items():
        assert value is None or isinstance(value, (int, float)), (name, value)


@pytest.mark.parametrize("data", [
    pytest.param(b"\xff\xfe\x00\x01", id="binary"),
    pytest.param(b"<html><body>502 Bad Gateway</body></html>", id="html"),
    pytest.param(b"", id="empty"),
])
def test_inspect_metrics_cli_refuses_a_non_exposition_in_one_line(tmp_path, capsys, data):
    path = tmp_path / "metrics.txt"
    path.write_bytes(data)
    code = main(["inspect", "metrics", str(path)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert str(path) in lines[0]


def test_inspect_metrics_cli_keeps_unreadable_values_null(tmp_path, capsys):
    path = tmp_path / "metrics.txt"
    path.write_text("$ curl -s :8000/metrics | grep running\nvllm:num_requests_running{engine=\"0\"} 3\n"
                    "vllm:kv_cache_usage_perc{engine=\"0\"} oops\n")
    code = main(["inspect", "metrics", "--json", str(path)])
    import json

    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["values"]["num_requests_running"] == 3
    assert report["values"]["kv_cache_usage_perc"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in report["values"].values() if v is not None)


# ---------------------------------------------------------------------------------------------------------------
# The readers issue 18 added: cut JSON, Responses events, bare assistant text, `k3 inspect auto`, line numbering

_PASTED = Path(__file__).resolve().parent / "data" / "pasted"
_SAMPLES = sorted(p for p in _PASTED.iterdir() if p.name not in ("labels.json", "README.md"))


@st.composite
def mangled_samples(draw) -> str:
    """A pasted sample cut anywhere, with CRs, prefixes or random characters spliced in."""
    text = _SAMPLES[draw(st.integers(0, len(_SAMPLES) - 1))].read_bytes().decode("utf-8", errors="replace")
    cut = draw(st.integers(0, len(text)))
    text = text[:cut]
    at = draw(st.integers(0, len(text)))
    splice = draw(st.one_of(st.text(TEXT, max_size=12), st.sampled_from(["\r", "\r\n", "# ", "> ", "{", "\"", "'",
                                                                         "<tool_call>", "data: ", ")"])))
    return text[:at] + splice + text[at:]


@SETTINGS
@given(text=st.one_of(mangled_samples(), st.text(TEXT, max_size=200)))
def test_every_kind_and_auto_read_or_refuse_in_one_line(text):
    from k3lib.io.readers.kinds import KINDS, guess_kind, inspect_as

    for kind in KINDS:
        try:
            reading = inspect_as(kind, text)
        except BadInputError as exc:
            refused_in_one_line(exc, "")
            continue
        assert isinstance(reading, dict)
    try:
        kind, reason = guess_kind(text)
    except BadInputError as exc:
        refused_in_one_line(exc, "kind", "empty")
        return
    assert kind in KINDS and reason


@SETTINGS
@given(text=st.one_of(st.text(st.sampled_from('{}[]",: \n0123456789.-eEtrufalsn\\u'), max_size=60),
                      st.text(TEXT, max_size=60)))
def test_cut_json_never_raises(text):
    from k3lib.io.readers._cutjson import read_cut_json

    cut = read_cut_json(text)
    assert cut is None or cut.complete in (True, False)


@SETTINGS
@given(text=st.text(st.sampled_from("ab\r\n\x1b[0m"), max_size=40))
def test_line_numbers_are_those_of_grep_n(text):
    from k3lib.io.readers._text import numbered_lines

    numbers = [n for n, _ in numbered_lines(text)]
    assert numbers == list(range(1, len(numbers) + 1))
    if "\n" in text:
        assert len(numbers) == text.count("\n") + (0 if text.endswith("\n") else 1)

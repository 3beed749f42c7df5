"""The shapes people paste (issue 18), on samples written here (tests/data/pasted): every label field read right,
`k3 inspect auto` picks the labelled kind, every kind's output matches its JSON Schema, and one line numbering."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import real_world_missing

from k3lib.cli.main import main
from k3lib.axes.environment.rules import line_of
from k3lib.core.errors import ArtifactError
from k3lib.io.metrics.parse import parse_exposition
from k3lib.io.readers._cutjson import CutText, read_cut_json
from k3lib.io.readers._text import clean_lines, numbered_lines
from k3lib.io.readers.kinds import KINDS, guess_kind, inspect_as
from k3lib.io.readers.labels import FOLDER_KINDS, score_text
from k3lib.io.readers.vllm_log import parse_vllm_log

ROOT = Path(__file__).resolve().parents[1]
PASTED = ROOT / "tests" / "data" / "pasted"
LABELS = json.loads((PASTED / "labels.json").read_text(encoding="utf-8"))
REAL_WORLD = ROOT.parent / "shared" / "real-world"
SCHEMAS = ROOT / "schemas" / "inspect"


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def test_every_sample_has_a_label_and_a_readme_line():
    files = {p.name for p in PASTED.iterdir() if p.name not in ("labels.json", "README.md")}
    assert files == set(LABELS)
    readme = (PASTED / "README.md").read_text(encoding="utf-8")
    missing = [name for name in files if f"`{name}`" not in readme]
    assert not missing, f"not described in tests/data/pasted/README.md: {missing}"


@pytest.mark.parametrize("name", sorted(LABELS))
def test_every_label_field_is_read_right(name):
    label = LABELS[name]
    scores = score_text(label["kind"], _text(PASTED / name), label["fields"])
    wrong = [(field, expected, got) for field, expected, got, right in scores if not right]
    assert scores and not wrong


@pytest.mark.parametrize("name", sorted(LABELS))
def test_auto_picks_the_labelled_kind(name):
    label = LABELS[name]
    text = _text(PASTED / name)
    if "refused" in label["fields"]:
        # A refused text is refused by its own kind's reader, whose line says what is wrong with it.
        kind, _ = guess_kind(text)
        assert kind == label["kind"]
        with pytest.raises(ArtifactError, match="tried"):
            inspect_as(kind, text)
        return
    kind, reason = guess_kind(text)
    assert (kind, bool(reason)) == (label["kind"], True)


def _real_world_reports() -> list:
    if not (REAL_WORLD / "labels.json").exists():
        return [real_world_missing(None)]
    labels = json.loads((REAL_WORLD / "labels.json").read_text(encoding="utf-8"))
    return [pytest.param(key, id=key) for key, label in sorted(labels.items()) if "not_a_report" not in label]


@pytest.mark.parametrize("key", _real_world_reports())
def test_auto_picks_the_folder_kind_of_every_real_world_artifact(key):
    assert guess_kind(_text(REAL_WORLD / key))[0] == FOLDER_KINDS[key.split("/")[0]]


def test_a_log_that_quotes_tool_markup_is_a_log_not_a_reply():
    text = _text(PASTED / "log_with_tool_markup.txt")
    assert "<tool_call>" in text
    assert guess_kind(text)[0] == "log"
    # Only a bare assistant text with markup and no log record is read as a reply.
    assert guess_kind("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n")[0] == "tool-reply"


def test_inspect_a_folder_prints_one_json_line_per_file(capsys):
    code = main(["inspect", "auto", "--json", str(PASTED)])
    out = capsys.readouterr()
    lines = [json.loads(line) for line in out.out.splitlines()]
    assert code == 2  # the refused samples
    by_name = {Path(r["path"]).name: r for r in lines}
    assert set(LABELS) <= set(by_name)
    for name, label in LABELS.items():
        if "refused" in label["fields"]:
            assert label["fields"]["refused"] in by_name[name]["error"]
        else:
            assert by_name[name]["kind"] == label["kind"] and by_name[name]["kind_reason"]
    refused = [ln for ln in out.err.splitlines() if ln.startswith("k3: ")]
    assert len(refused) == len(out.err.splitlines())


def test_inspect_several_files_of_one_kind(capsys):
    files = [str(PASTED / n) for n in sorted(LABELS) if LABELS[n]["kind"] == "log"]
    assert main(["inspect", "log", "--json", *files]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["path"] for r in lines] == files and {r["kind"] for r in lines} == {"log"}


def test_one_refused_file_is_one_line_exit_2(capsys):
    assert main(["inspect", "tool-reply", str(PASTED / "tool_choices_null.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tool_choices_null.json" in err[0] and "tried" in err[0]


# ---------------------------------------------------------------------------------------------------------------
# JSON Schemas


def _schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"{kind}.schema.json").read_text(encoding="utf-8"))


def _samples_by_kind() -> list:
    cases = []
    for name, label in sorted(LABELS.items()):
        if "refused" not in label["fields"]:
            cases.append(pytest.param(label["kind"], PASTED / name, id=f"pasted/{name}"))
    if (REAL_WORLD / "labels.json").exists():
        for key, label in sorted(json.loads((REAL_WORLD / "labels.json").read_text()).items()):
            if "not_a_report" not in label:
                cases.append(pytest.param(FOLDER_KINDS[key.split("/")[0]], REAL_WORLD / key, id=f"real-world/{key}"))
    else:
        cases.append(real_world_missing(None, None))
    return cases


def test_every_kind_has_a_valid_schema():
    assert {p.name.split(".")[0] for p in SCHEMAS.glob("*.schema.json")} == set(KINDS)
    for kind in KINDS:
        jsonschema.Draft202012Validator.check_schema(_schema(kind))


@pytest.mark.parametrize(("kind", "path"), _samples_by_kind())
def test_inspect_output_matches_its_schema(kind, path, capsys):
    assert main(["inspect", kind, "--json", str(path)]) == 0
    line = json.loads(capsys.readouterr().out)
    jsonschema.validate(line, _schema(kind), cls=jsonschema.Draft202012Validator)


def test_a_schema_rejects_a_reading_with_a_wrong_type():
    reading = inspect_as("tool-reply", _text(PASTED / "tool_hermes_content.txt"))
    reading["has_tool_calls"] = "no"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(reading, _schema("tool-reply"))


# ---------------------------------------------------------------------------------------------------------------
# One line numbering


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("a\nb\n", [(1, "a"), (2, "b")], id="lf"),
    pytest.param("a\r\nb", [(1, "a"), (2, "b")], id="crlf-no-final-newline"),
    pytest.param("bar 10%\rbar 100%\nnext\n", [(1, "bar 100%"), (2, "next")], id="progress-bar-cr"),
    pytest.param("bar 100%\r\r\nnext\n", [(1, "bar 100%"), (2, "next")], id="cr-before-crlf"),
    pytest.param("a\rb\rc\r", [(1, "a"), (2, "b"), (3, "c")], id="old-mac"),
    pytest.param(b"x\xff\ny\n", [(1, "x\ufffd"), (2, "y")], id="bytes"),
    pytest.param("a\n\nb\n", [(1, "a"), (2, ""), (3, "b")], id="blank-kept"),
])
def test_numbered_lines_number_as_grep_n(text, expected):
    assert numbered_lines(text) == expected


def test_every_reader_numbers_lines_the_same():
    text = _text(PASTED / "log_cr_progress_then_oom.txt")
    expected = {n for n, line in numbered_lines(text) if "OutOfMemoryError" in line}
    report = parse_vllm_log(text)
    assert {report.oom.line} == expected == {5}
    assert line_of(text, "OutOfMemoryError").startswith("line 5: ")
    assert len(clean_lines(text, drop_fences=False)) == len(numbered_lines(text))
    junk = "vllm:num_requests_running 1\nprogress 10%\rprogress 90%\noops not a sample\n"
    assert [s.line_no for s in parse_exposition(junk).skipped] == [2, 3]


# ---------------------------------------------------------------------------------------------------------------
# The cut-JSON reader


def test_cut_json_reads_every_prefix_of_a_pretty_body():
    body = json.dumps({"choices": [{"index": 0, "message": {"content": "a \"quoted\" \\u00e9 word",
                                                            "tool_calls": [{"function": {"arguments": "{}"}}]},
                                    "finish_reason": "tool_calls"}], "n": [1.5, -2, True, None]}, indent=2)
    for end in range(1, len(body)):
        cut = read_cut_json(body[:end])
        assert cut is not None and not cut.complete and () in cut.open_paths, end
    whole = read_cut_json(body)
    assert whole is not None and whole.complete and whole.value == json.loads(body)


def test_cut_json_keeps_a_cut_string_as_cut_text_and_drops_a_cut_key():
    cut = read_cut_json('{"a": "hel')
    assert cut is not None and cut.value == {"a": "hel"} and isinstance(cut.value["a"], CutText)
    assert read_cut_json('{"a": 1, "bb').value == {"a": 1}
    assert read_cut_json('{"a": 12').value == {}
    assert read_cut_json("not json") is None
    assert read_cut_json('{"a": tru x') is None

"""Labelled artifacts: a reading flattened to the field names labels use, and a reading scored against a label.

The names are those of `../shared/real-world/labels.json` (and `tests/data/pasted/labels.json`): `oom_phase` for
a log's OOM, `gpu_count` and `gpu_names` for nvidia-smi, `not_a_report` for a text a reader refuses."""

from __future__ import annotations

from typing import Any

from k3lib.core.errors import BadInputError
from k3lib.core.jsonvalue import JsonObject, JsonValue
from k3lib.io.readers.kinds import inspect_as

__all__ = ["FOLDER_KINDS", "FieldScore", "flat_fields", "score_text"]

# real-world folder → kind
FOLDER_KINDS = {"collect_env": "collect-env", "logs": "log", "metrics": "metrics", "nvidia_smi": "nvidia-smi",
                "toolcalls": "tool-reply"}


def flat_fields(kind: str, reading: JsonObject) -> JsonObject:
    """The reading with the derived names labels use added (the reading's own names are kept)."""
    out = dict(reading)
    if kind == "log":
        oom = reading.get("oom")
        out["oom_phase"] = oom["phase"] if isinstance(oom, dict) else None
        out["oom_line"] = oom["line"] if isinstance(oom, dict) else None
    elif kind == "nvidia-smi":
        gpus = _listed(reading.get("gpus"))
        out["gpu_count"] = len(gpus)
        out["gpu_names"] = [g.get("name") for g in gpus]
    elif kind == "metrics":
        out["out_of_domain"] = [f"{x['name']}={x['value']:g}" for x in _listed(reading.get("out_of_domain"))]
    return out


def _listed(value: JsonValue) -> list[JsonObject]:
    """A reading's list of objects (a reader writes one or none)."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


class FieldScore(tuple):
    """(field, expected, got, right)."""

    __slots__ = ()

    def __new__(cls, field: str, expected: Any, got: Any) -> FieldScore:
        return super().__new__(cls, (field, expected, got, _same(expected, got)))

    @property
    def right(self) -> bool:
        return bool(self[3])


def _same(expected: Any, got: Any) -> bool:
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return abs(expected - got) <= 1e-9 * max(1.0, abs(expected))
    return bool(expected == got and type(expected) is type(got)) or (
        isinstance(expected, int) and not isinstance(expected, bool) and isinstance(got, float) and expected == got)


def score_text(kind: str, text: str, label: JsonObject) -> list[FieldScore]:
    """Every label field against the reading of `text`; a dict-valued field scores each of its keys.

    `not_a_report: true` (or `refused: "<words the one line holds>"`) expects the reader to refuse the text."""
    try:
        got = flat_fields(kind, inspect_as(kind, text))
        refusal = None
    except BadInputError as exc:
        got, refusal = {}, exc.one_line()
    scores: list[FieldScore] = []
    for field, expected in label.items():
        if field == "not_a_report":
            scores.append(FieldScore(field, expected, refusal is not None))
        elif field == "refused":
            scores.append(FieldScore(field, expected, expected if refusal and isinstance(expected, str) and expected in refusal
                                      else refusal))
        elif isinstance(expected, dict):
            raw_inner = got.get(field)
            inner: JsonObject = raw_inner if isinstance(raw_inner, dict) else {}
            scores += [FieldScore(f"{field}.{k}", v, inner.get(k, _MISSING)) for k, v in expected.items()]
        else:
            scores.append(FieldScore(field, expected, got.get(field, _MISSING)))
    return scores


class _Missing:
    def __repr__(self) -> str:
        return "<not in the reading>"


_MISSING = _Missing()

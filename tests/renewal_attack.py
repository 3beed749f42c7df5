"""Helpers of the renewal attack tests (issue 39): a demo scenario copied into a test's folder, its files tampered
with as an attacker would, and the review's own path (parameters, inputs, series, analyses, decision) run on it."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any, Callable

from k3lib.renewal import demo
from k3lib.renewal.params import load_review_params
from k3lib.renewal.review import analyse, decide_from_axes, load_review

TODAY = dt.date(2026, 8, 14)
START = demo.ANCHOR_END - dt.timedelta(days=demo.WINDOW_DAYS)


def copy_scenario(source: dict[str, Path], folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, path in source.items():
        out[key] = folder / path.name
        shutil.copyfile(path, out[key])
    return out


def review(paths: dict[str, Path], sets: list[str] | tuple[str, ...] = ()) -> tuple[Any, dict[str, Any]]:
    """The decision and the axes of the review the copied scenario's parameters describe (no notebooks, no drill)."""
    params = load_review_params([paths["params"]], list(sets))
    data = load_review(params)
    axes = analyse(data)
    return decide_from_axes(data.params, axes, today=TODAY), axes


def text(decision: Any) -> str:
    return "\n".join(decision.reasons) + "\n" + decision.condition


def edit_lines(path: Path, fn: Callable[[list[str]], list[str]]) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(fn(lines)) + "\n", encoding="utf-8")


def csv_rows(path: Path) -> tuple[str, list[dict[str, str]]]:
    header, *rows = path.read_text(encoding="utf-8").splitlines()
    names = header.split(",")
    return header, [dict(zip(names, r.split(","))) for r in rows if r]


def write_rows(path: Path, header: str, rows: list[dict[str, str]]) -> None:
    names = header.split(",")
    path.write_text("\n".join([header, *(",".join(r[n] for n in names) for r in rows)]) + "\n", encoding="utf-8")


def add_to_family(history: Path, family: str, lines: list[str]) -> None:
    """Sample lines added inside an OpenMetrics family's block (after its existing samples)."""
    def insert(all_lines: list[str]) -> list[str]:
        start = all_lines.index(next(x for x in all_lines if x.startswith(f"# TYPE {family} ")))
        end = next(i for i in range(start + 1, len(all_lines)) if all_lines[i].startswith("#"))
        return all_lines[:end] + lines + all_lines[end:]

    edit_lines(history, insert)


def samples(history: Path, prefix: str) -> list[tuple[str, float, int]]:
    """(head, value, timestamp) of every sample line whose name starts with `prefix`."""
    out = []
    for line in history.read_text(encoding="utf-8").splitlines():
        if line.startswith(prefix):
            head, value, ts = line.rsplit(" ", 2)
            out.append((head, float(value), int(ts)))
    return out


def map_samples(history: Path, prefix: str, fn: Callable[[str, float, int], float | None]) -> None:
    """Each sample of `prefix` given a new value by `fn` (None drops the line)."""
    def remap(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if not line.startswith(prefix):
                out.append(line)
                continue
            head, value, ts = line.rsplit(" ", 2)
            new = fn(head, float(value), int(ts))
            if new is not None:
                out.append(f"{head} {new:g} {ts}")
        return out

    edit_lines(history, remap)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")

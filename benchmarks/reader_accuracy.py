"""Benchmark: how many labelled fields the `k3 inspect` readers read right, on the samples written here
(tests/data/pasted) and on the composed real-world set (../shared/real-world), by kind.

    .venv/bin/python benchmarks/reader_accuracy.py            # table on stdout, then each wrong field
    .venv/bin/python benchmarks/reader_accuracy.py --json     # one JSON object

A field is one label value (a dict-valued label such as metrics `values` counts each key). A refusal that the
label expects (`not_a_report`, `refused`) is one field. Exit 1 when a field is wrong, so CI can run it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k3lib.io.readers.labels import FOLDER_KINDS, score_text  # noqa: E402


def _cases(folder: Path) -> list[tuple[str, str, Path, dict[str, Any]]]:
    """(name, kind, path, label fields) for each labelled file of a fixture folder."""
    labels = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    out = []
    for name, label in sorted(labels.items()):
        if "kind" in label and "fields" in label:  # tests/data/pasted
            out.append((name, label["kind"], folder / name, label["fields"]))
        else:  # ../shared/real-world: the kind is the folder
            out.append((name, FOLDER_KINDS[name.split("/")[0]], folder / name, label))
    return out


def measure(folder: Path) -> dict[str, Any]:
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrong = []
    for name, kind, path, fields in _cases(folder):
        text = path.read_bytes().decode("utf-8", errors="replace")
        for field, expected, got, right in score_text(kind, text, fields):
            by_kind[kind][0] += bool(right)
            by_kind[kind][1] += 1
            if not right:
                wrong.append({"file": name, "field": field, "expected": expected, "got": repr(got)})
    right = sum(r for r, _ in by_kind.values())
    total = sum(t for _, t in by_kind.values())
    return {"folder": str(folder), "right": right, "total": total,
            "by_kind": {k: {"right": r, "total": t} for k, (r, t) in sorted(by_kind.items())}, "wrong": wrong}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    folders = [ROOT / "tests" / "data" / "pasted", ROOT.parent / "shared" / "real-world"]
    results = [measure(f) for f in folders if (f / "labels.json").exists()]
    if args.json:
        print(json.dumps({"sets": results}, indent=2, default=str))
    else:
        for res in results:
            print(f"{res['folder']}: {res['right']}/{res['total']} fields right")
            for kind, n in res["by_kind"].items():
                print(f"  {kind:<12} {n['right']:>4}/{n['total']}")
            for w in res["wrong"]:
                print(f"  wrong: {w['file']} {w['field']}: expected {w['expected']!r}, got {w['got']}")
    return 1 if any(res["wrong"] for res in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())

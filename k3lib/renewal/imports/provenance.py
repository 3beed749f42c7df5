"""The provenance header every importer writes on top of the file it produces: the source
file and its sha256, the filters, the window, what was mapped and what was left blank, in `#` lines a person reads
and one `# k3-import:` JSON line per source the next import reads back (which source owns which rows)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ...core.errors import BadInputError
from ...core.store import atomic_write_bytes, sha256_file
from ..window import ReviewWindow, iso  # noqa: F401  (the review window, defined once in renewal/window.py)
from .shapes import ImportMeta

MARK = "# k3-import: "


def iso_week(t: dt.datetime, tz: str = "UTC") -> str:
    year, week, _ = t.astimezone(ZoneInfo(tz)).isocalendar()
    return f"{year}-W{week:02d}"


@dataclasses.dataclass
class Provenance:
    """One import: where its rows came from and what it did with them."""

    importer: str
    source: str
    sha256: str
    window: str
    selection: str = ""
    mapped: list[str] = dataclasses.field(default_factory=list)  # "column → field" lines
    blank: list[str] = dataclasses.field(default_factory=list)  # what was left blank, and why
    notes: list[str] = dataclasses.field(default_factory=list)  # figures a reader checks (rows kept, left out…)
    owns: list[str] = dataclasses.field(default_factory=list)  # the rows or items this source wrote
    extra: ImportMeta = dataclasses.field(default_factory=lambda: ImportMeta())  # more of the meta line (credits)

    @classmethod
    def of(cls, importer: str, source: str | Path, window: ReviewWindow, **kw: Any) -> "Provenance":
        p = Path(source)
        return cls(importer=importer, source=str(p.resolve()), sha256=sha256_file(p), window=window.label(), **kw)

    def lines(self) -> list[str]:
        out = [f"# Imported by `k3 import {self.importer}` from {self.source}",
               f"#   sha256 {self.sha256}", f"#   window {self.window}"]
        if self.selection:
            out.append(f"#   selection: {self.selection}")
        out += [f"#   mapped: {m}" for m in self.mapped]
        out += [f"#   left blank: {b}" for b in self.blank]
        out += [f"#   {n}" for n in self.notes]
        meta = {"importer": self.importer, "source": self.source, "sha256": self.sha256, "owns": self.owns,
                **self.extra}
        out.append(MARK + json.dumps(meta, sort_keys=True, ensure_ascii=False))
        return [" ".join(line.split("\n")) for line in out]


def read_header(path: Path) -> tuple[list[str], list[ImportMeta]]:
    """The `#` lines on top of an existing file, and the sources its `# k3-import:` lines name."""
    if not path.is_file():
        return [], []
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    metas = []
    for line in lines:
        if line.startswith(MARK):
            try:
                metas.append(json.loads(line[len(MARK):]))
            except json.JSONDecodeError:
                raise BadInputError(f"a damaged `{MARK.strip()}` line ({line[:80]}…); expected the line an import "
                                    "wrote (re-import into a new file)", source=str(path)) from None
    return lines, metas


def blocks(lines: list[str]) -> list[list[str]]:
    """The header split into one block per import (each starts with its `# Imported by` line)."""
    out: list[list[str]] = []
    for line in lines:
        if line.startswith("# Imported by") or not out:
            out.append([])
        out[-1].append(line)
    return out


def write_text(path: Path, text: str) -> None:
    atomic_write_bytes(Path(path), text.encode("utf-8"))

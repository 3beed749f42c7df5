"""An export file read as rows: CSV (a repeated column, like Jira's `Labels` or `Log Work`, kept as a list),
JSON (a list, the list under the key a tool wraps it in, or one object), JSON lines, or Parquet (pyarrow); gzip
compressed too. Bills are read columnar instead (columnar.py). Values stay as the file gives them; each importer parses
its own columns and names the row and column of a bad value."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import math
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ...core.errors import BadInputError
from ...core.jsonvalue import JsonValue

# one row (a CSV line, a JSON object), its values as the file gives them: JSON, or a CSV cell (text; a repeated
# column's cells as a list)
Row = dict[str, JsonValue]


def _suffixes(p: Path) -> list[str]:
    s = [x.lower() for x in p.suffixes]
    return s[:-1] if s and s[-1] == ".gz" else s


def _raw(p: Path, what: str) -> bytes:
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise BadInputError(f"file not found; expected {what}", source=str(p)) from None
    except OSError as exc:
        raise BadInputError(f"cannot read ({exc}); expected {what}", source=str(p)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise BadInputError(f"not a readable gzip file ({exc}); expected {what}", source=str(p)) from None
    return data


def _text(p: Path, data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"not UTF-8 text ({exc.reason} at byte {exc.start}); expected {what}",
                            source=str(p)) from None


def _row(names: list[str], repeated: set[str], cells: list[str]) -> Row:
    lists: dict[str, list[JsonValue]] = {n: [] for n in repeated}
    row: Row = {n: cells for n, cells in lists.items()}
    for n, c in zip(names, cells):
        if n not in repeated:
            row[n] = c
        elif c.strip():
            lists[n].append(c.strip())
    return row


def csv_rows(text: str, p: Path, what: str) -> list[Row]:
    """Rows keyed by header name; a name the header repeats maps to the list of its non-blank cells."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
        if header is None:
            raise BadInputError(f"empty file; expected {what}", source=str(p))
        names = [h.strip() for h in header]
        repeated = {n for n in names if names.count(n) > 1}
        rows = []
        for cells in reader:
            if any(c.strip() for c in cells):
                rows.append({**_row(names, repeated, cells), "_line": reader.line_num})
    except csv.Error as exc:
        raise BadInputError(f"line {reader.line_num}: not readable as CSV ({exc}); expected {what}",
                            source=str(p)) from None
    return rows


def _parquet_rows(p: Path, what: str) -> list[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BadInputError("reading Parquet needs pyarrow: pip install pyarrow (or export CSV)",
                            source=str(p)) from None
    try:
        table = pq.read_table(p)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several unrelated types for a bad file
        raise BadInputError(f"not a readable Parquet file ({type(exc).__name__}: {exc}); expected {what}",
                            source=str(p)) from None
    rows = table.to_pylist()
    for n, row in enumerate(rows, start=1):
        row["_line"] = n
    return rows


def json_rows(text: str, p: Path, what: str, keys: tuple[str, ...] = (), lines: bool = False) -> list[Row]:
    """A JSON document's list of objects (at the top, or under the first of `keys` present), or JSON lines (always
    for `lines`: a one-line JSONL file is one record, not a document)."""
    doc = None
    if not lines:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            pass
    if doc is None:
        out = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BadInputError(f"line {n}: not JSON ({exc.msg}); expected {what}", source=str(p)) from None
        doc = out
    if isinstance(doc, dict):  # the list a tool wraps, one record under its key (`incident`), or one record
        key = next((k for k in keys if isinstance(doc.get(k), list)), None)
        one = next((k for k in keys if isinstance(doc.get(k), dict)), None)
        doc = doc[key] if key is not None else [doc[one]] if one is not None else [doc]
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise BadInputError(f"{shape_of(doc)}; expected {what} (a list of objects, JSON lines or one object)",
                            source=str(p))
    for n, row in enumerate(doc, start=1):
        row.setdefault("_line", n)
    return doc


def read_rows(path: str | Path, what: str, json_keys: tuple[str, ...] = ()) -> list[Row]:
    """The rows of an export, its format told by its name (.csv, .json, .jsonl/.ndjson, .parquet; any .gz)."""
    p = Path(path)
    kind = next((s for s in reversed(_suffixes(p)) if s in (".csv", ".json", ".jsonl", ".ndjson", ".parquet")), None)
    if kind == ".parquet":
        if not p.is_file():
            raise BadInputError(f"file not found; expected {what}", source=str(p))
        return _parquet_rows(p, what)
    data = _raw(p, what)
    if data[:4] == b"PAR1":
        return _parquet_rows(p, what)
    text = _text(p, data, what)
    if kind == ".csv" or (kind is None and not text.lstrip().startswith(("{", "["))):
        return csv_rows(text, p, what)
    return json_rows(text, p, what, json_keys, lines=kind in (".jsonl", ".ndjson"))


# --- values -----------------------------------------------------------------------------------------------------

def blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, float) and v != v)


def to_time(v: Any, tz: str = "UTC", formats: tuple[str, ...] = ()) -> dt.datetime:
    """An ISO 8601 string (`Z` or an offset; none: in `tz`), a datetime, a date (its midnight in `tz`), epoch
    seconds (or milliseconds past 1e11), or a string in one of `formats`. Raises ValueError naming what it got."""
    zone = ZoneInfo(tz)
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=zone)
    if isinstance(v, dt.date):
        return dt.datetime.combine(v, dt.time(), zone)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return dt.datetime.fromtimestamp(v / 1000 if v > 1e11 else v, dt.timezone.utc)
    if isinstance(v, str) and v.strip():
        s = v.strip()
        for fmt in formats:
            try:
                t = dt.datetime.strptime(s, fmt)
            except ValueError:
                continue
            return t if t.tzinfo else t.replace(tzinfo=zone)
        try:
            t = dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace(" UTC", "+00:00"))
        except ValueError:
            raise ValueError(f"expected an ISO 8601 time such as 2026-07-24T09:30:00Z (got {s!r})") from None
        return t if t.tzinfo else t.replace(tzinfo=zone)
    raise ValueError(f"expected a time (got {v!r})")


def to_float(v: Any) -> float:
    """A finite number from a cell (NaN and ±Inf are no amount, count or duration: refused like text)."""
    if isinstance(v, bool):
        raise ValueError(f"expected a number (got {v!r})")
    out: float | None = None
    if isinstance(v, (int, float)) or (hasattr(v, "__float__") and not isinstance(v, str)):  # Decimal from Parquet
        out = float(v)
    elif isinstance(v, str) and v.strip():
        try:
            out = float(v.strip())
        except ValueError:
            pass
    if out is None:
        raise ValueError(f"expected a number (got {v!r})")
    if not math.isfinite(out):
        raise ValueError(f"expected a finite number (got {v!r})")
    return out


def mapping(v: Any) -> dict[str, str]:
    """Tags or labels in any of their export shapes: a JSON object string, a dict, a list of (key, value) pairs
    (a Parquet map) or of {key, value} objects (GCP); blank: none."""
    if blank(v):
        return {}
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            raise ValueError(f"expected tags as a JSON object (got {v[:60]!r})") from None
    if isinstance(v, dict):
        return {str(k): "" if x is None else str(x) for k, x in v.items()}
    if isinstance(v, list):
        out = {}
        for item in v:
            if isinstance(item, (list, tuple)) and len(item) == 2:
                out[str(item[0])] = "" if item[1] is None else str(item[1])
            elif isinstance(item, dict) and "key" in item:
                out[str(item["key"])] = "" if item.get("value") is None else str(item.get("value"))
        return out
    raise ValueError(f"expected tags as a mapping (got {type(v).__name__})")


def obj(v: Any) -> Row:
    """`v` when it is a JSON object, else an empty one."""
    return v if isinstance(v, dict) else {}


def dig(row: Any, path: str) -> Any:
    """`a.b.c` in nested objects (None when any part is absent)."""
    node = row
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


class RowError(ValueError):
    """A bad value in one row: the importer turns it into one BadInputError line with the row and column."""

    def __init__(self, column: str, problem: str) -> None:
        self.column, self.problem = column, problem
        super().__init__(f"column {column}: {problem}")


def cell(row: Row, column: str, parse: Any, *, required: bool = True, default: Any = None) -> Any:
    """`parse(row[column])`, a bad or missing required value raised as RowError naming the column."""
    v = row.get(column)
    if blank(v):
        if required:
            raise RowError(column, "blank; expected a value")
        return default
    try:
        return parse(v)
    except ValueError as exc:
        raise RowError(column, str(exc)) from None


def row_error(path: str | Path, row: Row, exc: RowError) -> BadInputError:
    where = f"line {row['_line']}" if isinstance(row.get("_line"), int) else "a row"
    return BadInputError(f"{where}, {exc}", source=str(path))


def require_columns(path: str | Path, rows: list[Row], columns: tuple[str, ...], what: str) -> None:
    """Refuse an export that lacks a column the importer needs, naming the first missing one."""
    if not rows:
        return
    present = set().union(*(r.keys() for r in rows[:50]))
    missing = [c for c in columns if c not in present]
    if missing:
        raise BadInputError(f"no column {missing[0]!r}; expected {what} with the columns {', '.join(columns)}",
                            source=str(path))


# --- what an export looks like, for a file no importer recognises ---------------------------------------------------

SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a FOCUS export (k3 import focus)", ("BilledCost", "ChargePeriodStart")),
    ("an AWS CUR 2.0 export (k3 import cur)", ("line_item_usage_start_date", "line_item_unblended_cost")),
    ("a legacy AWS CUR export (k3 import cur)", ("lineItem/UsageStartDate",)),
    ("a Google Cloud billing export (k3 import gcp)", ("usage_start_time", "cost")),
    ("invoice lines (k3 import invoice)", ("period_start", "amount")),
    ("a PagerDuty incidents export (k3 import pagerduty)", ("incident_number",)),
    ("an Opsgenie incidents export (k3 import opsgenie)", ("tinyId",)),
    ("a Jira CSV with Log Work columns (k3 import jira)", ("Log Work",)),
    ("Jira worklogs (k3 import jira)", ("issueId", "timeSpentSeconds")),
    ("Tempo worklogs (k3 import jira)", ("tempoWorklogId",)),
    ("a Jira issues export (k3 import jira --issues)", ("key", "fields")),
    ("an OpenAI Batch output (k3 import usage)", ("custom_id", "response")),
    ("Anthropic Message Batch results (k3 import usage)", ("custom_id", "result")),
    ("API responses with usage (k3 import usage)", ("usage",)),
    ("a LiteLLM spend log (k3 import usage)", ("request_id", "spend")),
)


def looks_like(names: list[str], nesting: str = "") -> str:
    """`looks like X (columns a, b, c, …)`: the known export whose columns it carries, else what it is."""
    have = {n.strip() for n in names}
    guess = next((w for w, sig in SIGNATURES if all(s in have for s in sig)), None)
    shown = ", ".join(sorted(have)[:8]) + (", …" if len(have) > 8 else "")
    return (f"looks like {guess or 'no known export'} ({nesting or 'columns'} {shown or 'none'})")


def shape_of(doc: Any) -> str:
    """The nesting of a JSON document, in words: its top-level keys and the keys of its first record."""
    if isinstance(doc, list):
        first = next((r for r in doc if isinstance(r, dict)), None)
        return f"a JSON list of {len(doc)} item(s)" + (f" whose first has the keys {_keys(first)}" if first else "")
    if isinstance(doc, dict):
        return f"a JSON object with the keys {_keys(doc)}"
    return f"a JSON {type(doc).__name__}"


def _keys(d: dict) -> str:
    ks = [k for k in d if k != "_line"]
    return ", ".join(ks[:8]) + (", …" if len(ks) > 8 else "")

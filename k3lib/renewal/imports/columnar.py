"""A bill read columnar and streamed, only the columns it needs: Parquet a row group at a time, CSV (gzip too)
through pyarrow's streaming reader, both in batches of a few hundred thousand rows, so a monthly CUR of millions
of lines is read in bounded memory; JSON (Google Cloud's BigQuery export as JSON lines or an array) through the
row reader. Column names are made one shape as they are read: a legacy CUR header `lineItem/UsageStartDate` is the
CUR 2.0 `line_item_usage_start_date` (AWS's own mechanical rule), a BigQuery CSV's dotted `service.description`
stays dotted. A cell holding the literal `NULL` (FOCUS's empty cell) or nothing is blank. Values are converted per
column, and a bad one is named by its line and column."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ...core.errors import BadInputError
from .tables import Row, _suffixes, blank, looks_like, mapping, read_rows, to_time

BATCH_ROWS = 262_144
NULLS = ["", "NULL", "null", "Null"]
UTC_US = pa.timestamp("us", tz="UTC")


def canonical(name: str) -> str:
    """A legacy CUR header (`lineItem/UsageStartDate`, `resourceTags/user:app`) as its CUR 2.0 column
    (`line_item_usage_start_date`, `resource_tags_user_app`): each part camel → snake, joined by `_`."""
    m = re.fullmatch(r"([A-Za-z]+)/(.+)", name.strip())
    if not m:
        return name.strip()
    return "_".join(re.sub(r"(?<!^)(?=[A-Z])", "_", part).lower().replace(":", "_") for part in m.groups())


@dataclasses.dataclass
class Export:
    """An opened export: its canonical column names (→ the file's own) and how to stream its batches."""

    path: Path
    what: str
    names: dict[str, str]  # canonical → physical
    kind: str  # parquet, csv or rows
    rows: list[Row] | None = None

    def has(self, name: str) -> bool:
        return name in self.names

    def require(self, columns: tuple[str, ...], expected: str) -> None:
        missing = [c for c in columns if c not in self.names]
        if missing:
            raise BadInputError(f"{looks_like(list(self.names))}, without the column {missing[0]!r}; expected "
                                f"{expected} with the columns {', '.join(columns)}", source=str(self.path))

    def batches(self, wanted: list[str]) -> Iterator[tuple[int, pa.Table]]:
        """(line of the batch's first row, table of the wanted columns present, canonically named)."""
        cols = [c for c in dict.fromkeys(wanted) if c in self.names]
        if self.kind == "rows":
            yield from self._row_batches(cols)
            return
        first = 2 if self.kind == "csv" else 1
        for batch in self._raw_batches([self.names[c] for c in cols]):
            table = pa.Table.from_batches([batch]).rename_columns(cols)
            yield first, table
            first += table.num_rows

    def _raw_batches(self, physical: list[str]) -> Iterator[pa.RecordBatch]:
        try:
            if self.kind == "parquet":
                # pulled a batch at a time: a dataset scanner reads ahead of a slower consumer (850 MB of a
                # 5,000,000-line CUR buffered), this reader holds one row group and the batch being folded
                yield from pq.ParquetFile(self.path).iter_batches(batch_size=BATCH_ROWS, columns=physical)
                return
            reader = _csv_reader(self.path, physical)
            for batch in reader:
                yield batch
        except (pa.ArrowException, OSError) as exc:
            raise BadInputError(f"not readable ({' '.join(str(exc).split())[:200]}); expected {self.what}",
                                source=str(self.path)) from None

    def _row_batches(self, cols: list[str]) -> Iterator[tuple[int, pa.Table]]:
        rows = self.rows or []
        for i in range(0, len(rows), BATCH_ROWS):
            chunk = rows[i:i + BATCH_ROWS]
            data = {c: [_dotted(r, self.names[c]) for r in chunk] for c in cols}
            yield i + 1, pa.table({c: _py_array(v) for c, v in data.items()})


def _py_array(values: list[Any]) -> pa.Array:
    """JSON values as one Arrow column: scalars as they are, nested values (lists, objects) kept as Python objects
    behind a string of their JSON (what the importer parses)."""

    if any(isinstance(v, (list, dict)) for v in values):
        return pa.array([None if v is None else json.dumps(v) for v in values], pa.string())
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if blank(v) else str(v) for v in values], pa.string())


def _dotted(row: Row, name: str) -> Any:
    node: Any = row
    for part in name.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _csv_reader(path: Path, physical: list[str]) -> Any:
    stream = pa.input_stream(str(path), compression="detect")
    types = {c: pa.string() for c in physical}
    return pacsv.open_csv(stream, read_options=pacsv.ReadOptions(block_size=16 << 20),
                          convert_options=pacsv.ConvertOptions(include_columns=physical, column_types=types,
                                                               null_values=NULLS, strings_can_be_null=True,
                                                               quoted_strings_can_be_null=True))


def _csv_header(path: Path) -> list[str]:
    stream = pa.input_stream(str(path), compression="detect")
    reader = pacsv.open_csv(stream, read_options=pacsv.ReadOptions(block_size=1 << 20),
                            convert_options=pacsv.ConvertOptions(column_types={}, include_columns=[]))
    names = list(reader.schema.names)
    stream.close()
    return names


def _json_names(rows: list[Row]) -> dict[str, str]:
    names: dict[str, str] = {}
    for r in rows[:200]:
        for k, v in r.items():
            if k == "_line":
                continue
            names.setdefault(k, k)
            if isinstance(v, dict):
                for sub in v:
                    names.setdefault(f"{k}.{sub}", f"{k}.{sub}")
    return names


def open_export(path: str | Path, what: str) -> Export:
    """The export's kind (by its name, else its first bytes) and its column names, nothing read yet."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"file not found; expected {what}", source=str(p))
    suffix = next((s for s in reversed(_suffixes(p)) if s in (".csv", ".json", ".jsonl", ".ndjson", ".parquet")),
                  None)
    with p.open("rb") as f:
        head = f.read(4)
    if suffix == ".parquet" or head == b"PAR1":
        try:
            physical = pq.ParquetFile(p).schema_arrow.names
        except (pa.ArrowException, OSError) as exc:
            raise BadInputError(f"not a readable Parquet file ({exc}); expected {what}", source=str(p)) from None
        return Export(p, what, {canonical(n): n for n in physical}, "parquet")
    if suffix in (".json", ".jsonl", ".ndjson") or (suffix is None and _starts_json(p)):
        rows = read_rows(p, what, ("data", "results", "rows"))
        return Export(p, what, _json_names(rows), "rows", rows)
    try:
        physical = _csv_header(p)
    except (pa.ArrowException, OSError) as exc:
        raise BadInputError(f"not readable as CSV ({' '.join(str(exc).split())[:200]}); expected {what}",
                            source=str(p)) from None
    return Export(p, what, {canonical(n): n for n in physical}, "csv")


def _starts_json(p: Path) -> bool:
    with pa.input_stream(str(p), compression="detect") as s:
        head = s.read(256).lstrip()
    return head[:1] in (b"{", b"[")


# --- values, a column at a time ---------------------------------------------------------------------------------


def fail(export: Export, line: int, column: str, problem: str) -> BadInputError:
    return BadInputError(f"line {line}, column {column}: {problem}", source=str(export.path))


def strings(table: pa.Table, column: str) -> pa.Array:
    """The column as strings, blank ("") where absent or null."""
    if column not in table.column_names:
        return pa.array([""] * table.num_rows, pa.string())
    col = table.column(column).combine_chunks()
    if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
        col = col.cast(pa.string())
    return pc.fill_null(col, "")


def numbers(export: Export, table: pa.Table, first: int, column: str, required: bool = True) -> np.ndarray:
    """The column as float64 (0 where blank and not required); a bad or missing required value is one line."""
    if column not in table.column_names:
        if required:
            raise fail(export, first, column, "blank; expected a number")
        return np.zeros(table.num_rows)
    col = table.column(column).combine_chunks()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.utf8_trim_whitespace(col)
        try:
            col = col.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad = next(i for i, v in enumerate(col.to_pylist()) if v is not None and not _is_float(v))
            raise fail(export, first + bad, column, f"expected a number (got {col[bad].as_py()!r})") from None
    elif not pa.types.is_floating(col.type):
        col = col.cast(pa.float64())
    if required and col.null_count:
        bad = pc.index(pc.is_null(col), True).as_py()
        raise fail(export, first + bad, column, "blank; expected a number")
    values = pc.fill_null(col, 0.0).to_numpy(zero_copy_only=False)
    # an amount is finite: ±Inf is never one, nor NaN where a number is required (an optional column's NaN is a
    # blank, as a dataframe writes one); np.nan_to_num once turned NaN into 0 and Inf into 1.8e308 unseen
    bad_at = np.flatnonzero(np.isinf(values) | (np.isnan(values) if required else False))
    if bad_at.size:
        raise fail(export, first + int(bad_at[0]), column,
                   f"expected a finite number (got {float(values[bad_at[0]])!r})")
    return np.nan_to_num(values)


def _is_float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def times(export: Export, table: pa.Table, first: int, column: str, tz: str = "UTC",
          parse: Callable[[Any], dt.datetime] | None = None) -> np.ndarray:
    """The column as int64 microseconds since the epoch, UTC. Timestamps are taken as they are (without a zone:
    UTC, as CUR and BigQuery write them); strings are parsed once per distinct value."""
    col = table.column(column).combine_chunks() if column in table.column_names else None
    if col is None or col.null_count:
        bad = 0 if col is None else pc.index(pc.is_null(col), True).as_py()
        raise fail(export, first + bad, column, "blank; expected a time")
    if pa.types.is_timestamp(col.type):
        if col.type.tz is None:
            col = col.cast(pa.timestamp(col.type.unit)).cast(pa.timestamp(col.type.unit, tz="UTC"))
        return col.cast(UTC_US).cast(pa.int64()).to_numpy()
    if pa.types.is_date(col.type):
        return col.cast(pa.timestamp("us")).cast(pa.int64()).to_numpy()
    enc = pc.dictionary_encode(col.cast(pa.string()) if not pa.types.is_string(col.type) else col)
    values = []
    for i, v in enumerate(enc.dictionary.to_pylist()):
        try:
            t = parse(v) if parse else to_time(v, tz)
        except ValueError as exc:
            bad = pc.index(enc.indices, i).as_py()
            raise fail(export, first + bad, column, str(exc)) from None
        values.append(round(t.timestamp() * 1e6))
    return np.asarray(values, dtype=np.int64)[enc.indices.to_numpy(zero_copy_only=False)]


def norm_key(k: str) -> str:
    k = k.strip().lower()
    for prefix in ("user:", "user_", "tag:", "tags/"):
        if k.startswith(prefix):
            k = k[len(prefix):]
    return k.replace(":", "_")


def tag_mask(table: pa.Table, column: str, wanted: dict[str, str], flat_prefix: str = "") -> np.ndarray:
    """Rows whose tags carry every wanted pair (keys compared without `user:`-style prefixes): from a map column,
    a JSON object string, a list of {key, value}, or flattened columns `<flat_prefix><key>` (legacy CUR)."""
    n = table.num_rows
    if not wanted:
        return np.zeros(n, dtype=bool)
    found = {k: np.zeros(n, dtype=bool) for k in wanted}
    if column in table.column_names:
        col = table.column(column).combine_chunks()
        if pa.types.is_map(col.type):
            _map_matches(col, wanted, found)
        else:
            enc = pc.dictionary_encode(col.cast(pa.string()) if pa.types.is_string(col.type) or
                                       pa.types.is_large_string(col.type) else col)
            idx = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False)
            for k, v in wanted.items():
                hit = np.array([_has(x, k, v) for x in enc.dictionary.to_pylist()] + [False], dtype=bool)
                found[k] |= hit[idx]
    for name in table.column_names if flat_prefix else ():
        if name.startswith(flat_prefix):
            key = norm_key(name[len(flat_prefix):])
            for k, v in wanted.items():
                if norm_key(k) == key:
                    found[k] |= np.asarray(pc.fill_null(pc.equal(strings(table, name), v), False))
    out = np.ones(n, dtype=bool)
    for m in found.values():
        out &= m
    return out


def _has(tags: Any, key: str, value: str) -> bool:
    try:
        got = mapping(tags)
    except ValueError:
        return False
    return any(norm_key(k) == norm_key(key) and v == value for k, v in got.items())


def _map_matches(col: pa.MapArray, wanted: dict[str, str], found: dict[str, np.ndarray]) -> None:
    """A map column's pairs: keys normalised once per distinct key, values compared only where the key matched."""
    offsets = col.offsets.to_numpy()
    lo, hi = int(offsets[0]), int(offsets[-1])
    keys = pc.dictionary_encode(col.keys.slice(lo, hi - lo))
    key_idx = pc.fill_null(keys.indices, -1).to_numpy(zero_copy_only=False)
    parents = np.repeat(np.arange(len(col)), np.diff(offsets))
    distinct = [norm_key(str(k)) for k in keys.dictionary.to_pylist()] + [""]
    for k, v in wanted.items():
        at = np.nonzero(np.array([d == norm_key(k) for d in distinct], dtype=bool)[key_idx])[0]
        if not len(at):
            continue
        values = col.items.slice(lo, hi - lo).take(pa.array(at)).cast(pa.string())
        hit = np.asarray(pc.fill_null(pc.equal(values, v), False), dtype=bool)
        found[k][parents[at[hit]]] = True

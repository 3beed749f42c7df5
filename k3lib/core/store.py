"""The evidence store: one folder per run, atomic writes, and a manifest of sha256 hashes kept up to date.

Layout: `outputs/<UTC timestamp>-<short id>/` with `params.json`, `evidence/<axis>.json`, `notebooks/`,
`report/`, `decision.json` and `manifest.json`. Every file is written to a temp file in the same folder,
flushed, fsynced and `os.replace`d, then its hash goes into the manifest under a file lock (several notebook
kernels may write to one run at once). A run killed at any point leaves each finished file listed with its hash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from .errors import BadInputError, EvidenceError

MANIFEST = "manifest.json"
_LOCK = ".manifest.lock"

log = logging.getLogger(__name__)

# JSONL streams whose tail this process has checked before its first append (`_cut_torn_tail`)
_TAILS_CHECKED: set[Path] = set()
_TAILS_LOCK = threading.Lock()


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _umask() -> int:
    """The process umask, read without changing it where Linux shows it (setting it races other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere the only way to read it is to set it, then put it straight back
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Temp file in the same folder, flush, fsync, replace, fsync the folder: all or nothing.

    mkstemp creates the temp file 0600; the finished file gets the mode an ordinary `open()` would give it
    (0666 less the process umask, 0644 by default), so a report folder can be served or shared with a group.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)


def durable_replace(src: Path, path: Path) -> None:
    """A finished file written by someone else (papermill's partial output) into place at `path` as
    `atomic_write_bytes` would: fsync it, replace, fsync the folder. `src` must be in the same file system."""
    fd = os.open(src, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(src, path)
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def to_json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False, default=_json_default) + "\n").encode()


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)  # a frozen record of io (a load phase's summary, a probe)
    if isinstance(obj, (dt.datetime, dt.date)):
        return obj.isoformat()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


class RunStore:
    """One run folder. Paths given to its methods are relative to the run root."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    # -- creation ---------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, outputs_dir: str | Path, *, label: str = "") -> "RunStore":
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        name = f"{stamp}-{secrets.token_hex(3)}"
        if label:
            safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:40]
            name = f"{name}-{safe}"
        return cls.create_at(Path(outputs_dir) / name)

    @classmethod
    def create_at(cls, root: Path) -> "RunStore":
        try:
            root.mkdir(parents=True, exist_ok=True)
            for sub in ("evidence", "notebooks", "report"):
                (root / sub).mkdir(exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"cannot create the run folder: {exc.strerror}", source=str(root)) from None
        store = cls(root)
        store._update_manifest({})
        return store

    @classmethod
    def open(cls, path: str | Path) -> "RunStore":
        root = Path(path)
        if not (root / MANIFEST).is_file():
            raise BadInputError("not a k3kit run folder (no manifest.json)", source=str(path))
        return cls(root)

    @property
    def run_id(self) -> str:
        return self.root.name

    def path(self, rel: str) -> Path:
        return self.root / rel

    # -- writing ----------------------------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> Path:
        """Write `rel` atomically and record its hash. A file the manifest already lists is rewritten in three
        durable steps: the manifest names the new content as `pending` beside the old, the file is replaced, the
        manifest keeps the new content alone; a kill between any two leaves a file that one of them names, so a
        killed run's files all verify (`verify`)."""
        target = self.root / rel
        entry = (hashlib.sha256(data).hexdigest(), len(data))
        if rel in self.manifest()["files"]:
            self._update_manifest({}, pending={rel: entry})
        atomic_write_bytes(target, data)
        self._update_manifest({rel: entry})
        return target

    def write_text(self, rel: str, text: str) -> Path:
        return self.write_bytes(rel, text.encode("utf-8"))

    def write_json(self, rel: str, obj: Any) -> Path:
        return self.write_bytes(rel, to_json_bytes(obj))

    def adopt(self, rel: str) -> Path:
        """Record the hash of a file written by someone else (papermill) once it is finished and in place."""
        target = self.root / rel
        self._update_manifest({rel: (sha256_file(target), target.stat().st_size)})
        return target

    def move_in(self, src: Path, rel: str) -> Path:
        """A finished file written by someone else (papermill's partial output) moved durably to `rel`
        (`durable_replace`), then its hash recorded (`adopt`)."""
        durable_replace(src, self.root / rel)
        return self.adopt(rel)

    def set_aside(self, rels: list[str], under: str) -> list[str]:
        """Move the files `rels` (and every file below a folder among them) to `under/<rel>`, each renamed durably,
        its old manifest entry dropped and its new place hashed. A killed attempt's streams are never adopted
        (hashed) where they were written: they are hashed here, as they were left. Returns the new paths."""
        moved: list[str] = []
        for rel in rels:
            src = self.root / rel
            files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src] if src.is_file() else []
            for path in files:
                old = path.relative_to(self.root).as_posix()
                new = f"{under}/{old}"
                (self.root / new).parent.mkdir(parents=True, exist_ok=True)
                durable_replace(path, self.root / new)
                with _TAILS_LOCK:
                    _TAILS_CHECKED.discard(path)
                self._update_manifest({new: (sha256_file(self.root / new), (self.root / new).stat().st_size)},
                                      drop=(old,))
                moved.append(new)
            if src.is_dir():
                for folder in sorted((p for p in src.rglob("*") if p.is_dir()), reverse=True):
                    folder.rmdir()
                src.rmdir()
        return moved

    def append_jsonl(self, rel: str, obj: Any) -> None:
        """Append one record and fsync: streams of request records survive a kill line by line.

        A JSONL stream is hashed when it is closed (`adopt`); until then a reader trusts whole lines only
        (`read_jsonl`). A torn last line left by a writer that died mid-line is cut before this process' first
        append, so that only a stream's last line can ever be torn.
        """
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with _TAILS_LOCK:
            if target not in _TAILS_CHECKED:
                _cut_torn_tail(target)
                _TAILS_CHECKED.add(target)
        line = json.dumps(obj, ensure_ascii=False, default=_json_default) + "\n"
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / _LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _update_manifest(self, entries: dict[str, tuple[str, int]], drop: tuple[str, ...] = (),
                         pending: dict[str, tuple[str, int]] | None = None) -> None:
        with self._locked():
            manifest = self.manifest()
            for rel in drop:
                manifest["files"].pop(rel, None)
            for rel, (digest, size) in entries.items():
                manifest["files"][rel] = {"sha256": digest, "bytes": size}
            for rel, (digest, size) in (pending or {}).items():
                if rel in manifest["files"]:
                    manifest["files"][rel]["pending"] = {"sha256": digest, "bytes": size}
            manifest["run_id"] = self.run_id
            manifest["updated_at"] = utc_now()
            atomic_write_bytes(self.root / MANIFEST, to_json_bytes(manifest))

    # -- reading ----------------------------------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        try:
            data = json.loads((self.root / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"files": {}}
        except ValueError as exc:
            raise EvidenceError(f"{self.root / MANIFEST}: not valid JSON ({exc})") from None
        data.setdefault("files", {})
        return data

    def read_jsonl(self, rel: str) -> list[dict[str, Any]]:
        """The records of a JSONL stream (`append_jsonl`), [] when there is none. One rule for every stream: a
        last line without its newline that does not parse is a write cut by a kill or a crash, skipped (and
        logged); any other line that is not a JSON object means the file was changed after it was written:
        EvidenceError naming the line, rather than a judgement over part of the evidence."""
        path = self.root / rel
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" when the stream ends with its newline, as every whole stream does
        out = [_jsonl_record(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
        if torn.strip():
            try:
                out.append(_jsonl_record(path, len(lines) + 1, torn))
            except EvidenceError:
                log.warning("%s: its last line (%d bytes, no newline) was cut by a kill or a crash; skipped",
                            path, len(torn))
        return out

    def read_json(self, rel: str) -> Any:
        try:
            return json.loads((self.root / rel).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise EvidenceError(f"{self.root / rel}: not valid JSON ({exc})") from None

    def verify(self) -> list[str]:
        """Problems found, one line each (empty list: every listed file matches its hash, or the content a rewrite
        cut by a kill had named as `pending`: the kit wrote both)."""
        problems = []
        for rel, entry in sorted(self.manifest()["files"].items()):
            target = self.root / rel
            if not target.is_file():
                problems.append(f"{rel}: missing")
            elif sha256_file(target) not in (entry.get("sha256"), (entry.get("pending") or {}).get("sha256")):
                problems.append(f"{rel}: changed (sha256 differs from the manifest)")
        return problems

    def manifest_sha256(self) -> str:
        return sha256_file(self.root / MANIFEST)


def _jsonl_record(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise EvidenceError(f"{path}: line {number} is not JSON ({exc}); only a stream's last line may be cut by "
                            "a kill: this file was changed after the kit wrote it") from None
    if not isinstance(record, dict):
        raise EvidenceError(f"{path}: line {number} is {type(record).__name__}, not a record (a JSON object): this "
                            "file was changed after the kit wrote it")
    return record


def _cut_torn_tail(path: Path) -> None:
    """Cut what follows the last newline of `path` (a line a dead writer left unfinished): appended to, it would
    become a bad line in the middle of the stream."""
    try:
        fh = open(path, "r+b")
    except FileNotFoundError:
        return
    with fh:
        end = fh.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:
            start = max(0, pos - (1 << 16))
            fh.seek(start)
            newline = fh.read(pos - start).rfind(b"\n")
            if newline >= 0:
                pos = start + newline + 1
                break
            pos = start
        if pos == end:
            return
        fh.seek(pos)
        try:
            _jsonl_record(path, 0, fh.read())
            fh.write(b"\n")  # whole but for its newline: kept
        except EvidenceError:
            log.warning("%s: cut its unfinished last line (%d bytes) left by an interrupted writer", path, end - pos)
            fh.truncate(pos)
        fh.flush()
        os.fsync(fh.fileno())

"""`k3 inspect KIND PATH…`: read pasted artifacts (collect_env, nvidia-smi, a vLLM log, /metrics, a chat reply) and
print the fields the kit finds in them, aligned or one JSON line per file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..core.errors import BadInputError
from ..io.readers.kinds import guess_kind, inspect_as


def _read_source(source: str, kind: str) -> str:
    if source == "-":
        return sys.stdin.read()
    if kind == "metrics" and source.startswith(("http://", "https://")):
        import httpx

        try:
            resp = httpx.get(source, timeout=10.0)
        except httpx.HTTPError as exc:
            raise BadInputError(f"cannot fetch: {exc}", source=source) from None
        if resp.status_code != 200:
            raise BadInputError(f"HTTP {resp.status_code}; expected 200 with a Prometheus exposition", source=source)
        return resp.text
    path = Path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInputError("file not found", source=source) from None
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror}", source=source) from None
    return data.decode("utf-8", errors="replace")


def _expand_sources(sources: list[str]) -> list[str]:
    """Files in the order given; a folder gives every non-hidden file under it, sorted."""
    out: list[str] = []
    for source in sources:
        path = Path(source)
        if source != "-" and path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise BadInputError("the folder holds no file to read", source=source)
            out += [str(p) for p in found]
        else:
            out.append(source)
    return out


def _inspect_one(source: str, kind: str) -> dict[str, Any]:
    text = _read_source(source, kind)
    try:
        if kind == "auto":
            guessed, reason = guess_kind(text)
            return {"kind": guessed, "kind_reason": reason, **inspect_as(guessed, text)}
        return {"kind": kind, **inspect_as(kind, text)}
    except BadInputError as exc:
        exc.source = exc.source or source
        raise


def cmd_inspect(ns: argparse.Namespace) -> int:
    sources = _expand_sources(ns.sources)
    many = len(sources) > 1
    refused = 0
    for source in sources:
        try:
            result = _inspect_one(source, ns.inspect_kind)
        except BadInputError as exc:
            if not many:
                raise
            # One refused file does not stop the others: its line says why, and the exit code is 2.
            refused += 1
            print(f"k3: {exc.one_line()}", file=sys.stderr)
            if ns.json:
                print(json.dumps({"path": source, "kind": ns.inspect_kind, "error": exc.one_line()},
                                 ensure_ascii=False), flush=True)
            continue
        if ns.json:
            print(json.dumps({"path": source, **result}, ensure_ascii=False, default=str), flush=True)
            continue
        if many:
            print(f"== {source}")
        width = max((len(k) for k in result), default=0)
        for key, value in result.items():
            shown = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (dict, list)) else value
            print(f"{key:<{width}}  {shown}")
    return 2 if refused else 0

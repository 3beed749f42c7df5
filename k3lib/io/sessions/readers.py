"""Readers of the public trace shapes: each turns a file the operator downloaded into session turns
(k3lib.io.sessions.trace). Nothing is downloaded; the readers are tolerant of the spellings each publisher uses and
say in one line what is missing.

- `copilot`: GitHub Copilot coding-agent traces (CC-BY): per session `turns[]`, each with `llm_calls` (timestamp,
  duration, prompt/completion/cached tokens) and `tool_batches` (tool name, status, duration). No text: each call
  becomes a turn whose new messages are the prompt's growth in tokens; a call followed by a tool batch expects a
  call of the batch's first tool, and the next call's growth is that batch's results.
- `bailian`: Qwen Bailian traces (Apache-2.0): `chat_id`, `parent_chat_id`, `timestamp` (s), `input_length`,
  `output_length`, `turn`, `hash_ids` (16-token blocks). Sessions are the parent chains; the text is written per
  hash block, so prompts that share blocks share their bytes (and the server's prefix cache sees it).
- `azure`: Azure LLM inference traces (CC-BY): `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`. They carry no
  session: each row is a one-turn session.
- `weka`: Weka / Claude Code traces (MIT): sessions of requests with `in`, `out`, `input_types`
  (`text`/`tool_result`), `stop` (`tool_use`/`end_turn`), `think_time`, and the shared `system_tokens` and
  `tool_tokens`. Sub-agents are left out (counted in the reader's note).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import ArtifactError
from .trace import THINK_CAP_S, SessionTurn, TraceMessage, group_sessions

__all__ = ["READERS", "block_text", "convert_trace"]

#: tokens per Bailian hash block (the trace's SipHash blocks)
BAILIAN_BLOCK_TOKENS = 16
_WORDS = ("alpha", "bravo", "canyon", "delta", "ember", "forest", "granite", "harbor", "island", "jasper", "kernel",
          "lantern", "meadow", "nickel", "orchard", "pepper", "quartz", "ribbon", "saddle", "timber", "umber",
          "velvet", "willow", "yonder", "zephyr", "amber", "basalt", "cobalt", "dune", "fjord", "glacier", "heron")


def block_text(key: int | str, tokens: int) -> str:
    """Deterministic words for one block (about one token a word): the same key gives the same bytes."""
    h = int.from_bytes(str(key).encode()[:16].ljust(16, b"\0"), "big") ^ 0x9E3779B97F4A7C15
    out = []
    for _ in range(max(1, tokens)):
        h = (h * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(_WORDS[(h >> 35) % len(_WORDS)])
    return " ".join(out)


def _get(row: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    return default


def _num(row: Mapping[str, Any], *names: str, default: float | None = None) -> float:
    value = _get(row, *names, default=default)
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number in {' / '.join(names)}, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{' / '.join(names)} is not a finite number: {value!r}")
    return out


def _records(text: str) -> list[Any]:
    """A JSON document (a list, or an object holding one under a usual key) or JSON lines."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        doc = json.loads(stripped)
    except ValueError:
        return [json.loads(line) for line in stripped.splitlines() if line.strip()]
    if isinstance(doc, Mapping):
        for key in ("sessions", "traces", "requests", "data"):
            if isinstance(doc.get(key), list):
                return list(doc[key])
        return [doc]
    return list(doc) if isinstance(doc, list) else [doc]


def _think(gap_s: float) -> float:
    return min(max(gap_s, 0.0), THINK_CAP_S)


# -- GitHub Copilot coding agent --------------------------------------------------------------------------------

def _copilot_session(sid: str, session: Mapping[str, Any]) -> list[SessionTurn]:
    out: list[SessionTurn] = []
    prev_prompt = prev_out = 0
    prev_end: float | None = None
    pending_tools: list[str] = []
    for user_turn in session.get("turns") or []:
        calls = user_turn.get("llm_calls") or []
        batches = user_turn.get("tool_batches") or []
        for i, call in enumerate(calls):
            prompt = int(_num(call, "prompt_tokens", "input_tokens"))
            completion = int(_num(call, "completion_tokens", "output_tokens"))
            start = _num(call, "timestamp", "start", default=0.0)
            start = start / 1000 if start > 1e11 else start  # epoch ms or s
            growth = max(1, prompt - prev_prompt - prev_out) if out else max(1, prompt)
            batch = batches[i] if i < len(batches) else None
            names = [str(_get(t, "name", "tool", default="tool")) for t in
                     ((batch or {}).get("tools") or (batch or {}).get("calls") or ([batch] if batch else []))]
            if i > 0 and pending_tools:  # the results of the batch the previous call asked for
                share = max(1, growth // len(pending_tools))
                add = tuple(TraceMessage("tool", tokens=share, call=k) for k in range(len(pending_tools)))
            else:
                add = (TraceMessage("user", tokens=growth),)
            out.append(SessionTurn(sid, len(out), _think(start - prev_end) if prev_end is not None else 0.0, add,
                                   max(1, completion), bool(names), names[0] if names else None))
            pending_tools = names
            prev_prompt, prev_out = prompt, completion
            prev_end = start + _num(call, "duration_ms", default=0.0) / 1000
        pending_tools = []
    return out


def read_copilot(text: str) -> list[SessionTurn]:
    turns: list[SessionTurn] = []
    for n, s in enumerate(_records(text)):
        if not isinstance(s, Mapping) or not isinstance(s.get("turns"), list):
            raise ValueError(f"record {n + 1}: a Copilot session has turns[] with llm_calls")
        turns += _copilot_session(str(_get(s, "session_id", "id", default=f"copilot-{n}")), s)
    return turns


# -- Qwen Bailian -----------------------------------------------------------------------------------------------

def read_bailian(text: str) -> list[SessionTurn]:
    rows = _records(text)
    by_id: dict[str, Mapping[str, Any]] = {}
    for n, row in enumerate(rows):
        if not isinstance(row, Mapping) or _get(row, "chat_id") is None:
            raise ValueError(f"record {n + 1}: a Bailian row has chat_id, parent_chat_id, input_length, output_length")
        by_id[str(row["chat_id"])] = row
    root_of: dict[str, str] = {}

    def root(cid: str) -> str:
        seen = []
        while cid not in root_of:
            parent = by_id[cid].get("parent_chat_id")
            seen.append(cid)
            if parent in (None, -1, "-1", "") or str(parent) not in by_id or str(parent) in seen:
                root_of[cid] = cid
                break
            cid = str(parent)
        for c in seen:
            root_of[c] = root_of[cid]
        return root_of[seen[0]] if seen else root_of[cid]

    chains: dict[str, list[Mapping[str, Any]]] = {}
    for cid in by_id:
        chains.setdefault(root(cid), []).append(by_id[cid])
    out: list[SessionTurn] = []
    for rid, chain in chains.items():
        chain.sort(key=lambda r: (_num(r, "turn", default=0), _num(r, "timestamp", default=0)))
        prev: Mapping[str, Any] | None = None
        for i, row in enumerate(chain):
            inp, outp = int(_num(row, "input_length")), int(_num(row, "output_length"))
            hashes = list(row.get("hash_ids") or [])
            new = inp if prev is None else max(1, inp - int(_num(prev, "input_length")) - int(_num(prev,
                                                                                                  "output_length")))
            blocks = hashes[-max(1, math.ceil(new / BAILIAN_BLOCK_TOKENS)):] if hashes else [f"{rid}-{i}"]
            content = " ".join(block_text(h, BAILIAN_BLOCK_TOKENS) for h in blocks)
            think = 0.0 if prev is None else _think(_num(row, "timestamp", default=0) - _num(prev, "timestamp",
                                                                                            default=0))
            out.append(SessionTurn(f"bailian-{rid}", i, think, (TraceMessage("user", content=content),), max(1, outp)))
            prev = row
    return out


# -- Azure LLM inference ----------------------------------------------------------------------------------------

def read_azure(text: str) -> list[SessionTurn]:
    reader = csv.DictReader(io.StringIO(text))
    fields = {f.strip() for f in reader.fieldnames or ()}
    if not {"ContextTokens", "GeneratedTokens"} <= fields:
        raise ValueError(f"an Azure trace is a CSV with TIMESTAMP, ContextTokens, GeneratedTokens; got columns "
                         f"{sorted(fields)}")
    out = []
    for n, row in enumerate(reader):
        row = {k.strip(): v for k, v in row.items() if k}
        out.append(SessionTurn(f"azure-{n}", 0, 0.0, (TraceMessage("user", tokens=max(1, int(_num(row,
                                                                                          "ContextTokens")))),),
                               max(1, int(_num(row, "GeneratedTokens")))))
    return out


# -- Weka / Claude Code -----------------------------------------------------------------------------------------

def _weka_session(sid: str, s: Mapping[str, Any]) -> list[SessionTurn]:
    requests = [r for r in (_get(s, "requests", "turns", "calls", default=[]) or []) if isinstance(r, Mapping)
                and not r.get("subagent")]
    shared = int(_num(s, "system_tokens", default=0)) + int(_num(s, "tool_tokens", default=0))
    out: list[SessionTurn] = []
    prev: Mapping[str, Any] | None = None
    for r in requests:
        inp, outp = int(_num(r, "in", "input_tokens")), int(_num(r, "out", "output_tokens"))
        new = max(1, inp - shared) if prev is None else max(1, inp - int(_num(prev, "in", "input_tokens"))
                                                            - int(_num(prev, "out", "output_tokens")))
        tool = "tool_result" in (r.get("input_types") or ()) and prev is not None and \
            out[-1].expect_tool
        add = (TraceMessage("tool", tokens=new, call=0),) if tool else (TraceMessage("user", tokens=new),)
        out.append(SessionTurn(sid, len(out), 0.0 if prev is None else _think(_num(r, "think_time", default=0.0)),
                               add, max(1, outp), str(r.get("stop")) == "tool_use", None, None,
                               (shared or None) if prev is None else None))
        prev = r
    return out


def read_weka(text: str) -> list[SessionTurn]:
    turns: list[SessionTurn] = []
    for n, s in enumerate(_records(text)):
        if not isinstance(s, Mapping) or not isinstance(_get(s, "requests", "turns", "calls"), list):
            raise ValueError(f"record {n + 1}: a Weka session holds requests[] with in, out, stop, think_time")
        turns += _weka_session(str(_get(s, "session_id", "id", default=f"weka-{n}")), s)
    return turns


READERS: Mapping[str, Callable[[str], list[SessionTurn]]] = {
    "copilot": read_copilot, "bailian": read_bailian, "azure": read_azure, "weka": read_weka}


def convert_trace(kind: str, path: str | Path) -> list[list[SessionTurn]]:
    """A downloaded trace of shape `kind` (copilot, bailian, azure, weka) as sessions."""
    reader = READERS.get(kind)
    if reader is None:
        raise ArtifactError(f"unknown trace shape {kind!r}; known: {', '.join(sorted(READERS))}",
                            field="session_trace_format")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"cannot read the {kind} trace: {exc}", source=str(p)) from None
    try:
        turns = reader(text)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArtifactError(f"not a {kind} trace: {exc}", source=str(p)) from None
    if not turns:
        raise ArtifactError(f"no request in the {kind} trace", source=str(p))
    return group_sessions(turns, str(p))


def iter_turns(sessions: Iterable[Iterable[SessionTurn]]) -> Iterator[SessionTurn]:
    for s in sessions:
        yield from s

"""The artifact kinds `k3 inspect` reads, one reader each, and the guess of a text's kind for `k3 inspect auto`."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from typing import Any

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._text import clean_lines

__all__ = ["KINDS", "guess_kind", "inspect_as"]

# kind → (module, function taking the artifact's text and returning a JSON-ready dict, what it reads)
KINDS: dict[str, tuple[str, str, str]] = {
    "collect-env": ("k3lib.io.readers.collect_env", "inspect_collect_env", "a vLLM collect_env report"),
    "nvidia-smi": ("k3lib.io.readers.nvidia_smi", "inspect_nvidia_smi", "nvidia-smi output (table or -q)"),
    "log": ("k3lib.io.readers.vllm_log", "inspect_log", "a vLLM server log"),
    "metrics": ("k3lib.io.metrics", "inspect_metrics", "a Prometheus exposition (file or /metrics URL)"),
    "tool-reply": ("k3lib.io.readers.tool_reply", "inspect_tool_reply", "a chat-completion reply with tool calls"),
}

_SMI_HEADER = re.compile(r"NVIDIA-SMI\s+\d+\.\d+.*Driver Version|==+\s*NVSMI LOG\s*==+")
_COLLECT_ENV_LABELS = re.compile(
    r"^\s*(PyTorch version|CUDA used to build PyTorch|ROCM used to build PyTorch|Is CUDA available|vLLM Version"
    r"|GPU models and configuration|Nvidia driver version|Versions of relevant libraries)\s*:", re.IGNORECASE)
# A record vLLM's logger, uvicorn or an offline run's progress bar prints.
_LOG_RECORD = re.compile(
    r"(?:^|\s|\])(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d{2}-\d{2} \d{2}:\d{2}:\d{2}"
    r"|\((?:APIServer|EngineCore\w*|Worker\w*|VllmWorker\w*|RayWorkerWrapper) pid=\d+\)"
    r"|^(?:INFO|WARNING|ERROR):\s{2,}"
    r"|Processed prompts:\s*\d+%")


def inspect_as(kind: str, text: str) -> dict[str, Any]:
    """The `k3 inspect KIND` reading of one text; ArtifactError when it is none of the kind's formats."""
    if kind not in KINDS:
        raise ArtifactError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)} or auto")
    module, func, _ = KINDS[kind]
    reader: Callable[[str], dict[str, Any]] = getattr(importlib.import_module(module), func)
    return reader(text)


def guess_kind(text: str) -> tuple[str, str]:
    """(kind, why): which reader a text is for, from the marks only that kind prints.

    Log records are counted before tool-call markup is looked for, so a log whose request echo quotes
    `<tool_call>` stays a log; a tool reply is chosen for a body the reply reader reads as a structured reply, and
    for bare assistant text only when no log record is in it."""
    lines = clean_lines(text, drop_fences=True)
    nonblank = [ln for ln in lines if ln.strip()]
    if not nonblank:
        raise ArtifactError("the text is empty: nothing to guess a kind from")
    head = "\n".join(nonblank[:60])
    if _SMI_HEADER.search(head) and not _COLLECT_ENV_LABELS.search(head):
        return "nvidia-smi", "an `NVIDIA-SMI … Driver Version` header (or `NVSMI LOG`)"
    labels = {m.group(1).lower() for ln in nonblank if (m := _COLLECT_ENV_LABELS.match(ln))}
    if len(labels) >= 2:
        return "collect-env", f"{len(labels)} collect_env labels ({', '.join(sorted(labels)[:3])}…)"
    records = [i for i, ln in enumerate(nonblank) if _LOG_RECORD.search(ln)]
    if records and (len(records) >= 2 or len(nonblank) <= 3):
        return "log", f"{len(records)} vLLM/uvicorn log records"
    from k3lib.io.metrics.parse import parse_exposition

    exposition = parse_exposition(text)
    server = [s for s in exposition.samples if s.name.startswith(("vllm:", "sglang:"))]
    if server or (exposition.types and not exposition.samples) or (
            len(exposition.samples) >= 3 and len(exposition.samples) >= len(exposition.skipped)):
        return "metrics", (f"{len(exposition.samples)} Prometheus samples" if exposition.samples
                           else f"{len(exposition.types)} `# TYPE` lines and no sample")
    if nonblank[0].lstrip().startswith(("{", "[")) and _is_json(text):
        # JSON is the reply reader's alone: let it say what this JSON lacks.
        return "tool-reply", "a JSON value (only chat replies are JSON)"
    from k3lib.io.readers.tool_reply import classify_tool_reply

    try:
        reply = classify_tool_reply(text)
    except ArtifactError:
        reply = None
    if reply is not None:
        what = "an error body" if reply.error else f"a chat reply read as {reply.source_format}"
        return "tool-reply", what
    # Weaker marks: one log record in a longer text, or a reader that accepts the text as it is.
    if records:
        return "log", f"{len(records)} vLLM/uvicorn log record"
    for kind in ("collect-env", "nvidia-smi", "log"):
        try:
            inspect_as(kind, text)
        except ArtifactError:
            continue
        return kind, f"the {kind} reader accepts it"
    raise ArtifactError("cannot tell the kind: tried a collect_env report, nvidia-smi output, a vLLM log, a "
                        "Prometheus exposition and a chat reply; name the kind (`k3 inspect KIND FILE`)")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True

"""A hybrid model's prefix retention, as configured: the retention interval and the state-cache mode, read from
`vllm:cache_config_info` and from the server log (its non-default args, a `--prefix-cache-retention-interval`
flag, the `VLLM_PREFIX_CACHE_RETENTION_INTERVAL` variable), each with where it was read.

Kimi K3's KDA layers keep a recurrent state that vLLM stores only at checkpoints: with interval 0 only prompt-end
states, and a shared prefix's state is kept on its second hit (vLLM's K3 blog; vllm#45238, #52216, #52527).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .shapes import Retention, RetentionStatement

_LOG_PATTERNS = (
    ("log: non-default args", re.compile(r"""['"]prefix_cache_retention_interval['"]\s*:\s*(-?\d+)""")),
    ("log: --prefix-cache-retention-interval", re.compile(r"--prefix-cache-retention-interval[ =](-?\d+)")),
    ("log: VLLM_PREFIX_CACHE_RETENTION_INTERVAL", re.compile(r"VLLM_PREFIX_CACHE_RETENTION_INTERVAL\s*[=:]\s*'?(-?\d+)")),
)


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def retention_settings(cache_config: Mapping[str, str], log_text: str | None) -> Retention:
    """What the server says of its hybrid retention: `interval` (None: stated nowhere) with `interval_source`,
    `state_cache_mode` (cache_config_info's mamba_cache_mode), `hybrid` (True when a state cache is on), and every
    statement found, so a disagreement between the log and /metrics is kept."""
    found: list[RetentionStatement] = []
    label = _int(cache_config.get("prefix_cache_retention_interval"))
    if label is not None:
        found.append({"source": "cache_config_info: prefix_cache_retention_interval", "value": label})
    for source, pattern in _LOG_PATTERNS:
        m = pattern.search(log_text or "")
        if m:
            found.append({"source": source, "value": int(m.group(1))})
    mode = cache_config.get("mamba_cache_mode")
    hybrid = None if mode is None else mode not in ("none", "None", "")
    first = found[-1] if found else None  # the log states what was asked; it wins over the label's default
    return {"interval": None if first is None else first["value"],
            "interval_source": None if first is None else first["source"],
            "state_cache_mode": mode, "hybrid": hybrid, "statements": found,
            "log_read": log_text is not None}

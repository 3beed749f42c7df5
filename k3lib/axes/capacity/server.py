"""The server configuration kept with the capacity evidence — parallelism, context limit, gpu-memory-utilization,
max batched tokens, max running sequences, KV pool — from the startup log's non-default args, `cache_config_info`
and `/v1/models`, each value with the source it came from. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...io.readers.vllm_log import VllmLogReport
from .run_shapes import ConfigValue, ServerConfig

_BATCHED = re.compile(r"max_num_batched_tokens=(\d+)")
_MAX_LEN = re.compile(r"Using max model len (\d+)")
_ENGINE_PARALLEL = re.compile(r"\b(tensor|pipeline|data)_parallel_size=(\d+)")
# vLLM's own defaults where a flag is absent from `non-default args` (a value there means it was changed).
_DEFAULT_PARALLEL = 1

FIELDS = ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
          "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs", "block_size", "num_gpu_blocks",
          "kv_cache_size_tokens", "max_concurrency", "enable_prefix_caching", "vllm_version")


def _as_number(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text in ("None", ""):
            return None
        if text in ("True", "False"):
            return text == "True"
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return text
    return value


def server_config(log: VllmLogReport | None, cache_info: Mapping[str, str] | None = None,
                  model_card: Mapping[str, Any] | None = None) -> ServerConfig:
    """`{"values": {field: value}, "sources": {field: where it came from}}`; a field nothing states is None."""
    values: dict[str, ConfigValue] = {f: None for f in FIELDS}
    sources: dict[str, str] = {}

    def put(field: str, value: Any, source: str) -> None:
        value = _as_number(value)
        if value is not None and values[field] is None:
            values[field] = value
            sources[field] = source

    args: dict[str, Any] = {}
    if log is not None:
        if isinstance(log.non_default_args, dict):
            args = dict(log.non_default_args)
        elif isinstance(log.namespace_args, dict):
            args = dict(log.namespace_args)
    for field in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                  "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs", "block_size",
                  "enable_prefix_caching"):
        if field in args:
            put(field, args[field], "log: non-default args")
    if cache_info:
        for field in ("gpu_memory_utilization", "block_size", "num_gpu_blocks", "kv_cache_size_tokens",
                      "enable_prefix_caching"):
            if field in cache_info:
                put(field, cache_info[field], "vllm:cache_config_info")
        if "kv_cache_max_concurrency" in cache_info:
            put("max_concurrency", cache_info["kv_cache_max_concurrency"], "vllm:cache_config_info")
    if model_card and isinstance(model_card.get("max_model_len"), int):
        put("max_model_len", model_card["max_model_len"], "/v1/models")
    if log is not None:
        put("kv_cache_size_tokens", log.kv_cache_tokens, "log: KV cache size line")
        put("max_concurrency", log.max_concurrency, "log: maximum concurrency line")
        put("vllm_version", log.vllm_version, "log: version line")
        for line in log.lines:
            msg = line.message
            if values["max_num_batched_tokens"] is None and (m := _BATCHED.search(msg)):
                put("max_num_batched_tokens", m.group(1), "log: chunked prefill line")
            if values["max_model_len"] is None and (m := _MAX_LEN.search(msg)):
                put("max_model_len", m.group(1), "log: max model len line")
            if "with config:" in msg:
                for kind, n in _ENGINE_PARALLEL.findall(msg):
                    put(f"{kind}_parallel_size", n, "log: engine config line")
        if args or log.vllm_version:
            # the args dict lists changed flags only: an absent parallel size is vLLM's default of 1
            for field in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
                put(field, _DEFAULT_PARALLEL, "vLLM default (absent from non-default args)")
    return {"values": values, "sources": sources}

"""What each source says about the deployment it came from: its *claims*, the fields one source shares with another
(vLLM version, model, context limit, KV pool, GPU names, UUIDs and count, driver, host, parallel sizes, start time).

The target's own answers (`/version`, `/v1/models`, `/metrics`) say who the deployment is; every other source is
tied to it by what they share (`k3lib.verdict.identity`). Pure: parsed sources in, plain JSON-ready dicts out —
each axis keeps its sources' claims in its evidence `data.claims`, so a run is judged again from the record alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..core.versions import parse_version
from .metrics import Snapshot
from .metrics.parse import parse_exposition

Claims = dict[str, Any]


def _clean(d: Mapping[str, Any]) -> Claims:
    """Drop the fields a source does not say (None, empty)."""
    return {k: v for k, v in d.items() if v not in (None, "", [], {})}


def _int(value: Any) -> int | None:
    try:
        return int(float(str(value)))
    except (TypeError, ValueError):
        return None


def metrics_claims(texts: Iterable[str]) -> Claims:
    """What the target's `/metrics` says of it: the served model names (`model_name` label), the DP engines, the KV
    pool (`vllm:cache_config_info`), the process start time (`process_start_time_seconds`, absent in vLLM's
    multiprocess mode)."""
    expositions = {f"<metrics {i}>": parse_exposition(t) for i, t in enumerate(texts) if t and t.strip()}
    if not expositions:
        return {}
    snap = Snapshot.from_expositions(expositions)
    names = sorted({s.labels["model_name"] for e in snap.endpoints for s in e.samples
                    if s.name.startswith(("vllm:", "sglang:")) and s.labels.get("model_name")})
    starts = [s.value for e in snap.endpoints for s in e.samples if s.name == "process_start_time_seconds"]
    cfg = snap.cache_config_info()
    blocks, size = _int(cfg.get("num_gpu_blocks")), _int(cfg.get("block_size"))
    tokens = _int(cfg.get("kv_cache_size_tokens")) or (blocks * size if blocks and size else None)
    return _clean({"models": names, "engines": snap.engines() if names else None,
                   "start_time": min(starts) if starts else None, "kv_cache_tokens": tokens,
                   "prefix_caching": cfg.get("enable_prefix_caching")})


def target_claims(version: str | None, cards: Iterable[Mapping[str, Any]], metrics_texts: Iterable[str] = ()) -> Claims:
    """The deployment's identity from the target itself: `/version`, the `/v1/models` cards (id, root,
    max_model_len), and its `/metrics`."""
    cards = [c for c in cards if isinstance(c, Mapping)]
    models = sorted({str(c[k]) for c in cards for k in ("id", "root") if c.get(k)})
    lens = sorted({int(c["max_model_len"]) for c in cards if isinstance(c.get("max_model_len"), int)})
    metrics = metrics_claims(metrics_texts)
    out = _clean({"vllm_version": version, "models": models, "max_model_len": lens[0] if len(lens) == 1 else None})
    if metrics.get("models"):
        out["models"] = sorted(set(out.get("models", [])) | set(metrics.pop("models")))
    return {**out, **metrics}


def collect_env_claims(report: Any) -> Claims:
    """A container's `collect_env`: vLLM version, the GPUs it sees (names, count), the driver it reports."""
    if report is None:
        return {}
    return _clean({"vllm_version": report.vllm_version, "driver": report.driver_version,
                   "gpu_names": list(report.gpus) or None,
                   "container_gpu_count": None if report.truncated else report.gpu_count})


def nvidia_smi_claims(report: Any) -> Claims:
    """The host's `nvidia-smi`: driver, GPU names and count, and the UUIDs `-q` prints."""
    if report is None or getattr(report, "error", None):
        return {}
    uuids = [g.uuid for g in report.gpus if getattr(g, "uuid", None)]
    return _clean({"driver": report.driver_version, "gpu_names": [n for n in report.gpu_names if n] or None,
                   "host_gpu_count": report.gpu_count or report.attached_gpus, "gpu_uuids": uuids})


def log_claims(report: Any, args: Mapping[str, Any] | None) -> Claims:
    """The server log's last start: vLLM version, the model and context limit it was started with, its KV pool and
    parallel sizes."""
    if report is None:
        return {}
    args = args or {}
    models = {str(v) for k in ("model", "served_model_name") for v in _listed(args.get(k)) if v}
    if report.model:
        models.add(str(report.model))
    sizes = {k: max(_int(args.get(f"{k}_parallel_size")) or 1, 1) for k in ("tensor", "pipeline", "data")}
    return _clean({"vllm_version": report.vllm_version, "models": sorted(models),
                   "max_model_len": _int(args.get("max_model_len")), "kv_cache_tokens": report.kv_cache_tokens,
                   "data_parallel_size": sizes["data"] if args else None,
                   "gpus_per_replica": sizes["tensor"] * sizes["pipeline"] if args else None})


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def image_claims(image: Any) -> Claims:
    """`docker inspect` / `crictl inspect`: the vLLM version its tag names (`vllm/vllm-openai:v0.33.0`), and when
    the container last started (its creation date proves nothing of the process: `docker restart` keeps it)."""
    if image is None or getattr(image, "source", "") != "image_inspect":
        return {}

    tag = (image.reference or "").rsplit("/", 1)[-1].partition("@")[0]
    version = parse_version(tag.partition(":")[2]) if ":" in tag else None
    return _clean({"vllm_version": str(version) if version else None, "started": getattr(image, "started", None)})


def nvml_claims(info: Any, samples: Iterable[Any] = ()) -> Claims:
    """Local NVML on the kit's host: driver, GPU count, names and UUIDs, the host name."""
    if info is None or not getattr(info, "available", False):
        return {}
    samples = list(samples)
    return _clean({"driver": info.driver_version, "host_gpu_count": info.gpu_count,
                   "gpu_names": [s.name for s in samples if s.name] or None,
                   "gpu_uuids": [s.uuid for s in samples if s.uuid] or None, "hosts": [info.endpoint]})


def gpu_claims(rows: Iterable[Mapping[str, Any]], *, driver: str | None = None,
               load_windows: Iterable[tuple[float, float]] = ()) -> Claims:
    """What the GPU metrics (dcgm-exporter, Prometheus, NVML samples) say: hosts, GPUs per host, names, UUIDs, the
    driver their labels carry, and whether any GPU's utilisation moved while the kit loaded the target (`busy`:
    None without utilisation samples)."""
    rows = [r for r in rows if r.get("gpu") is not None]
    if not rows:
        return {}
    per_host: dict[str, set[int]] = {}
    for r in rows:
        per_host.setdefault(str(r.get("host")), set()).add(int(r["gpu"]))
    windows = list(load_windows)
    util = [r for r in rows if r.get("util_pct") is not None and r.get("t_wall") is not None]
    busy = None
    if util and windows:
        busy = any(float(r["util_pct"]) > 0 for r in util
                   if any(a <= float(r["t_wall"]) <= b for a, b in windows))
    return _clean({"hosts": sorted(per_host), "host_gpu_count": max(len(g) for g in per_host.values()),
                   "gpu_names": sorted({str(r["name"]) for r in rows if r.get("name")}),
                   "gpu_uuids": sorted({str(r["uuid"]) for r in rows if r.get("uuid")}), "driver": driver,
                   "busy_under_load": busy})

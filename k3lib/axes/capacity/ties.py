"""What the capacity axis' sources say about the deployment they came from (`k3lib.io.claims`): the GPU metrics
(hosts, GPUs, UUIDs, driver, and whether their utilisation moved while the kit loaded the target) and each metrics
endpoint (whether its counters counted the kit's own requests). `k3lib.verdict.identity` ties them to the target."""

from __future__ import annotations


from ...io.claims import Claims, gpu_claims
from .finding import load_windows
from .result import CapacityResult


def capacity_claims(result: CapacityResult) -> dict[str, Claims]:
    """{"gpu_metrics": …, "metrics <url>": …} for the record's `data.claims`."""
    windows = [(float(start), float(end)) for _, w in load_windows(result)
               if (start := w.get("start_wall")) is not None and (end := w.get("end_wall")) is not None]
    out: dict[str, Claims] = {}
    gpu = gpu_claims(result.gpu, driver=result.run.get("gpu_driver"), load_windows=windows)
    if gpu:
        out["gpu_metrics"] = {**gpu, "via": result.run.get("gpu_source")}
    counted: dict[str, float] = {}
    for _, w in load_windows(result):
        for url, moved in ((w.get("cross_check") or {}).get("by_endpoint") or {}).items():
            counted[url] = counted.get(url, 0.0) + float(moved.get("requests") or 0.0)
    sent = sum(int(w.get("ok") or 0) for _, w in load_windows(result))
    for url, n in sorted(counted.items()):
        # an endpoint of the target counts some of the kit's requests; one that counted none of them while the kit
        # completed requests is another server's
        out[f"metrics {url}"] = {"kit_requests_counted": n > 0 if sent else None, "requests_counted": n,
                                 "kit_requests_completed": sent}
    return out

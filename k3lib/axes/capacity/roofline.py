"""The memory-bandwidth bound of decoding (the roofline), and the measured decode rates set against it.

Decoding one token of one sequence reads every active weight once: a replica of TP GPUs reads them at TP × the HBM
bandwidth of one GPU at best (pipeline stages run one after the other for one token, and data-parallel replicas do
not help one sequence). So one sequence decodes at most `TP × HBM / (active parameters × bytes per parameter)`
tokens per second, and c sequences at most c times that. A measured rate above it is a measurement error; one far
below it at concurrency 1 a probable misconfiguration. Pure over a run read back and the parameters.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...core.evidence import Finding, FindingStatus
from ...core.numbers import figure
from ...core.floors import DTYPE_BYTES
from .run_shapes import DecodeRate, Roofline, RooflineBound

if TYPE_CHECKING:
    from ...core.params import Params, RooflineParams
    from .result import CapacityResult

# HBM bandwidth per GPU in TB/s (10^12 bytes/s), the vendor's figure for that board; the first name the GPU's
# name contains wins, so the longer names come first.
HBM_TABLE: tuple[tuple[str, float, str], ...] = (
    ("GB300", 8.0, "NVIDIA GB300 NVL72 specifications: 8 TB/s HBM3e per GPU"),
    ("GB200", 8.0, "NVIDIA GB200 NVL72 specifications: 8 TB/s HBM3e per GPU"),
    ("B300", 8.0, "NVIDIA HGX B300 specifications: 8 TB/s HBM3e per GPU"),
    ("B200", 8.0, "NVIDIA HGX B200 specifications: 8 TB/s HBM3e per GPU"),
    ("GH200", 4.0, "NVIDIA GH200 Grace Hopper datasheet: 4 TB/s HBM3 (96 GB)"),
    ("H200", 4.8, "NVIDIA H200 Tensor Core GPU datasheet: 4.8 TB/s HBM3e (141 GB)"),
    ("H100 NVL", 3.9, "NVIDIA H100 datasheet: H100 NVL 3.9 TB/s HBM3"),
    ("H100 PCIe", 2.0, "NVIDIA H100 datasheet: H100 PCIe 2 TB/s HBM2e"),
    ("H100", 3.35, "NVIDIA H100 datasheet: H100 SXM 3.35 TB/s HBM3"),
    ("H20", 4.0, "NVIDIA H20 product brief: 4.0 TB/s HBM3"),
    ("A100-SXM4-80GB", 2.039, "NVIDIA A100 datasheet: A100 80GB SXM 2,039 GB/s HBM2e"),
    ("A100 80GB PCIe", 1.935, "NVIDIA A100 datasheet: A100 80GB PCIe 1,935 GB/s HBM2e"),
    ("A100", 1.555, "NVIDIA A100 datasheet: A100 40GB 1,555 GB/s HBM2"),
    ("L40S", 0.864, "NVIDIA L40S datasheet: 864 GB/s GDDR6"),
    ("MI355X", 8.0, "AMD Instinct MI355X data sheet: 8 TB/s HBM3E"),
    ("MI325X", 6.0, "AMD Instinct MI325X data sheet: 6 TB/s HBM3E"),
    ("MI300X", 5.3, "AMD Instinct MI300X data sheet: 5.3 TB/s HBM3"),
)
def hbm_for(gpu_name: str | None) -> tuple[float, str] | None:
    """(TB/s, source) for a GPU name as nvidia-smi or dcgm-exporter print it; None when the table lacks it."""
    if not gpu_name:
        return None
    folded = gpu_name.upper().replace("-", " ")
    for key, tb_s, source in HBM_TABLE:
        if key.upper().replace("-", " ") in folded:
            return tb_s, source
    return None


def _gpu_name(result: "CapacityResult") -> str | None:
    names = [r.get("name") for r in result.gpu if r.get("name")]
    return statistics.mode(names) if names else None


def bound(result: "CapacityResult", rp: "RooflineParams") -> RooflineBound:
    """The per-sequence bound with every figure it rests on and where each came from; `known` False (and `why`)
    when one is missing — a CPU target, a GPU the table does not hold, no active parameter count."""
    config = result.run.get("config")
    values = (config.get("values") if config else None) or {}
    sources = (config.get("sources") if config else None) or {}
    shown = _gpu_name(result)
    gpu = rp.gpu or shown
    table = hbm_for(shown)
    # what the target shows, whatever the parameters say: the settings table's floors (k3lib.verdict.served)
    out: RooflineBound = {"gpu": gpu, "gpu_source": "axes.capacity.roofline.gpu" if rp.gpu else
                          ("GPU samples" if gpu else None), "gpu_shown": shown,
                          "hbm_table_tb_s": table[0] if table else None}
    sizes = {key: v if isinstance(v := values.get(key), int) and v > 0 else 1
             for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")}
    unstated = "not stated: 1 assumed"
    out.update({"tensor_parallel_size_source": sources.get("tensor_parallel_size") or unstated,
                "pipeline_parallel_size_source": sources.get("pipeline_parallel_size") or unstated,
                "data_parallel_size_source": sources.get("data_parallel_size") or unstated,
                "tensor_parallel_size": sizes["tensor_parallel_size"],
                "pipeline_parallel_size": sizes["pipeline_parallel_size"],
                "data_parallel_size": sizes["data_parallel_size"]})
    if rp.hbm_tb_s is not None:
        out.update({"hbm_tb_s": rp.hbm_tb_s, "hbm_source": rp.hbm_source or "axes.capacity.roofline.hbm_tb_s"})
    elif (found := hbm_for(gpu)) is not None:
        out.update({"hbm_tb_s": found[0], "hbm_source": found[1]})
    why = None
    if out.get("hbm_tb_s") is None:
        why = ("the target shows no GPU (a CPU build, or no GPU metrics source) and axes.capacity.roofline names none"
               if not gpu else f"the kit's table holds no HBM bandwidth for {gpu!r}: set "
                               "axes.capacity.roofline.hbm_tb_s (and hbm_source)")
    elif rp.active_params_b is None or rp.weight_dtype is None:
        why = "axes.capacity.roofline.active_params_b and weight_dtype are not set: bytes per token unknown"
    if why:
        return {**out, "known": False, "why": why}
    assert rp.active_params_b is not None and rp.weight_dtype is not None  # else `why` said so
    per_param = DTYPE_BYTES[rp.weight_dtype]
    bytes_per_token = rp.active_params_b * 1e9 * per_param
    tp = sizes["tensor_parallel_size"]
    per_seq = tp * out["hbm_tb_s"] * 1e12 / bytes_per_token
    arithmetic = (f"{tp} GPU(s) of tensor parallelism × {out['hbm_tb_s']:g} TB/s ({out['hbm_source']}) ÷ "
                  f"({rp.active_params_b:g} B active parameters × {per_param:.4g} bytes ({rp.weight_dtype}) = "
                  f"{bytes_per_token / 1e9:.1f} GB read per token) = {figure(per_seq)} tokens/s per sequence; pipeline "
                  f"stages ({sizes['pipeline_parallel_size']}) run in turn for one token and data-parallel replicas "
                  f"({sizes['data_parallel_size']}) do not speed one sequence; c sequences at most c times that")
    return {**out, "known": True, "weight_dtype": rp.weight_dtype, "bytes_per_param": per_param,
            "active_params_b": rp.active_params_b, "active_params_source": rp.active_params_source or
            "axes.capacity.roofline.active_params_b", "bytes_per_token": bytes_per_token,
            "per_sequence_tokens_per_s": round(per_seq, 2), "arithmetic": arithmetic}


def measured_rates(result: "CapacityResult") -> list[DecodeRate]:
    """Per concurrency step: the median decode rate of one sequence (output tokens after the first over the time
    after the first, per request) and the summed rate (every output token of the step over its window)."""
    out: list[DecodeRate] = []
    for s in result.steps:
        if s.get("status") == "skipped":
            continue
        recs = [r for r in result.requests if r.get("phase") == "concurrency" and r.get("step") == s.get("label")
                and r.get("ok")]
        per_seq = []
        for r in recs:
            n, e2e, ttft = r.get("completion_tokens"), r.get("e2e_ms"), r.get("ttft_ms")
            if isinstance(n, int) and n >= 2 and e2e and ttft is not None and e2e > ttft:
                per_seq.append((n - 1) / ((e2e - ttft) / 1000))
        window = (s.get("end_wall") or 0) - (s.get("start_wall") or 0)
        tokens = sum(r.get("completion_tokens") or 0 for r in recs)
        out.append({"concurrency": s["concurrency"], "requests": len(recs),
                    "per_sequence_tokens_per_s": round(statistics.median(per_seq), 2) if per_seq else None,
                    "summed_tokens_per_s": round(tokens / window, 2) if window > 0 and tokens else None})
    return out


def judge(rates: Sequence[DecodeRate], b: RooflineBound, min_share: float
          ) -> tuple[FindingStatus, str, list[str]]:
    """(status, sentence, steps above the bound) of the measured rates against the bound."""
    if not b.get("known"):
        return "info", f"no bound known: {b.get('why')}", []
    per_seq = b["per_sequence_tokens_per_s"]
    above = []
    for r in rates:
        c, one, summed = r["concurrency"], r.get("per_sequence_tokens_per_s"), r.get("summed_tokens_per_s")
        if one is not None and one > per_seq:
            above.append(f"concurrency {c}: {figure(one)} tokens/s per sequence > {figure(per_seq)}")
        if summed is not None and summed > c * per_seq:
            above.append(f"concurrency {c}: {figure(summed)} tokens/s summed > {c} × {figure(per_seq)} = "
                         f"{figure(c * per_seq)}")
    if above:
        return ("warn", "a measured decode rate is above the memory-bandwidth bound — a measurement error (the "
                        "client's clock, the token counts, or the stated GPU, model or dtype is wrong): "
                + "; ".join(above), above)
    lowest = min((r for r in rates if r.get("per_sequence_tokens_per_s") is not None),
                 key=lambda r: r["concurrency"], default=None)
    if lowest is None:
        return "info", "no decode rate measured (no concurrency step completed a request of two tokens or more)", []
    one = lowest["per_sequence_tokens_per_s"] or 0.0  # picked among the steps that have one
    share = one / per_seq
    text = (f"{figure(one)} tokens/s per sequence at concurrency {lowest['concurrency']} = {share:.1%} of the bound "
            f"{figure(per_seq)}")
    if share < min_share:
        return ("warn", f"{text}, below the {min_share:.0%} set in axes.capacity.roofline.min_share: a probable "
                        "misconfiguration (eager mode instead of CUDA graphs, a wrong tensor/pipeline layout, a slow "
                        "interconnect)", [])
    return "pass", f"{text}, within the bound (at least {min_share:.0%} of it expected)", []


def roofline(result: "CapacityResult", params: "Params") -> Roofline:
    """The bound, the measured rates and the judgement, as the record and the figure use them."""
    rp = params.axes.capacity.roofline
    b = bound(result, rp)
    rates = measured_rates(result)
    status, text, above = judge(rates, b, rp.min_share)
    return {"bound": b, "rates": rates, "status": status, "text": text, "above": above, "min_share": rp.min_share}


def roofline_findings(result: "CapacityResult", params: "Params") -> list[Finding]:
    data = roofline(result, params)
    b = data["bound"]
    message = data["text"] + (f" — bound: {b['arithmetic']}" if b.get("known") else "")
    return [Finding(rule="capacity.roofline", status=data["status"], message=message,
                    observed=data["rates"], expected=b.get("per_sequence_tokens_per_s"),
                    evidence={"bound": b, "min_share": data["min_share"]})]


def roofline_figure(result: "CapacityResult", params: "Params") -> Any:
    """Measured decode rates (per sequence and summed) by concurrency, with the bandwidth bound of each."""
    import plotly.graph_objects as go

    data = roofline(result, params)
    rates, b = data["rates"], data["bound"]
    xs = [r["concurrency"] for r in rates]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[r["per_sequence_tokens_per_s"] for r in rates], mode="lines+markers",
                             name="measured, per sequence (median)"))
    fig.add_trace(go.Scatter(x=xs, y=[r["summed_tokens_per_s"] for r in rates], mode="lines+markers",
                             name="measured, summed"))
    if b.get("known") and xs:
        one = b["per_sequence_tokens_per_s"]
        fig.add_trace(go.Scatter(x=xs, y=[one] * len(xs), mode="lines", line={"dash": "dash"},
                                 name="bound per sequence"))
        fig.add_trace(go.Scatter(x=xs, y=[one * c for c in xs], mode="lines", line={"dash": "dot"},
                                 name="bound summed (c × per sequence)"))
    title = "Decode rate against the memory-bandwidth bound" + ("" if b.get("known") else " — no bound known")
    fig.update_layout(title=title, xaxis_title="concurrency", yaxis_title="tokens/s", yaxis_type="log",
                      height=420, annotations=[{"text": data["text"][:160], "xref": "paper", "yref": "paper",
                                                "x": 0, "y": -0.25, "showarrow": False}])
    return fig


def roofline_table(result: "CapacityResult", params: "Params") -> Any:
    """The arithmetic of the bound, figure by figure with its source, and the verdict."""
    import pandas as pd

    data = roofline(result, params)
    b = data["bound"]
    rows = [("GPU", b.get("gpu"), b.get("gpu_source")),
            ("HBM bandwidth per GPU (TB/s)", b.get("hbm_tb_s"), b.get("hbm_source")),
            ("tensor parallel size", b.get("tensor_parallel_size"), b.get("tensor_parallel_size_source")),
            ("pipeline parallel size", b.get("pipeline_parallel_size"), b.get("pipeline_parallel_size_source")),
            ("data parallel size", b.get("data_parallel_size"), b.get("data_parallel_size_source")),
            ("active parameters (billions)", b.get("active_params_b"), b.get("active_params_source")),
            ("bytes per parameter", b.get("bytes_per_param"), b.get("weight_dtype")),
            ("bound per sequence (tokens/s)", b.get("per_sequence_tokens_per_s"), b.get("arithmetic") or b.get("why")),
            ("verdict", data["status"], data["text"])]
    return pd.DataFrame(rows, columns=["figure", "value", "source / arithmetic"])

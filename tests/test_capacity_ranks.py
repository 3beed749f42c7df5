"""Capacity per data-parallel rank and against the bandwidth bound (roofline), pure: findings over a run read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3lib.axes.capacity import CapacityResult, rank_findings, roofline, roofline_findings, roofline_table
from k3lib.axes.capacity.roofline import DTYPE_BYTES, hbm_for
from k3lib.core.outcomes import level_for
from k3lib.core.params import load_params

ROOT = Path(__file__).resolve().parents[1]


def _params(*sets: str):
    return load_params([str(ROOT / "parameters" / "emulator.yaml")], list(sets))


def _rank(engine: str, node: str = "http://10.0.0.1:8000/metrics", **values):
    rid = f"{node}#{engine}"
    row = {"rank": rid, "name": f"rank {engine} ({node.split('//')[1].split('/')[0]})", "endpoint": node,
           "engine": engine, "preemptions": 0.0, "waiting_mean": 0.0, "kv_usage_max": 0.3, "running_mean": 1.0,
           "num_gpu_blocks": 1024, "decode_tokens_per_s_per_seq": 50.0, "hit_rate": None}
    row.update(values)
    return row


def _result(steps, soak=None, requests=(), gpu=(), config=None):
    run = {"plan": {}, "phases": [], "steps": steps, "soak": soak,
           "config": config or {"values": {"tensor_parallel_size": 8, "pipeline_parallel_size": 1,
                                           "data_parallel_size": 2},
                                "sources": {"tensor_parallel_size": "log: non-default args"}}}
    return CapacityResult(run, [], list(gpu), list(requests), None, None)


def _four(**faulty):
    n2 = "http://10.0.0.2:8000/metrics"
    return [_rank("0"), _rank("1"), _rank("2", n2), _rank("3", n2, **faulty)]


def test_healthy_ranks_pass_and_one_rank_alone_is_judged_by_the_aggregate():
    params = _params()
    steps = [{"concurrency": 4, "label": "c4", "status": "done", "ranks": _four()}]
    found = {f.rule: f for f in rank_findings(_result(steps), params)}
    assert found["capacity.rank_saturation"].status == "pass"
    assert found["capacity.rank_balance"].status == "pass" and "4 ranks alike" in found["capacity.rank_balance"].message
    # one rank: nothing per rank to say, the aggregate is the rank
    assert rank_findings(_result([{"concurrency": 4, "label": "c4", "status": "done", "ranks": None}]), params) == []


def test_the_rank_that_saturates_first_is_named():
    params = _params()
    steps = [{"concurrency": 4, "label": "c4", "status": "done",
              "ranks": _four(preemptions=6.0, waiting_mean=1.5, kv_usage_max=0.98)}]
    f = next(f for f in rank_findings(_result(steps), params) if f.rule == "capacity.rank_saturation")
    assert f.status == "fail" and f.message.startswith("at the planned concurrency 4, rank 3 (10.0.0.2:8000)")
    assert "6 preemption(s)" in f.message and f.evidence["worst"] == "http://10.0.0.2:8000/metrics#3"
    assert level_for(f)[0] == "capacity-extension"


@pytest.mark.parametrize("faulty, soak_faulty, needle", [
    pytest.param({"num_gpu_blocks": 320}, {}, "KV pool of 320 blocks, its peers 1024", id="small-pool"),
    pytest.param({"decode_tokens_per_s_per_seq": 9.0}, {}, "decodes 9 tokens/s per sequence", id="slow-rank"),
    pytest.param({}, {"hit_rate": 0.0}, "reused 0% of its prefix tokens", id="no-prefix-reuse"),
])
def test_a_rank_unlike_its_peers_is_named_and_forces_a_rebuild(faulty, soak_faulty, needle):
    params = _params()
    steps = [{"concurrency": 4, "label": "c4", "status": "done", "ranks": _four(**faulty)}]
    n2 = "http://10.0.0.2:8000/metrics"
    soak = {"ranks": [_rank("0", hit_rate=0.6), _rank("1", hit_rate=0.6), _rank("2", n2, hit_rate=0.6),
                      _rank("3", n2, **{"hit_rate": 0.6, **soak_faulty})]}
    f = next(f for f in rank_findings(_result(steps, soak), params) if f.rule == "capacity.rank_balance")
    assert f.status == "fail" and needle in f.message, f.message
    assert f.message.startswith("rank 3 (10.0.0.2:8000) ") and f.evidence["outliers"] == [n2 + "#3"]
    assert level_for(f)[0] == "environment-rebuild"


def _requests(concurrency: int, tokens: int, decode_s: float, n: int = 6):
    # n requests of `tokens` output tokens whose decode took decode_s after a 100 ms first token
    return [{"phase": "concurrency", "step": f"c{concurrency}", "ok": True, "completion_tokens": tokens,
             "ttft_ms": 100.0, "e2e_ms": 100.0 + decode_s * 1000} for _ in range(n)]


def _h200_run(per_seq_tok_s: float):
    steps = [{"concurrency": 1, "label": "c1", "status": "done", "start_wall": 0.0, "end_wall": 10.0},
             {"concurrency": 4, "label": "c4", "status": "done", "start_wall": 20.0, "end_wall": 30.0}]
    decode_s = 127 / per_seq_tok_s
    requests = _requests(1, 128, decode_s) + _requests(4, 128, decode_s)
    gpu = [{"name": "NVIDIA H200", "host": "n0", "gpu": i} for i in range(8)]
    return _result(steps, requests=requests, gpu=gpu)


def test_roofline_flags_a_decode_rate_above_the_bandwidth_bound():
    params = _params("axes.capacity.roofline.hbm_tb_s=null")  # the real H200 figure from the table
    data = roofline(_h200_run(5000.0), params)
    b = data["bound"]
    # 8 GPUs of TP x 4.8 TB/s over 50 B active parameters x 4.25 bits
    expected = 8 * 4.8e12 / (50e9 * 4.25 / 8)
    assert b["known"] and b["per_sequence_tokens_per_s"] == pytest.approx(expected, rel=1e-4)
    assert b["hbm_source"].startswith("NVIDIA H200") and b["weight_dtype"] == "mxfp4"
    (f,) = roofline_findings(_h200_run(5000.0), params)
    assert f.status == "warn" and "measurement error" in f.message
    assert "concurrency 1: 5,000 tokens/s per sequence > 1,446" in f.message
    assert "8 GPU(s) of tensor parallelism × 4.8 TB/s" in f.message and "26.6 GB read per token" in f.message
    assert level_for(f)[0] == "limited-observation"


def test_roofline_a_rate_far_below_the_bound_is_a_probable_misconfiguration_and_a_normal_one_passes():
    params = _params("axes.capacity.roofline.hbm_tb_s=null", "axes.capacity.roofline.min_share=0.05")
    (low,) = roofline_findings(_h200_run(20.0), params)
    assert low.status == "warn" and "probable misconfiguration" in low.message and "1.4% of the bound" in low.message
    (ok,) = roofline_findings(_h200_run(300.0), params)
    assert ok.status == "pass" and "20.8% of the bound" in ok.message
    # the emulator's parameters accept a lower share (its steps stretch with event-loop lag on shared cores)
    (demo,) = roofline_findings(_h200_run(20.0), _params("axes.capacity.roofline.hbm_tb_s=null"))
    assert demo.status == "pass" and "at least 1% of it expected" in demo.message
    table = roofline_table(_h200_run(300.0), params)
    assert list(table["figure"])[:2] == ["GPU", "HBM bandwidth per GPU (TB/s)"] and table["value"][1] == 4.8


def test_roofline_on_a_cpu_target_says_no_bound_known():
    params = _params("axes.capacity.roofline.hbm_tb_s=null")
    run = _h200_run(5000.0)
    cpu = CapacityResult(run.run, [], [], run.requests, None, None)  # no GPU samples: a CPU build
    (f,) = roofline_findings(cpu, params)
    assert f.status == "info" and f.message.startswith("no bound known: the target shows no GPU")
    assert f.expected is None


def test_hbm_table_reads_gpu_names_as_the_tools_print_them():
    assert hbm_for("NVIDIA H100 80GB HBM3")[0] == 3.35
    assert hbm_for("NVIDIA H100 PCIe")[0] == 2.0
    assert hbm_for("NVIDIA H200")[0] == 4.8
    assert hbm_for("AMD Instinct MI300X")[0] == 5.3
    assert hbm_for("NVIDIA B200")[0] == 8.0
    assert hbm_for("NVIDIA A100-SXM4-80GB")[0] == 2.039
    assert hbm_for("Intel Xeon") is None and hbm_for(None) is None
    assert DTYPE_BYTES["mxfp4"] == 0.53125

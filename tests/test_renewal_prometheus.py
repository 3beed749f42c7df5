"""A demo history backfilled into a real Prometheus server gives the same analysis as the file itself — slot means
by `avg_over_time`, the deployment's own series by its label matchers, and the others (another node's GPUs, another
model's vLLM) left out and counted the same way on both paths."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from conftest import needs_tool

from k3lib.renewal import demo
from k3lib.renewal.params import load_review_params
from k3lib.renewal.review import analyse, load_review
from k3lib.core.procs import end_process

pytestmark = needs_tool(bool(shutil.which("promtool") and shutil.which("prometheus")),
                        "promtool/prometheus not on PATH (Debian: apt-get install prometheus)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    root = tmp_path_factory.mktemp("prom")
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from renewal_attack import add_to_family, samples

    paths = demo.generate("spiky", root / "inputs")
    # the same Prometheus also scrapes another node and another model: neither is the reviewed deployment
    stamps = [ts for _, _, ts in samples(paths["history"], 'DCGM_FI_DEV_GPU_UTIL{gpu="0"')]
    add_to_family(paths["history"], "DCGM_FI_DEV_GPU_UTIL",
                  [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="node-b",modelName="NVIDIA H200"}} 99 {ts}'
                   for g in range(2) for ts in stamps])
    add_to_family(paths["history"], "vllm:num_requests_waiting",
                  [f'vllm:num_requests_waiting{{model_name="llama-70b",engine="0"}} 40 {ts}' for ts in stamps])
    data = root / "data"
    # 24 h blocks: one tenth of the blocks (and the time) of promtool's 2 h default
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                    str(paths["history"]), str(data)], check=True, capture_output=True, timeout=120)
    config = root / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
    port = _free_port()
    # retention counts back from the newest block; 10 years keeps the anchored window whatever today is
    proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
                             "--storage.tsdb.retention.time=3650d", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not become ready (exit {proc.poll()})")
            time.sleep(0.2)
        yield paths, url
    finally:
        end_process(proc)


@pytest.mark.slow
def test_prometheus_and_file_give_the_same_analysis(backfilled):
    paths, url = backfilled
    from_file = load_review(load_review_params([paths["params"]]))
    from_prom = load_review(load_review_params([paths["params"]], ["review.series.history_file=null",
                                                                  f"review.series.prometheus_url={url}"]))
    assert len(from_prom.frame) == 21 * 288 and from_prom.frame["gpu_util"].notna().all()
    assert from_prom.frame["running"].notna().sum() > 5000  # vLLM series are absent only during the outages
    assert set(from_prom.raw) == set(from_file.raw)
    for name in from_file.raw:
        assert from_prom.raw[name].values.keys() == from_file.raw[name].values.keys(), name
    assert from_prom.frame.equals(from_file.frame)
    left_out = {(x.name, x.reason, x.series) for x in from_file.series.left_out}
    assert left_out == {("DCGM_FI_DEV_GPU_UTIL", "another host (node-b)", 2),
                        ("vllm:num_requests_waiting", "another model (llama-70b)", 1)}
    assert {(x.name, x.reason, x.series) for x in from_prom.series.left_out} == left_out
    assert from_prom.gpus == 4 and analyse(from_prom) == analyse(from_file)

"""The emulator as data-parallel ranks and as node processes: global `engine` labels on each node's /metrics,
node 0 spreading requests over every rank, a fault on one rank only, and a real Prometheus scraping the nodes
as it would a cluster."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import needs_tool

from k3lib.axes.capacity.ranks import rank_window
from k3lib.emulator import EmulatorConfig
from k3lib.emulator.cluster import start_cluster
from k3lib.emulator.faults import FaultSet
from k3lib.core.errors import BadInputError
from k3lib.io.metrics import Snapshot, scrape
from k3lib.core.procs import end_process


def _cluster(*faults: str):
    return start_cluster(EmulatorConfig.from_profile("demo-2node", faults=faults, time_scale=0.05))


async def _load(url: str, n: int, concurrency: int, max_tokens: int = 24) -> list[int]:
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=30) as client:
        async def one(i: int) -> int:
            async with sem:
                body = {"model": "kimi-k3", "messages": [{"role": "user", "content": f"count to {i}"}],
                        "max_tokens": max_tokens, "ignore_eos": True, "stream": i % 2 == 0}
                r = await client.post(url + "/v1/chat/completions", json=body)
                return r.status_code

        return list(await asyncio.gather(*(one(i) for i in range(n))))


def _by_engine(text: str, name: str) -> dict[str, float]:
    snap = Snapshot.from_text(text)
    return {s.labels["engine"]: s.value for _, s in snap.samples(name)}


@pytest.mark.parametrize("text, message", [
    pytest.param("old-vllm@1", "applies to the whole server", id="server-wide-fault"),
    pytest.param("slow@one", "RANK a DP rank number", id="rank-not-a-number"),
    pytest.param("nonsense@1", "unknown fault", id="unknown-fault"),
])
def test_rank_fault_syntax_is_checked(text, message):
    with pytest.raises(BadInputError, match=message):
        FaultSet.parse([text])


def test_rank_fault_beyond_the_deployment_is_refused():
    with pytest.raises(BadInputError, match="DP ranks 0..3"):
        EmulatorConfig.from_profile("demo-2node", faults=("kv-starved@4",))
    fs = FaultSet.parse(["slow=3@2", "kv-starved@2", "flaky-5xx"])
    assert dict(fs.on_rank(2)) == {"slow": 3.0, "kv-starved": None} and "flaky-5xx" in fs
    assert set(fs.canonical()) == {"flaky-5xx", "kv-starved@2", "slow=3@2"}


def test_node_layout_splits_the_ranks_and_refuses_an_uneven_split():
    cfg = EmulatorConfig.from_profile("demo-2node")
    assert cfg.nodes == 2 and cfg.local_ranks == 4
    node1 = cfg.node_layout(1)
    assert node1.local_ranks == 2 and [node1.rank(i) for i in range(2)] == [2, 3]
    with pytest.raises(BadInputError, match="does not split"):
        cfg.node_layout(0, 3)
    # the recipe's H200 layout: TP8 x DP2 over two nodes of 8 GPUs, one rank per node
    kimi = EmulatorConfig.from_profile("kimi-k3-h200x16")
    assert kimi.nodes == 2 and kimi.node_layout(1).rank(0) == 1


def test_two_nodes_label_global_ranks_and_node0_loads_every_rank():
    with _cluster() as c:
        assert len(c.nodes) == 1 and c.nodes[0].proc.poll() is None
        statuses = asyncio.run(_load(c.url, 32, 8))
        assert statuses == [200] * 32
        head, node1 = (httpx.get(u).text for u in c.metrics_urls)
        gen0 = _by_engine(head, "generation_tokens_total")
        gen1 = _by_engine(node1, "generation_tokens_total")
        # each node's /metrics carries its own ranks under their global numbers, as vLLM's hybrid-LB nodes do
        assert set(gen0) == {"0", "1"} and set(gen1) == {"2", "3"}
        assert all(v > 0 for v in (*gen0.values(), *gen1.values())), (gen0, gen1)
        assert sum(gen0.values()) + sum(gen1.values()) == 32 * 24
        state = httpx.get(c.url + "/_emulator/state").json()
        assert [e["engine"] for e in state["engines"]] == [0, 1]
        assert sum(state["router"]["forwarded"].values()) > 0 and state["router"]["local_in_flight"] == 0
        # node 1's GPUs are its own two cards, on its own host name
        dcgm = httpx.get(c.nodes[0].dcgm_url).text
        assert 'Hostname="k3-node-1"' in dcgm and 'Hostname="k3-node-0"' not in dcgm
        # a restart on node 0 restarts every node (a rollback rolls the whole deployment)
        r = httpx.post(c.url + "/_emulator/restart", json={"profile": "demo-2node", "vllm_version": "0.32.1"},
                       timeout=60)
        assert r.status_code == 200 and r.json()["nodes"][0]["status"] == 200
        assert httpx.get(c.nodes[0].url + "/version").json()["version"] == "0.32.1"
        assert _by_engine(httpx.get(c.metrics_urls[1]).text, "generation_tokens_total") == {"2": 0.0, "3": 0.0}
    assert c.nodes[0].proc.poll() is not None


def test_a_fault_on_one_rank_shows_on_that_rank_only():
    with _cluster("kv-starved@3", "slow=20@3") as c:
        before = scrape(list(c.metrics_urls))
        t0 = time.time()
        assert asyncio.run(_load(c.url, 24, 8)) == [200] * 24
        t1 = time.time()
        after = scrape(list(c.metrics_urls))
        ranks = {r["engine"]: r for r in rank_window(before, after, [], t0, t1)}
    assert sorted(ranks) == ["0", "1", "2", "3"]
    pools = {e: r["num_gpu_blocks"] for e, r in ranks.items()}
    assert pools["3"] < 0.5 * pools["0"] and pools["0"] == pools["1"] == pools["2"], pools
    itl = {e: r["itl_mean_ms"] for e, r in ranks.items()}
    assert all(itl["3"] > 3 * itl[e] for e in "012"), itl


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_tool(shutil.which("prometheus") is not None, "prometheus not on PATH (Debian: apt-get install prometheus)")
@pytest.mark.slow
def test_prometheus_scrapes_the_nodes_as_a_cluster(tmp_path):
    """A real Prometheus with one target per node sees every rank once, under its node's instance, with the same
    per-rank counts the kit reads from the nodes directly."""
    with _cluster() as c:
        targets = [u.split("//", 1)[1].rsplit("/metrics", 1)[0] for u in c.metrics_urls]
        config = tmp_path / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: vllm\n"
                          f"    static_configs: [{{targets: {targets!r}}}]\n")
        port = _free_port()
        proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        prom = f"http://127.0.0.1:{port}"
        try:
            assert asyncio.run(_load(c.url, 16, 8)) == [200] * 16
            direct = scrape(list(c.metrics_urls))
            want = {(url.split("//", 1)[1].rsplit("/metrics", 1)[0], engine):
                    direct.rank_view(url, engine).value("generation_tokens_total")
                    for url, engine in direct.ranks()}
            query = 'sum by (instance, engine) (vllm:generation_tokens_total{job="vllm"})'
            deadline = time.monotonic() + 40
            got: dict = {}
            while time.monotonic() < deadline:
                try:
                    body = httpx.get(f"{prom}/api/v1/query", params={"query": query}, timeout=2).json()
                    got = {(r["metric"]["instance"], r["metric"]["engine"]): float(r["value"][1])
                           for r in body.get("data", {}).get("result", [])}
                except httpx.HTTPError:
                    got = {}
                if got == want:
                    break
                time.sleep(0.5)
            assert got == want and len(want) == 4
        finally:
            end_process(proc)


@pytest.mark.slow
def test_the_two_node_demo_names_a_faulty_rank_in_the_decision(tmp_path):
    """`k3 validate -p parameters/emulator-2node.yaml --fault kv-starved@3`: four ranks over two node processes,
    rank 3 started with a starved KV pool; the decision's reasons name that rank, and the healthy ranks pass."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "k3lib", "validate", "-p", "parameters/emulator-2node.yaml",
                           "--fault", "kv-starved@3", "--out", str(tmp_path), "--set", "axes.agent.repetitions=1",
                           "--set", "axes.agent.tool_turns=4"],  # the ranks are the point, not the 381-turn series
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 5, done.stdout + done.stderr[-2000:]
    (run,) = tmp_path.glob("*/decision.json")
    decision = json.loads(run.read_text())
    reasons = " ".join(decision["reasons"])
    assert "capacity.rank_balance" in reasons and "rank 3 (127.0.0.1:" in reasons and "KV pool of" in reasons, reasons
    record = json.loads((run.parent / "evidence" / "capacity.json").read_text())
    findings = {f["rule"]: f for f in record["findings"]}
    assert findings["capacity.rank_balance"]["evidence"]["worst"].endswith("#3")
    assert findings["capacity.rank_saturation"]["status"] in ("pass", "fail")
    planned = next(s for s in record["data"]["steps"] if s["concurrency"] == 8)
    assert sorted(r["engine"] for r in planned["ranks"]) == ["0", "1", "2", "3"]
    assert findings["capacity.gpu_memory"]["observed"] == 4  # both nodes' GPUs sampled
    assert "decision: environment-rebuild" in done.stdout


@pytest.mark.parametrize("fault, needle", [
    pytest.param("kv-starved@9", "fault on rank 9, but the deployment has DP ranks 0..3", id="rank-beyond-dp"),
    pytest.param("crash@1", "applies to the whole server", id="server-wide-fault-on-a-rank"),
])
def test_a_bad_rank_fault_is_one_line_before_any_run_folder(tmp_path, fault, needle):
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "k3lib", "validate", "-p", "parameters/emulator-2node.yaml",
                           "--fault", fault, "--out", str(tmp_path / "out")], cwd=root, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and needle in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()

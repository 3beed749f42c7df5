"""Several emulator processes standing for the nodes of one multi-node deployment, and the routing between them.

Each node serves its own share of the data-parallel ranks, with their global ranks as `engine` labels, on its own
API server and `/metrics` — the shape of vLLM's hybrid load balancing (`--data-parallel-hybrid-lb`: one API
server per node for its local ranks). Node 0 is also the deployment's front door: it sends each new request to
the least-loaded rank, its own engines or another node's API server (the load balancer in front of the nodes,
collapsed into node 0), so a client that knows one URL loads every rank.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..core.errors import TargetUnreachable
from ..core.procs import end_process
from .config import EmulatorConfig
from .server import EmulatorUrls, start_emulator


@dataclass
class NodeProcess(EmulatorUrls):
    """One node's emulator in a process of its own."""

    node: int
    url: str
    proc: subprocess.Popen

    def stop(self, timeout_s: float = 10.0) -> None:
        end_process(self.proc, timeout_s)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def node_argv(cfg: EmulatorConfig, node: int, nodes: int, host: str = "127.0.0.1") -> list[str]:
    """`python -m k3lib.emulator` for node `node` of `nodes` serving `cfg`'s profile, faults and timing."""
    argv = [sys.executable, "-m", "k3lib.emulator", "--host", host, "--port", "0", "--profile", cfg.profile,
            "--node", f"{node}/{nodes}", "--vllm-version", cfg.vllm_version, "--time-scale", repr(cfg.time_scale)]
    for fault in cfg.fault_set().canonical():
        argv += ["--fault", fault]
    return argv


def start_node(cfg: EmulatorConfig, node: int, nodes: int, *, host: str = "127.0.0.1",
               ready_timeout_s: float = 30.0) -> NodeProcess:
    """Start node `node` in its own process and wait for its URL (its first stdout line) and a 200 on /health."""
    env = dict(os.environ)
    key_env = None
    if cfg.api_key:
        key_env = "K3_EMULATOR_NODE_KEY"  # the key travels by environment, never on a command line
        env[key_env] = cfg.api_key
    argv = node_argv(cfg, node, nodes, host) + (["--api-key-env", key_env] if key_env else [])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        proc.wait(5)
        raise TargetUnreachable(f"emulator node {node}/{nodes} did not start (exit {proc.poll()})")
    deadline = time.monotonic() + ready_timeout_s
    while True:
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code in (200, 503):
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            NodeProcess(node, url, proc).stop()
            raise TargetUnreachable(f"emulator node {node}/{nodes} at {url} did not answer within "
                                    f"{ready_timeout_s:.0f} s")
        time.sleep(0.05)
    return NodeProcess(node, url, proc)


@dataclass
class ClusterHandle:
    """A running multi-node emulator: node 0 (the front door, in this process) and the other nodes' processes."""

    head: Any  # EmulatorHandle of node 0
    nodes: list[NodeProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.head.url

    @property
    def config(self) -> EmulatorConfig:
        return self.head.config

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        return (self.head.metrics_url, *(n.metrics_url for n in self.nodes))

    @property
    def metrics_url(self) -> str:
        return self.head.metrics_url

    @property
    def dcgm_url(self) -> str:
        return self.head.dcgm_url

    @property
    def dcgm_urls(self) -> tuple[str, ...]:
        return (self.head.dcgm_url, *(n.dcgm_url for n in self.nodes))

    def stop(self, timeout_s: float = 10.0) -> None:
        self.head.stop(timeout_s)
        for n in self.nodes:
            n.stop(timeout_s)

    def __enter__(self) -> "ClusterHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_cluster(cfg: EmulatorConfig, nodes: int | None = None, *, host: str = "127.0.0.1") -> ClusterHandle:
    """Nodes 1..N-1 in processes of their own, then node 0 in a thread of this one, routing to them."""

    n = nodes or cfg.nodes
    cfg.node_layout(0, n)  # a layout that does not split is bad input before anything starts
    others: list[NodeProcess] = []
    try:
        for node in range(1, n):
            others.append(start_node(cfg, node, n, host=host))
        head_cfg = cfg.node_layout(0, n).replace(peers=tuple(p.url for p in others))
        head = start_emulator(head_cfg, host=host, port=0)
    except BaseException:
        for p in others:
            p.stop()
        raise
    handle = ClusterHandle(head, others)
    atexit.register(handle.stop)
    return handle

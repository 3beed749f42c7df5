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

from ..errors import TargetUnreachable
from .config import EmulatorConfig

# what node 0 forwards: the request paths that run on an engine (everything else is answered by node 0 itself)
ROUTED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
_HOP_HEADERS = ("authorization", "content-type", "accept")


class Router:
    """Node 0's choice of node for each new request: the fewest requests in flight per rank (a least-outstanding-
    requests balancer, counted from the moment a request arrives, so a burst does not all land on the node whose
    engines have not seen it yet); ties stay local."""

    def __init__(self, peers: tuple[str, ...], ranks_per_peer: int, local_ranks: int | None = None) -> None:
        self.peers = peers
        self.ranks_per_peer = max(ranks_per_peer, 1)
        self.local_ranks = max(local_ranks or ranks_per_peer, 1)
        self.outstanding = {p: 0 for p in peers}
        self.forwarded = {p: 0 for p in peers}
        self.local = 0
        self._client: httpx.AsyncClient | None = None

    def pick(self) -> str | None:
        """The peer to forward to, or None to serve locally."""
        best, best_load = None, self.local / self.local_ranks
        for peer in self.peers:
            load = self.outstanding[peer] / self.ranks_per_peer
            if load < best_load:
                best, best_load = peer, load
        return best

    async def serve_locally(self, handler: Any, request: Any) -> Any:
        """Run the local handler, counting the request in flight until its answer (or its stream) ends."""
        self.local += 1
        try:
            response = await handler(request)
        except BaseException:
            self.local -= 1
            raise
        inner = getattr(response, "body_iterator", None)
        if inner is None:
            self.local -= 1
            return response

        async def counted():
            try:
                async for chunk in inner:
                    yield chunk
            finally:
                self.local -= 1

        response.body_iterator = counted()
        return response

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # no read timeout: a long generation streams for as long as the client that sent it waits
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0),
                                             limits=httpx.Limits(max_connections=None, max_keepalive_connections=512))
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def forward(self, request: Any, peer: str) -> Any:
        """Send `request` on to `peer` and stream its answer back unchanged (status, body, SSE events)."""
        from starlette.responses import JSONResponse, StreamingResponse

        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() in _HOP_HEADERS}
        self.outstanding[peer] += 1
        self.forwarded[peer] += 1
        client = self.client()
        try:
            response = await client.send(client.build_request("POST", peer + request.url.path, content=body,
                                                              headers=headers), stream=True)
        except httpx.HTTPError as exc:
            self.outstanding[peer] -= 1
            return JSONResponse({"object": "error", "type": "BadGateway", "code": 502,
                                 "message": f"node {peer} did not answer: {type(exc).__name__}"}, status_code=502)

        async def relay():
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            finally:
                await response.aclose()
                self.outstanding[peer] -= 1

        return StreamingResponse(relay(), status_code=response.status_code,
                                 media_type=response.headers.get("content-type"))

    async def broadcast(self, path: str, body: bytes) -> list[dict[str, Any]]:
        """POST an admin call (restart, faults) to every other node, so the whole deployment changes together."""
        out = []
        for peer in self.peers:
            try:
                r = await self.client().post(peer + path, content=body, headers={"content-type": "application/json"},
                                             timeout=60.0)
                out.append({"node": peer, "status": r.status_code})
            except httpx.HTTPError as exc:
                out.append({"node": peer, "status": None, "error": type(exc).__name__})
        return out

    def state(self) -> dict[str, Any]:
        return {"peers": list(self.peers), "outstanding": dict(self.outstanding), "forwarded": dict(self.forwarded),
                "local_in_flight": self.local}


@dataclass
class NodeProcess:
    """One node's emulator in a process of its own."""

    node: int
    url: str
    proc: subprocess.Popen

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    @property
    def dcgm_url(self) -> str:
        return self.url + "/_emulator/dcgm/metrics"

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
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
    from .server import start_emulator

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

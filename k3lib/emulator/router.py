"""Node 0's front door in a multi-node emulator: which node serves each new request, and forwarding it there
(k3lib.emulator.cluster starts the nodes)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import httpx

_HOP_HEADERS = ("authorization", "content-type", "accept")


class NodeReply(TypedDict):
    """How another node answered a broadcast admin call (`status` None: it did not answer)."""

    node: str
    status: int | None
    error: NotRequired[str]


class RouterState(TypedDict):
    peers: list[str]
    outstanding: dict[str, int]
    forwarded: dict[str, int]
    local_in_flight: int


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

    async def broadcast(self, path: str, body: bytes) -> list[NodeReply]:
        """POST an admin call (restart, faults) to every other node, so the whole deployment changes together."""
        out: list[NodeReply] = []
        for peer in self.peers:
            try:
                r = await self.client().post(peer + path, content=body, headers={"content-type": "application/json"},
                                             timeout=60.0)
                out.append({"node": peer, "status": r.status_code})
            except httpx.HTTPError as exc:
                out.append({"node": peer, "status": None, "error": type(exc).__name__})
        return out

    def state(self) -> RouterState:
        return {"peers": list(self.peers), "outstanding": dict(self.outstanding), "forwarded": dict(self.forwarded),
                "local_in_flight": self.local}

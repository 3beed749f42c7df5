"""What the emulator's routes share: the current engine runtime (swapped on restart), its URL and, on node 0 of a
multi-node layout, the router to the other nodes."""

from __future__ import annotations

import time
from typing import TypedDict

from .config import EmulatorConfig
from .router import Router
from .runtime import Runtime


class Layout(TypedDict):
    """What a restart keeps of a node's place in a multi-node deployment."""

    data_parallel_start_rank: int
    data_parallel_size_local: int | None
    peers: tuple[str, ...]


class EmulatorState:
    """What the routes share: the current Runtime (swapped on restart) and the public URL."""

    def __init__(self, cfg: EmulatorConfig) -> None:
        self.base_cfg = cfg
        self.runtime = Runtime(cfg)
        self.url = ""
        self.created = int(time.time())
        # node 0 of a multi-node layout routes a share of the requests to the other nodes (k3lib.emulator.cluster)
        self.router: Router | None = None
        if cfg.peers:
            self.router = Router(cfg.peers, cfg.local_ranks, cfg.local_ranks)

    def layout(self) -> Layout:
        """The fields a restart keeps: which ranks this process serves and which nodes it routes to."""
        c = self.base_cfg
        return {"data_parallel_start_rank": c.data_parallel_start_rank,
                "data_parallel_size_local": c.data_parallel_size_local, "peers": c.peers}

    async def restart(self, cfg: EmulatorConfig) -> None:
        old = self.runtime
        await old.stop()
        self.base_cfg = cfg
        self.runtime = Runtime(cfg)
        await self.runtime.start(self.url)

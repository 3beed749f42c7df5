"""GPU memory model: how much of each card the weights, activations and KV pool take, and the
dcgm-exporter view of it (`DCGM_FI_DEV_FB_USED`/`_FB_FREE` in MiB, `DCGM_FI_DEV_GPU_UTIL` in %).

Like vLLM, the process reserves `gpu_memory_utilization` of each card at start and memory stays flat
while serving; only the `memory-leak` fault makes it creep, and a dead engine gives the memory back.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU budget (MiB) and the KV pool it leaves for each data-parallel engine."""

    total_mib: float
    reserved_mib: float          # gpu_memory_utilization × total: what the process holds
    weights_mib: float
    activation_mib: float
    cudagraph_mib: float
    kv_mib: float                # what is left for the KV cache on each GPU (may be ≤ 0)
    num_blocks: int              # per engine
    block_size: int

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def kv_gib(self) -> float:
        return max(self.kv_mib, 0.0) * MIB / GIB


def plan_memory(cfg) -> MemoryPlan:
    """GPUs × memory × gpu_memory_utilization − weights − activation reserve − CUDA graphs → KV blocks."""
    total = float(cfg.gpu_memory_mib)
    reserved = total * cfg.gpu_memory_utilization
    weights = cfg.weights_bytes / max(cfg.gpu_count, 1) / MIB
    kv = reserved - weights - cfg.activation_reserve_mib - cfg.cudagraph_mib
    tokens = int(kv * MIB // cfg.kv_bytes_per_token) if kv > 0 else 0
    blocks = tokens // cfg.block_size
    if cfg.num_gpu_blocks_override is not None:
        blocks = cfg.num_gpu_blocks_override
    return MemoryPlan(total, reserved, weights, cfg.activation_reserve_mib, cfg.cudagraph_mib, kv, blocks,
                      cfg.block_size)


def starved_utilization(cfg) -> float:
    """The gpu_memory_utilization that leaves a pool of only ~1.25 × max_model_len tokens (kv-starved)."""
    return pool_utilization(cfg, 1.25 * cfg.max_model_len)


def pool_utilization(cfg, tokens: float) -> float:
    """The gpu_memory_utilization that leaves a KV pool of about `tokens` tokens (whole blocks)."""
    target_tokens = math.ceil(tokens / cfg.block_size) * cfg.block_size
    need_mib = (cfg.weights_bytes / max(cfg.gpu_count, 1) / MIB + cfg.activation_reserve_mib + cfg.cudagraph_mib
                + target_tokens * cfg.kv_bytes_per_token / MIB)
    return math.ceil(need_mib / cfg.gpu_memory_mib * 10_000) / 10_000


def gpu_uuid(seed: int, index: int) -> str:
    h = hashlib.blake2b(f"gpu:{seed}:{index}".encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class GpuBoard:
    """Live per-GPU numbers for the dcgm exposition: reserved memory, leak, and utilisation by engine."""

    def __init__(self, cfg, plan: MemoryPlan) -> None:
        self.cfg = cfg
        self.plan = plan
        self.leak_mib = 0.0
        self.process_alive = True   # False once the engine died or never started: memory goes back
        self.busy = [0.0] * cfg.local_ranks   # 0..1 per local engine

    def used_mib(self) -> int:
        if not self.process_alive:
            return 0
        return min(int(round(self.plan.reserved_mib + self.leak_mib)), int(self.plan.total_mib))

    def exposition(self) -> str:
        cfg = self.cfg
        rows = []
        tp = max(cfg.tensor_parallel_size, 1)
        # the GPUs of this process' ranks only: a node's dcgm-exporter shows that node's cards
        first = cfg.data_parallel_start_rank * tp if cfg.data_parallel_size_local is not None else 0
        last = first + cfg.local_ranks * tp if cfg.data_parallel_size_local is not None else cfg.gpu_count
        for i in range(first, min(last, cfg.gpu_count)):
            engine = min((i - first) // tp, len(self.busy) - 1)
            node, local = divmod(i, max(cfg.gpus_per_node, 1))
            labels = (f'gpu="{local}",UUID="{gpu_uuid(cfg.seed, i)}",pci_bus_id="00000000:{0x18 + 0x10 * local:02X}:00.0",'
                      f'device="nvidia{local}",modelName="{cfg.gpu_name}",Hostname="{cfg.hostname_prefix}{node}",'
                      f'DCGM_FI_DRIVER_VERSION="{cfg.driver_version}"')
            used = self.used_mib()
            util = int(round(100 * self.busy[engine])) if self.process_alive else 0
            rows.append((labels, used, int(self.plan.total_mib) - used, util))
        out = []
        for name, help_, col in (("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", 2),
                                 ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", 1),
                                 ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", 3)):
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} gauge")
            out.extend(f"{name}{{{r[0]}}} {r[col]}" for r in rows)
        return "\n".join(out) + "\n"

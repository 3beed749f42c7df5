"""EmulatorConfig: everything that decides what the emulated vLLM server is and says.

`resolved()` folds the active faults into the flags they stand for (an old version, a lower memory
utilization, no tool parser …), so the rest of the emulator reads one plain config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..core.errors import BadInputError
from ..core.versions import release
from .faults import FaultSet
from .gpu import pool_utilization, starved_utilization
from .profiles import PROFILES

DEFAULT_VLLM_VERSION = "0.33.0"
OLD_VLLM_VERSION = "0.27.0"  # below the seed's 0.27.1 minimum (the newer recipe asks 0.29.0)


@dataclass(frozen=True)
class EmulatorConfig:
    profile: str = "demo"
    vllm_version: str = DEFAULT_VLLM_VERSION
    model: str = "moonshotai/Kimi-K3"
    served_model_name: str = "kimi-k3"
    faults: tuple[str, ...] = ()
    time_scale: float = 1.0
    seed: int = 0
    api_key: str | None = field(default=None, repr=False)  # a secret: never in a repr or a log
    log_dir: str | None = None
    # server flags
    enable_auto_tool_choice: bool = True
    tool_call_parser: str | None = "kimi_k3"
    reasoning_parser: str | None = "kimi_k3"
    enable_prefix_caching: bool = True
    enable_prompt_tokens_details: bool = True
    # a hybrid model's prefix retention (Kimi K3's KDA state): reuse needs a state checkpoint, kept on a prefix's
    # second sighting; the interval is --prefix-cache-retention-interval (0: only prompt-end states)
    hybrid_retention: bool = False
    prefix_cache_retention_interval: int = 0
    # speculative decoding (--speculative-config, DSpark for Kimi K3): tokens drafted per step, 0 for none, and the
    # share of drafted tokens accepted
    speculative_tokens: int = 0
    spec_acceptance: float = 0.5
    block_size: int = 16
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 512
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks_override: int | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    # the DP ranks this process serves, as `--data-parallel-start-rank` / `--data-parallel-size-local` on a node of
    # a multi-node deployment: engine labels are global ranks (start_rank, start_rank + 1, ...)
    data_parallel_start_rank: int = 0
    data_parallel_size_local: int | None = None  # None: every rank (one node)
    peers: tuple[str, ...] = ()  # the other nodes' API servers this one routes a share of the requests to
    extra_args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # hardware and image
    gpu_count: int = 1
    gpus_per_node: int = 1
    gpu_name: str = "NVIDIA H200"
    gpu_memory_mib: int = 143_771
    driver_version: str = "580.95.05"
    cuda_build: str = "13.0"
    cuda_runtime: str = "13.0.88"
    torch_version: str = "2.9.0+cu130"
    image: str = ""
    hostname_prefix: str = "k3-node-"
    # memory and timing model
    weights_bytes: int = 0
    activation_reserve_mib: int = 2_048
    cudagraph_mib: int = 512
    kv_bytes_per_token: int = 16_384
    prefill_tokens_per_s: float = 20_000.0
    decode_step_base_ms: float = 20.0
    decode_step_per_seq_ms: float = 1.0
    image_tokens: int = 64
    log_stats_interval_s: float = 10.0

    @classmethod
    def from_profile(cls, name: str = "demo", **overrides: Any) -> "EmulatorConfig":
        """The named profile's values, then `overrides` (any field) on top."""
        if name not in PROFILES:
            raise BadInputError(f"unknown emulator profile {name!r}; known: {', '.join(sorted(PROFILES))}",
                                field="profile")
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(overrides) - known)
        if bad:
            raise BadInputError(f"unknown emulator setting(s): {', '.join(bad)}", field="emulator")
        values = dict(PROFILES[name])
        values.update(overrides)
        if "faults" in values:
            values["faults"] = tuple(values["faults"])
        if "peers" in values:
            values["peers"] = tuple(values["peers"])
        cfg = cls(profile=name, **values)
        cfg.fault_set()  # validate fault names now, not at the first request
        dp = max(cfg.data_parallel_size, 1)
        if not 0 <= cfg.data_parallel_start_rank < dp or cfg.data_parallel_start_rank + cfg.local_ranks > dp:
            raise BadInputError(f"DP ranks {cfg.data_parallel_start_rank}..{cfg.data_parallel_start_rank + cfg.local_ranks - 1}"
                                f" are not within data_parallel_size {dp}", field="data_parallel_start_rank")
        bad_ranks = sorted(r for r in cfg.fault_set().scoped if r >= dp)
        if bad_ranks:
            raise BadInputError(f"fault on rank {bad_ranks[0]}, but the deployment has DP ranks 0..{dp - 1}",
                                field="fault")
        if cfg.time_scale <= 0:
            raise BadInputError("time_scale must be > 0", field="time_scale")
        if release(cfg.vllm_version) is None:
            raise BadInputError(f"not a vLLM version: {cfg.vllm_version!r} (expected e.g. 0.33.0)",
                                field="vllm_version")
        return cfg

    def replace(self, **changes: Any) -> "EmulatorConfig":
        return dataclasses.replace(self, **changes)

    @property
    def local_ranks(self) -> int:
        """How many DP engines this process runs."""
        dp = max(self.data_parallel_size, 1)
        return dp if self.data_parallel_size_local is None else max(self.data_parallel_size_local, 1)

    def rank(self, local: int) -> int:
        """The global DP rank (the `engine` label) of local engine `local`."""
        return self.data_parallel_start_rank + local

    @property
    def nodes(self) -> int:
        """Nodes the profile's GPUs span (gpu_count / gpus_per_node), when its DP ranks split evenly over them."""
        n = max(self.gpu_count // max(self.gpus_per_node, 1), 1)
        return n if n > 1 and max(self.data_parallel_size, 1) % n == 0 else 1

    def node_layout(self, node: int, nodes: int | None = None) -> "EmulatorConfig":
        """This config as node `node` of `nodes` serves it: its share of the DP ranks."""
        n = nodes or self.nodes
        dp = max(self.data_parallel_size, 1)
        if n < 1 or dp % n or not 0 <= node < n:
            raise BadInputError(f"node {node} of {n}: data_parallel_size {dp} does not split over {n} node(s)",
                                field="nodes")
        local = dp // n
        return self.replace(data_parallel_start_rank=node * local, data_parallel_size_local=local)

    def fault_set(self) -> FaultSet:
        return FaultSet.parse(self.faults, self.seed)

    def version(self) -> tuple[int, ...]:
        """The release numbers of the emulated vLLM, read by the kit's one parser (`k3lib.core.versions`, PEP 440):
        `0.10.1.1` → (0, 10, 1, 1); a local tag (`+cu130`) says nothing of the release, and a candidate such as
        `0.27.0rc9` already behaves as its release (0, 27, 0) does. (A config is checked when made: `()` never.)"""
        return release(self.vllm_version) or ()

    def at_least(self, text: str) -> bool:
        """Whether the emulated vLLM behaves as `text` or later (on the release numbers, see `version`)."""
        return self.version() >= (release(text) or ())

    def resolved(self) -> "EmulatorConfig":
        """The config the emulated server actually runs with, once the faults are applied."""

        fs = self.fault_set()
        cfg = self
        if "old-vllm" in fs and cfg.at_least(OLD_VLLM_VERSION):
            cfg = cfg.replace(vllm_version=OLD_VLLM_VERSION)
        if "cuda12-image" in fs:
            cfg = cfg.replace(cuda_build="12.9", cuda_runtime="12.9.86",
                              torch_version=cfg.torch_version.split("+")[0] + "+cu129")
        if "old-driver" in fs:
            cfg = cfg.replace(driver_version="570.172.08")
        if "no-tool-parser" in fs:
            cfg = cfg.replace(enable_auto_tool_choice=False, tool_call_parser=None)
        if "no-prefix-caching" in fs:
            cfg = cfg.replace(enable_prefix_caching=False)
        if "kv-starved" in fs:
            cfg = cfg.replace(gpu_memory_utilization=starved_utilization(cfg))
        if "kv-pool" in fs:
            cfg = cfg.replace(gpu_memory_utilization=pool_utilization(cfg, fs.value("kv-pool") or 8192))
        if not cfg.image:
            tag = f"v{cfg.vllm_version}" + ("-cu129" if cfg.cuda_build.startswith("12") else "")
            cfg = cfg.replace(image=f"vllm/vllm-openai:{tag}")
        return cfg

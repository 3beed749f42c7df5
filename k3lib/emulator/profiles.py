"""Named deployments the emulator can impersonate: hardware, memory and server flags per profile.

`kimi-k3-h200x16` is the recipe's Hopper layout at real scale; `demo` is small enough that prefix hits,
preemption, queueing and OOM all show within seconds; `demo-2node` is `demo` on four DP ranks over two nodes.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, TypedDict

# H200 as nvidia-smi/dcgm report it: 143771 MiB of framebuffer (the "141 GB" on the box).
_H200_MIB = 143_771

class Profile(TypedDict, total=False):
    """A profile's values: `EmulatorConfig` fields (k3lib.emulator.config), the ones a profile sets."""

    model: str
    served_model_name: str
    gpu_memory_utilization: float
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    block_size: int
    tensor_parallel_size: int
    data_parallel_size: int
    gpu_count: int
    gpus_per_node: int
    gpu_name: str
    gpu_memory_mib: int
    weights_bytes: int
    activation_reserve_mib: int
    cudagraph_mib: int
    kv_bytes_per_token: int
    prefill_tokens_per_s: float
    decode_step_base_ms: float
    decode_step_per_seq_ms: float
    image_tokens: int
    enable_auto_tool_choice: bool
    tool_call_parser: str | None
    reasoning_parser: str | None
    enable_prefix_caching: bool
    enable_prompt_tokens_details: bool
    extra_args: Mapping[str, Any]  # extra server flags, as vLLM takes them
    hybrid_retention: bool
    speculative_tokens: int


_KIMI_K3 = Profile(
    model="moonshotai/Kimi-K3",
    served_model_name="kimi-k3",
    # Recipe Hopper overrides: util 0.97, 5 seqs, 32k context, 4096 batched tokens, FLASHMLA → block 64.
    gpu_memory_utilization=0.97,
    max_num_seqs=5,
    max_model_len=32_768,
    max_num_batched_tokens=4096,
    block_size=64,
    tensor_parallel_size=8,
    data_parallel_size=2,
    gpu_count=16,
    gpus_per_node=8,
    gpu_name="NVIDIA H200",
    gpu_memory_mib=_H200_MIB,
    # 2.8T params in MXFP4 ≈ 1.68 TB, spread over all 16 GPUs by expert parallelism.
    weights_bytes=1_680_000_000_000,
    activation_reserve_mib=6_144,
    cudagraph_mib=1_536,
    # MLA latent (512 + 64 rope) in bf16 on the 16 full-attention layers; KDA layers keep a fixed state.
    kv_bytes_per_token=576 * 2 * 16,
    prefill_tokens_per_s=9_000.0,
    decode_step_base_ms=45.0,
    decode_step_per_seq_ms=4.0,
    image_tokens=256,
    enable_auto_tool_choice=True,
    tool_call_parser="kimi_k3",
    reasoning_parser="kimi_k3",
    enable_prefix_caching=True,
    enable_prompt_tokens_details=True,
    extra_args=MappingProxyType({"trust_remote_code": True, "attention_backend": "FLASHMLA",
                                 "moe_backend": "marlin", "disable_custom_all_reduce": True}),
)

_DEMO = Profile(
    model="moonshotai/Kimi-K3",
    served_model_name="kimi-k3",
    gpu_memory_utilization=0.9,
    max_num_seqs=8,
    max_model_len=4096,
    max_num_batched_tokens=512,
    block_size=16,
    tensor_parallel_size=1,
    data_parallel_size=1,
    gpu_count=1,
    gpus_per_node=1,
    gpu_name="NVIDIA H200",
    gpu_memory_mib=_H200_MIB,
    # Sized so the pool holds 16,384 tokens (4 × max_model_len): a few long prompts fill it.
    weights_bytes=int(_H200_MIB * 0.9 - 2_048 - 512 - 256) * 2**20,
    activation_reserve_mib=2_048,
    cudagraph_mib=512,
    kv_bytes_per_token=16_384,
    prefill_tokens_per_s=5_000.0,
    decode_step_base_ms=20.0,
    decode_step_per_seq_ms=1.0,
    image_tokens=64,
    enable_auto_tool_choice=True,
    tool_call_parser="kimi_k3",
    reasoning_parser="kimi_k3",
    enable_prefix_caching=True,
    enable_prompt_tokens_details=True,
    extra_args=MappingProxyType({"trust_remote_code": True}),
)

# Two nodes of two GPUs, one DP rank per GPU (TP1 × DP4): the demo's cards and pools, laid out as the recipe's
# multi-node TP × DP deployment is (TP8 × DP2 over two H200 nodes), small enough to run on a laptop. Each node is a
# process of its own, its /metrics labelling its ranks 0-1 and 2-3.
_DEMO_2NODE: Profile = {**_DEMO, "data_parallel_size": 4, "gpu_count": 4, "gpus_per_node": 2,
                        "weights_bytes": _DEMO["weights_bytes"] * 4}

# `demo` as Kimi K3's hybrid attention keeps its prefixes: the recurrent state is retained on a prefix's second hit
# (vLLM's K3 blog; vllm#45238, #52527), so a cold/warm pair reuses nothing and the third sighting does.
_DEMO_HYBRID: Profile = {**_DEMO, "hybrid_retention": True}
# `demo` with speculative decoding configured (DSpark, 7 drafted tokens per step, as vLLM's K3 blog runs it).
_DEMO_DSPARK: Profile = {**_DEMO, "speculative_tokens": 7}

PROFILES: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "kimi-k3-h200x16": MappingProxyType(_KIMI_K3),
    "demo": MappingProxyType(_DEMO),
    "demo-2node": MappingProxyType(_DEMO_2NODE),
    "demo-hybrid": MappingProxyType(_DEMO_HYBRID),
    "demo-dspark": MappingProxyType(_DEMO_DSPARK),
})

"""Fault switches: the defects the emulator can be told to reproduce, parsed from `NAME[=VALUE]`.

A fault changes what the server *says* the way the real defect would (a CUDA 12 build shows up in the
collect_env report, a missing tool parser turns `tool_choice: "auto"` into a 400, …). Shares are drawn
from a seeded hash, so the same seed and request order give the same faulty replies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..core.errors import BadInputError


@dataclass(frozen=True)
class FaultSpec:
    """One known fault: its name, what it does, and the default of its `=VALUE` (None: takes no value)."""

    name: str
    summary: str
    default: float | None = None
    value_kind: str = "none"  # "none" | "share" (0..1) | "count" (int ≥ 1) | "factor" (> 0)


_SPECS = (
    FaultSpec("cuda12-image", "the image is a CUDA 12.9 (cu129) build: collect_env and image name say so"),
    FaultSpec("old-driver", "the host driver is branch 570 (below the R580 a CUDA 13 build needs)"),
    FaultSpec("old-vllm", "vLLM 0.27.0 (below the recipe minimum) is reported everywhere"),
    FaultSpec("no-tool-parser", "started without --enable-auto-tool-choice/--tool-call-parser"),
    FaultSpec("tool-markup-leak", "a share of tool calls come back as raw kimi_k3 markup in content", 0.3, "share"),
    FaultSpec("bad-tool-args", "a share of tool calls carry invalid JSON or schema-invalid arguments", 0.3, "share"),
    FaultSpec("no-prefix-caching", "started with --no-enable-prefix-caching"),
    FaultSpec("kv-starved", "gpu_memory_utilization so low the KV pool holds ~1.25 max-length requests"),
    FaultSpec("oom-long-context", "the engine dies with a CUDA OOM on prompts above N tokens "
                                  "(default: half of max_model_len)", 0.0, "count"),
    FaultSpec("oom-startup", "the engine never starts: CUDA OOM while profiling, /health never 200"),
    FaultSpec("slow", "decode steps are N times slower", 5.0, "factor"),
    FaultSpec("flaky-5xx", "a share of API requests fail with 500 or 503", 0.2, "share"),
    FaultSpec("memory-leak", "reported GPU memory grows by N MiB per finished request", 48.0, "factor"),
    FaultSpec("crash", "the engine dies after N requests", 20.0, "count"),
    # Kimi K3 on vLLM as users reported it in 2026 (../shared/research/k3-on-vllm-2026.md §2.2, §6)
    FaultSpec("call-in-reasoning", "a share of tool turns skip the think terminator: empty tool_calls, the whole "
                                   "turn and its XTML call in reasoning (vllm#53246)", 0.05, "share"),
    FaultSpec("channel-leak", "a share of streamed replies leak <|close|>message<|sep|> at the end of their content "
                              "(vllm#54273, #51399)", 1.0, "share"),
    FaultSpec("reasoning-as-content", "a share of replies think past max_tokens, and a non-streamed one cut there "
                                      "returns its reasoning as content, reasoning null (vllm#50258)", 1.0, "share"),
    FaultSpec("required-as-text", "tool_choice required: the call is written as XTML text in content, no "
                                  "tool_calls, finish_reason stop (vllm#51355)"),
    FaultSpec("args-stall", "streamed tool calls arrive whole after N modelled seconds of silence (vllm#50604)",
              60.0, "factor"),
    FaultSpec("history-reasoning-dropped", "the reasoning of earlier assistant turns never reaches the prompt (a "
                                           "gateway, an SDK or a chat template drops it)"),
    FaultSpec("strip-reasoning", "replies come back without their reasoning field (a gateway strips it)"),
    FaultSpec("loose-strict-args", "forced calls (required, named) carry arguments that miss required keys and add "
                                   "unknown ones (vLLM 0.32's kimi_k3 structural tag leaves keys free)"),
    FaultSpec("stream-history-leak", "a streamed reply to a history that carries reasoning loses its reasoning "
                                     "field: the think channel lands in content (vLLM 0.32, kimi_k3)"),
    FaultSpec("sparse-retention-miss", "hybrid prefix retention never keeps a recurrent-state checkpoint inside the "
                                       "shared prefix: reuse stays at 0 % (vllm#45238)"),
    FaultSpec("kv-pool", "gpu_memory_utilization leaving a KV pool of about N tokens: room for the planned "
                         "requests, not for the planned sessions' histories", 8192.0, "count"),
    FaultSpec("session-evict", "the prefix cache forgets every block no request holds as soon as a request ends: "
                               "an agent's history is evicted between its turns"),
    FaultSpec("slow-load", "a healthy cold load that takes N modelled seconds (a full Kimi K3 load: llm-d measured "
                           "5,385 s on 4x8 H100): /health answers 503 until then", 600.0, "factor"),
    # in front of the engine (k3lib.emulator.front): what the kit asked is not what the engine serves
    FaultSpec("strip-ignore-eos", "an allow-list gateway drops ignore_eos (not an OpenAI field): replies end at their "
                                  "own length"),
    FaultSpec("cap-max-tokens", "a gateway caps max_tokens at N", 64.0, "count"),
    FaultSpec("response-cache", "a response cache answers byte-identical bodies that carry tools; its answers never "
                                "reach the engine"),
    FaultSpec("response-cache-all", "a response cache answers every byte-identical chat body; its answers never "
                                    "reach the engine"),
    FaultSpec("dspark-low-accept", "speculative decoding accepts almost none of its drafted tokens (a speculator "
                                   "that does not match the model)"),
)

FAULTS: Mapping[str, FaultSpec] = MappingProxyType({s.name: s for s in _SPECS})
# Faults one data-parallel rank can carry alone (`NAME[=VALUE]@RANK`): a GPU that had less free memory when its
# engine profiled (its KV pool is smaller), a throttled GPU (its steps are slower), an engine started without
# prefix caching. vLLM profiles and schedules each DP engine on its own, so each shows on that rank only.
RANK_FAULTS = frozenset({"kv-starved", "slow", "no-prefix-caching"})


def parse_fault(text: str) -> tuple[str, float | None]:
    """`"bad-tool-args=0.5"` → `("bad-tool-args", 0.5)`; `"slow"` → `("slow", 5.0)` (the default)."""
    name, sep, raw = text.strip().partition("=")
    name = name.strip()
    spec = FAULTS.get(name)
    if spec is None:
        raise BadInputError(f"unknown fault {name!r}; known faults: {', '.join(sorted(FAULTS))}", field="fault")
    if not sep:
        return name, spec.default
    if spec.value_kind == "none":
        raise BadInputError(f"fault {name!r} takes no value (got {raw!r})", field="fault")
    try:
        value = float(raw)
    except ValueError as exc:
        raise BadInputError(f"fault {name!r} needs a number after '=' (got {raw!r})", field="fault") from exc
    if spec.value_kind == "share" and not 0.0 <= value <= 1.0:
        raise BadInputError(f"fault {name!r}: a share is between 0 and 1 (got {value})", field="fault")
    if spec.value_kind in ("count", "factor") and value <= 0:
        raise BadInputError(f"fault {name!r}: the value must be positive (got {value})", field="fault")
    return name, value


def parse_scoped(text: str) -> tuple[str, float | None, int | None]:
    """`"slow=3@2"` → `("slow", 3.0, 2)`: the fault on DP rank 2 only; without `@RANK` the rank is None."""
    body, at, rank_text = text.strip().rpartition("@") if "@" in text else (text, "", "")
    name, value = parse_fault(body)
    if not at:
        return name, value, None
    if name not in RANK_FAULTS:
        raise BadInputError(f"fault {name!r} applies to the whole server, not to one rank (rank faults: "
                            f"{', '.join(sorted(RANK_FAULTS))})", field="fault")
    if not rank_text.strip().isdigit():
        raise BadInputError(f"fault {text!r}: expected NAME[=VALUE]@RANK with RANK a DP rank number", field="fault")
    return name, value, int(rank_text)


@dataclass(frozen=True)
class FaultSet:
    """The active faults with their values; `share_hit` draws reproducibly from (seed, fault, n). `scoped` holds
    the faults of one DP rank only (rank → fault → value)."""

    values: Mapping[str, float | None]
    seed: int = 0
    scoped: Mapping[int, Mapping[str, float | None]] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def parse(cls, faults: tuple[str, ...] | list[str], seed: int = 0) -> "FaultSet":
        whole: dict[str, float | None] = {}
        scoped: dict[int, dict[str, float | None]] = {}
        for text in faults:
            name, value, rank = parse_scoped(text)
            if rank is None:
                whole[name] = value
            else:
                scoped.setdefault(rank, {})[name] = value
        return cls(MappingProxyType(whole), seed,
                   MappingProxyType({r: MappingProxyType(v) for r, v in sorted(scoped.items())}))

    def on_rank(self, rank: int) -> Mapping[str, float | None]:
        """The faults rank `rank` carries alone."""
        return self.scoped.get(rank, MappingProxyType({}))

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def value(self, name: str) -> float | None:
        return self.values.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.values))

    def canonical(self) -> tuple[str, ...]:
        """Back to `NAME[=VALUE]` strings, a value only where it differs from the default."""
        def one(name: str, v: float | None) -> str:
            return name if v == FAULTS[name].default else f"{name}={v:g}"

        out = [one(name, self.values[name]) for name in sorted(self.values)]
        out += [f"{one(name, faults[name])}@{rank}" for rank, faults in self.scoped.items() for name in sorted(faults)]
        return tuple(out)

    def draw(self, name: str, n: int) -> float:
        """A uniform number in [0, 1) fixed by (seed, fault name, n): stable across runs and platforms."""
        digest = hashlib.blake2b(f"{self.seed}:{name}:{n}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def share_hit(self, name: str, n: int) -> bool:
        share = self.values.get(name)
        return name in self.values and share is not None and self.draw(name, n) < share

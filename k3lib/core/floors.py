"""The floors of the settings table, named on the judged fields (`k3lib.core.roles.Judged`): each a function of the
resolved parameters that gives the strictest-lenient value a run may take without saying so, with the words saying
where it comes from —
the contract (its context limit, planned concurrency, typical request sizes), the seeds' sampling rules, the served
model's recipe and what the target showed of itself (`SERVED`) — and the measures that reduce a value to what its floor
is about (the longest length, the highest level, a null filled in as the axis fills it)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .stats import min_samples, trials_to_bound

Floor = Callable[[Mapping[str, Any]], "tuple[Any, str] | None"]
Measure = Callable[[Any, Mapping[str, Any]], Any]


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(list(value)) if isinstance(value, tuple) else str(value)
    return f"{value:g}"


def _get(tree: Mapping[str, Any], path: str) -> Any:
    node: Any = tree
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


# -- floors from the contract ------------------------------------------------------------------------------------


#: the contract's limits where a partial tree leaves them unset (the defaults of `k3lib.core.params.ContractParams`)
_CONTEXT_DEFAULT, _OUTPUT_DEFAULT = 32768, 1024


def _context_tokens(resolved: Mapping[str, Any]) -> int:
    return int(_get(resolved, "contract.max_context_tokens") or _CONTEXT_DEFAULT)


def _output_tokens(resolved: Mapping[str, Any]) -> int:
    return int(_get(resolved, "contract.max_output_tokens") or _OUTPUT_DEFAULT)


def typical_prompt_tokens(resolved: Mapping[str, Any]) -> int:
    """The contract's typical prompt; unset, half of its context limit (what the load sends by default)."""
    return int(_get(resolved, "contract.typical_prompt_tokens") or max(16, _context_tokens(resolved) // 2))


def typical_output_tokens(resolved: Mapping[str, Any]) -> int:
    """The contract's typical answer; unset, its max output."""
    return int(_get(resolved, "contract.typical_output_tokens") or _output_tokens(resolved))


def planned_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    n = int(_get(resolved, "contract.planned_concurrency") or 1)
    return n, f"contract.planned_concurrency {n}"


def context_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    ctx, out = _context_tokens(resolved), _output_tokens(resolved)
    return ctx - out, (f"the longest prompt reaches the contract's context limit: contract.max_context_tokens {ctx} "
                       f"− contract.max_output_tokens {out}")


def longest_context(value: Any, resolved: Mapping[str, Any]) -> int:
    if value:
        return max(value)  # the long-context phase sends each length as a whole prompt
    ctx = _context_tokens(resolved)
    return max(ctx - int(_get(resolved, "axes.capacity.long_context_output_tokens") or 0), 16)


def prompt_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    n = typical_prompt_tokens(resolved)
    said = "contract.typical_prompt_tokens" if _get(resolved, "contract.typical_prompt_tokens") else \
        "half of contract.max_context_tokens (contract.typical_prompt_tokens unset)"
    return n, f"the contract's typical prompt: {said} {n}"


def output_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    n = typical_output_tokens(resolved)
    said = "contract.typical_output_tokens" if _get(resolved, "contract.typical_output_tokens") else \
        "contract.max_output_tokens (contract.typical_output_tokens unset)"
    return n, f"the contract's typical answer: {said} {n}"


def prefix_floor_tokens(resolved: Mapping[str, Any]) -> int:
    """The longest cold/warm prompt the prefix protocol must send: the contract's typical prompt, within the
    context limit once the protocol's short answer is reserved."""
    ctx = _context_tokens(resolved)
    answer = int(_get(resolved, "axes.prefix_cache.max_tokens") or 16)
    return max(16, min(typical_prompt_tokens(resolved), ctx - answer - 64))


def prefix_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    return prefix_floor_tokens(resolved), ("the longest prefix reaches the contract's typical prompt (a cache that "
                                           "keeps short prefixes only must not pass)")


def requests_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    planned, said = planned_floor(resolved)
    n = max(min_samples(95), 2 * planned)
    return n, f"a p95 interval's {min_samples(95)} requests, and two rounds of {said}"


def highest(value: Any, resolved: Mapping[str, Any]) -> Any:
    return max(value) if value else planned_floor(resolved)[0]  # null: [1, the planned concurrency]


def or_floor(floor: Callable[[Mapping[str, Any]], tuple[Any, str]]) -> Measure:
    """A null size is derived from the contract by the axis: it meets its floor by construction."""
    return lambda value, resolved: floor(resolved)[0] if value is None else value


def tool_turns_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    rate = float(_get(resolved, "contract.max_tool_call_failure_rate") or 0.01)
    n = trials_to_bound(rate)
    return n, (f"the tool turns whose Wilson 95 % upper bound can reach contract.max_tool_call_failure_rate "
               f"{_fmt(rate)} with no failure")


def modes_floor(resolved: Mapping[str, Any]) -> tuple[int, str]:
    modes = list(_get(resolved, "contract.client_stream_modes") or ())
    return len(modes), f"every stream mode the clients use: contract.client_stream_modes {modes}"


def modes_run(value: Any, resolved: Mapping[str, Any]) -> int:  # the clients' modes the agent axis runs
    modes = tuple(_get(resolved, "contract.client_stream_modes") or ())
    return len(modes) if value is None else int(("stream" if value else "non-stream") in modes)


def longest_prefix(value: Any, resolved: Mapping[str, Any]) -> Any:
    return max(value) if value else prefix_floor_tokens(resolved)


# -- floors from what the target served, and from the served model's recipe --------------------------------------

#: the key under which the decision adds what the target showed of itself to the resolved parameters (the served
#: model's recipe, the GPU the samples show and its HBM bandwidth from the kit's table: `k3lib.verdict.served`);
#: without it (the parameters as they load) these floors are unknown and judge nothing
SERVED = "__served__"

# bytes per parameter as stored: the microscaling formats carry one scale per block (MXFP4: an 8-bit scale per 32
# values, 4.25 bits; NVFP4: an FP8 scale per 16 values, 4.5 bits)
DTYPE_BYTES: Mapping[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                                    "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8, "int4": 0.5}


def _served(resolved: Mapping[str, Any], key: str) -> Any:
    facts = resolved.get(SERVED)
    return facts.get(key) if isinstance(facts, Mapping) else None


def recipe_floor(path: str) -> Floor:
    """The value the served model's recipe (`k3lib.core.recipes.KnownRecipe.judged`) gives `path`, if any."""
    def floor(resolved: Mapping[str, Any]) -> tuple[Any, str] | None:
        recipe = _served(resolved, "recipe") or {}
        if path not in recipe:
            return None
        return recipe[path], (f"the recipe of the model the target serves ({_served(resolved, 'recipe_model')}: "
                              f"{_served(resolved, 'recipe_name')}), whatever the parameters' recipe says")
    return floor


def hbm_floor(resolved: Mapping[str, Any]) -> tuple[Any, str] | None:
    tb_s = _served(resolved, "hbm_tb_s")
    if tb_s is None:
        return None
    return tb_s, f"the kit's HBM table for the GPU the samples show ({_served(resolved, 'gpu')})"


def gpu_floor(resolved: Mapping[str, Any]) -> tuple[Any, str] | None:
    gpu = _served(resolved, "gpu")
    return None if gpu is None else (gpu, "the GPU the samples show (nvidia-smi/dcgm modelName)")


def or_served(floor: Callable[[Mapping[str, Any]], "tuple[Any, str] | None"]) -> Measure:
    """A null is filled from what the target shows (the axis does so): it meets its floor by construction."""
    return lambda value, resolved: (floor(resolved) or (None,))[0] if value is None else value


def nvswitch_floor(resolved: Mapping[str, Any]) -> tuple[Any, str]:
    return True, ("null infers NVSwitch from the GPU model (HGX H100/H200/B200 boards carry it) and checks the "
                  "fabric manager; false drops the check")


_SAMPLE = "k3lib/data/agent_sample.yaml"


def sample_floor(resolved: Mapping[str, Any]) -> tuple[str, str]:
    return _SAMPLE, "the kit's reference sample"


def sample_run(value: Any, resolved: Mapping[str, Any]) -> Any:  # null: the kit's reference sample
    return value or _SAMPLE


def generated_floor(resolved: Mapping[str, Any]) -> tuple[str, str]:
    return "generated", "sessions generated from the contract"


def generated_run(value: Any, resolved: Mapping[str, Any]) -> Any:  # null: sessions generated from the contract
    return value or "generated"


def nvswitch_run(value: Any, resolved: Mapping[str, Any]) -> Any:  # null: inferred from the GPU model, checked
    return True if value is None else value


def dtype_bytes(value: Any) -> float:
    return DTYPE_BYTES.get(str(value), 0.0)



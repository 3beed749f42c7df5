"""The acceptance sheet: the source document's sixteen checklist items, each tied to the findings that prove it.

Each item names the test, the configuration it ran under, the observed result, the evidence kept and the
reviewer. An item is `pass` only when findings prove it; with no finding it stays `open` — never a pass.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any, Iterable

from ..core.evidence import EvidenceRecord, Finding
from ..core.params import default_tree
from ..core.recipes import recipe_loosened
from ..core.thresholds import BY_PATH, loosened
from .served import served_facts
from .shapes import ChecklistRow, RecipeSection


@dataclasses.dataclass(frozen=True)
class SheetItem:
    id: str
    title: str  # the checklist line of the source document, in English
    test: str  # what the kit does to prove it
    axis: str  # evidence/<axis>.json and the notebook section
    rules: tuple[str, ...]  # fnmatch patterns over finding rule ids; every matched finding must pass
    notebook: str


ITEMS: tuple[SheetItem, ...] = (
    SheetItem("C01", "Image, digest and vLLM version are archived",
              "image reference and digest from the container's inspect JSON; /version, log, collect_env, fingerprint",
              "environment", ("environment.image", "environment.vllm_version"), "01_environment"),
    SheetItem("C02", "The CUDA 13 build is identified in the image or its build process",
              "torch's CUDA build and the nvidia-*-cuNN libraries from collect_env (never nvidia-smi's CUDA line)",
              "environment", ("environment.cuda_build",), "01_environment"),
    SheetItem("C03", "The host driver is in branch R580 or an officially compatible branch",
              "driver version and branch from nvidia-smi, collect_env or NVML", "environment",
              ("environment.driver_branch",), "01_environment"),
    SheetItem("C04", "The versions seen by the host and by the container were compared",
              "host nvidia-smi/NVML (driver, CUDA it runs, GPUs) vs the container's collect_env; disagreements named",
              "environment",
              ("environment.host_container",), "01_environment"),
    SheetItem("C05", "Startup logs hold no unhandled loading or compatibility error",
              "the startup log read for OOM, load errors and compatibility warnings; required flags in its args",
              "environment", ("environment.startup", "environment.flags"), "01_environment"),
    SheetItem("C06", "The reference agent scenario holds the expected tools and structured outputs",
              "the reference sample run N times at each concurrency level, at the recipe's sampling, in the "
              "clients' stream modes; Moonshot's vendor contract (tool_choice matrix, history reasoning in "
              "prompt_tokens)", "agent",
              ("agent.tool_calls_present", "agent.function_name", "agent.final_answer", "agent.executable",
               # the vendor contract's blocking items (k3lib.axes.agent.contract_judge)
               "agent.contract.tool_choice_required", "agent.contract.tool_choice_named",
               "agent.contract.tool_choice_none", "agent.contract.history_reasoning"),
              "02_agent_tools"),
    SheetItem("C07", "Replies were checked against their schema, not only displayed",
              "tool arguments parsed and validated with jsonschema; repetitions compared; every leak named; the "
              "tool-call failure rate of independent tool turns with its Wilson interval; strict schemas forced",
              "agent",
              ("agent.arguments_valid", "agent.structure_stable", "agent.no_markup_leak", "agent.no_reasoning_leak",
               "agent.reasoning_present", "agent.tool_call_failure_rate", "agent.contract.response_format_strict",
               "agent.contract.schema_suite", "agent.contract.history_reply"), "02_agent_tools"),
    SheetItem("C08", "The cold-load test was kept apart from the long-context test",
              "cold load and long context run as separate bounded phases", "capacity",
              ("capacity.cold_load", "capacity.long_context"), "03_capacity"),
    SheetItem("C09", "Concurrency was raised step by step with the GPU curves kept",
              "progressive concurrency up to the contract (+1 step beyond), per-GPU memory sampled; agent sessions "
              "stepped up to the planned sessions, replayed with live tool-call ids", "capacity",
              ("capacity.saturation", "capacity.gpu_memory", "capacity.admission", "capacity.session_preemption",
               "capacity.session_prefix_reuse", "capacity.session_tool_calls"), "03_capacity"),
    SheetItem("C10", "Any OOM is tied to a precise condition and a corrective decision",
              "OOMs detected, timed and classified (startup / long context / overlap)", "capacity",
              ("capacity.oom", "capacity.startup_oom", "capacity.context_refusal"), "03_capacity"),
    SheetItem("C11", "vllm:kv_cache_usage_perc, waiting requests and preemptions were recorded",
              "server series sampled through every phase", "capacity",
              ("capacity.server_metrics", "capacity.soak_saturation", "capacity.memory_growth"), "03_capacity"),
    SheetItem("C12", "The prefix-cache cold test and the controlled warm test are kept",
              "cold then warm request per session, TTFT and tokens recorded", "prefix_cache",
              ("prefix_cache.reuse",), "04_prefix_cache"),
    SheetItem("C13", "Request, hit and cached-token counters are consistent",
              "counter deltas vs designed hits vs cached_tokens", "prefix_cache",
              ("prefix_cache.counters", "prefix_cache.designed_vs_observed"), "04_prefix_cache"),
    SheetItem("C14", "Recovery after a tool error was tested",
              "the tool returns an error; the planned fallback or retry is checked", "agent",
              ("agent.tool_error_fallback",), "02_agent_tools"),
    SheetItem("C15", "The operator knows the context limit, the concurrency limit and the rollback signal",
              "attestation file (who, when, how, link)", "operations",
              ("attestation.operator_knows_limits",), "05_operations"),
    SheetItem("C16", "A restore to the previous image was rehearsed",
              "attestation, or a rollback drill run by the kit with the command in parameters", "operations",
              ("attestation.rollback_rehearsed",), "05_operations"),
)


def _matching(findings: Iterable[Finding], patterns: tuple[str, ...]) -> list[Finding]:
    return [f for f in findings if any(fnmatch.fnmatchcase(f.rule, p) for p in patterns)]


#: rules that report one event under one name or another (an OOM at startup or while serving): one of them suffices
EITHER: tuple[frozenset[str], ...] = (frozenset({"capacity.oom", "capacity.startup_oom"}),)
#: rules that apply only when the agent axis ran with a setting on (its record's `data.settings`): thinking off or
#: the vendor contract skipped drops them, and the settings table lists that setting as loosened when its floor
#: (the served model's recipe, the kit's default) has it on
WHEN_SET: dict[str, str] = {"agent.reasoning_present": "thinking", "agent.no_reasoning_leak": "thinking",
                            **{f"agent.contract.{r}": "contract_check" for r in (
                                "tool_choice_required", "tool_choice_named", "tool_choice_none", "history_reasoning",
                                "response_format_strict", "schema_suite", "history_reply")}}


def unproven_rules(item: SheetItem, found: Iterable[Finding], rec: EvidenceRecord | None = None) -> list[str]:
    """The rules of `item` no finding speaks to: the item rests on every one of them (save one its record's
    settings turned off, `WHEN_SET`, and the alternative names of one event, `EITHER`)."""
    found = list(found)
    settings = (rec.data or {}).get("settings") if rec is not None and isinstance(rec.data, dict) else None
    settings = settings if isinstance(settings, dict) else {}

    def spoken(pattern: str) -> bool:
        names = next((g for g in EITHER if pattern in g), {pattern})
        return any(fnmatch.fnmatchcase(f.rule, p) for f in found for p in names)

    return [p for p in item.rules
            if not spoken(p) and not (p in WHEN_SET and settings.get(WHEN_SET[p]) is not True)]


def item_status(item: SheetItem, records: dict[str, EvidenceRecord]) -> tuple[str, list[Finding]]:
    """pass / fail / warn / open, and the findings it rests on. Only findings that compared something prove an
    item: every matched finding passes, and every rule it rests on has one (a part of the item no finding speaks to
    leaves it open, however well the others pass). One that could not be observed, or an `info` one, leaves it
    open."""
    rec = records.get(item.axis)
    if rec is None:
        return "open", []
    found = _matching(rec.findings, item.rules)
    if not found:
        return ("fail" if rec.error else "open"), []
    statuses = {f.status for f in found}
    if "fail" in statuses:
        return "fail", found
    if statuses & {"warn", "not-observable"}:
        return "warn" if "warn" in statuses else "open", found
    if "info" in statuses or unproven_rules(item, found, rec):
        # an `info` finding compared nothing ("the recipe sets no requirement", "not stated by the server"):
        # it proves no item, even beside findings that pass; nor does a rule with no finding at all
        return "open", found
    return "pass", found


def sheet_rows(records: dict[str, EvidenceRecord], params: dict[str, Any] | None = None,
               reviewer: str | None = None) -> list[ChecklistRow]:
    """One row per item: id, title, status, test, configuration, observed, evidence, reviewer."""
    rows: list[ChecklistRow] = []
    for item in ITEMS:
        status, found = item_status(item, records)
        rec = records.get(item.axis)
        observed = "; ".join(_observed(f) for f in found) if found else (
            "no evidence record" if rec is None else "no finding proves this item")
        missing = unproven_rules(item, found, rec) if found else []
        if missing:
            observed += "; no finding for " + ", ".join(missing) + " (the item rests on it: open)"
        rows.append({
            "id": item.id, "title": item.title, "status": status, "test": item.test,
            "configuration": _configuration(item.axis, params, records),
            "observed": observed,
            "evidence": f"evidence/{item.axis}.json" if rec else None,
            "notebook": f"report/{item.notebook}.html",
            "rules": [f.rule for f in found],
            "reviewer": reviewer,
        })
    return rows


def _observed(f: Finding) -> str:
    return f"{f.message} (info: compares nothing, proves nothing)" if f.status == "info" else f.message


def _recipe_requirements(recipe: RecipeSection) -> list[str]:
    """What the recipe asks of the environment, in words; a requirement it leaves unset is said to be unset."""
    vmin, vmax = recipe.get("vllm_min"), recipe.get("vllm_max")
    if vmin and vmax:
        vllm = f"vLLM ≥ {vmin}, < {vmax}"
    elif vmin or vmax:
        vllm = f"vLLM ≥ {vmin}" if vmin else f"vLLM < {vmax}"
    else:
        vllm = "no vLLM version set"
    cuda = f"CUDA {recipe['cuda_major']}" if recipe.get("cuda_major") else "no CUDA version set"
    driver = f"driver ≥ R{recipe['driver_branch_min']}" if recipe.get("driver_branch_min") else "no driver set"
    return [vllm, cuda, driver, f"build {recipe.get('build')}"]


def _configuration(axis: str, params: dict[str, Any] | None, records: dict[str, EvidenceRecord] | None = None) -> str:
    if not params:
        return ""

    facts = served_facts(records or {}, (params.get("recipe") or {}).get("name"))
    loose = [t for t in loosened(params, default_tree(), served=facts) if BY_PATH[t.path].axis == axis]
    if axis == "environment":  # the recipe of the model the target serves, whatever recipe.name says
        probe = (records or {}).get("probe")
        cards = probe.typed().served_models if probe is not None and probe.axis == "probe" else []
        loose += recipe_loosened(params.get("recipe") or {}, [str(v) for c in cards for v in (c.id, c.root) if v])
    base = _base_configuration(axis, params)
    if not loose:
        return base
    return (base + "; " if base else "") + "loosened: " + ", ".join(t.text() for t in loose)


def _base_configuration(axis: str, params: dict[str, Any]) -> str:
    contract = params.get("contract", {})
    recipe = params.get("recipe", {})
    if axis == "environment":
        return f"recipe {recipe.get('name')}: " + ", ".join(_recipe_requirements(recipe))
    if axis in ("agent", "capacity", "prefix_cache"):
        return f"context {contract.get('max_context_tokens')} tokens, planned concurrency " \
               f"{contract.get('planned_concurrency')}, max output {contract.get('max_output_tokens')}"
    return ""

"""The chain's engine level: the vLLM version against the recipe's range (and the version's sources against each
other), the server flags the recipe requires, from the log's arguments and from behaviour, and prefix caching."""

from __future__ import annotations

from typing import Any

from ...core.versions import public

from ...core.evidence import Finding, FindingStatus
from ...core.params import RecipeParams
from .rules import Proof, args_where, engine_args, finding, line_of, missing, version_proofs
from .sources import EnvironmentSources
from .values import expected_version, in_range, parse_flag, parse_version, same_value


def check_version(s: EnvironmentSources, recipe: RecipeParams) -> list[Finding]:
    proofs = version_proofs(s)
    expected = expected_version(recipe)
    if not proofs:
        return [finding("environment.vllm_version", "not-observable",
                        "vLLM version not observable: " + missing(s, "version", "server_log", "collect_env"),
                        expected=expected)]
    out = []
    parsed = [(p, parse_version(str(p.value))) for p in proofs]
    publics = {str(public(v)) for _, v in parsed if v is not None}
    if len(publics) > 1:
        said = ", ".join(f"{p.source} says {p.value}" for p in proofs)
        out.append(finding("environment.vllm_sources", "fail",
                           f"vLLM version sources disagree: {said} — the proofs come from different builds",
                           proofs, observed={p.source: p.value for p in proofs}))
    unreadable = [p for p, v in parsed if v is None]
    observed = proofs[0].value
    if expected is None:
        out.append(finding("environment.vllm_version", "info", f"vLLM {observed}; the recipe sets no version range",
                           proofs, observed=observed))
        return out
    outside = [(p, v) for p, v in parsed if v is not None and not in_range(v, recipe.vllm_min, recipe.vllm_max)]
    if outside:
        by_value: dict[str, list[str]] = {}
        for p, _ in outside:
            by_value.setdefault(str(p.value), []).append(p.source)
        said = ", ".join(f"{v} ({', '.join(srcs)})" for v, srcs in by_value.items())
        out.append(finding("environment.vllm_version", "fail", f"vLLM {said} is outside the recipe's range {expected}",
                           proofs, observed=outside[0][0].value, expected=expected))
    elif len(unreadable) == len(parsed):
        out.append(finding("environment.vllm_version", "warn",
                           f"vLLM version {observed!r} is not a version this kit can compare", proofs,
                           observed=observed, expected=expected))
    else:
        out.append(finding("environment.vllm_version", "pass", f"vLLM {observed} is within {expected} "
                           f"({', '.join(p.source for p in proofs)})", proofs, observed=observed, expected=expected))
    return out


# Behaviour that proves a flag without the log: auto tool choice answering needs both of these.
_TOOL_FLAGS = ("enable_auto_tool_choice", "tool_call_parser")


def _flag_verdict(s: EnvironmentSources, name: str, value: Any, args: dict[str, Any] | None) -> tuple[str, str]:
    """(status, why) for one required flag, from the log's args and, where it can, from behaviour."""
    probe = s.tool_probe
    log_says = None  # True present with the right value, False absent or wrong, None no log args
    why_log = ""
    if args is not None:
        if name in args:
            log_says = same_value(args[name], value)
            why_log = f"log: {name}={args[name]!r}"
        else:
            log_says = False
            why_log = f"log: {name} not among the non-default args"
    behaviour = None
    why_b = ""
    if name in _TOOL_FLAGS and probe.outcome == "answered":
        behaviour, why_b = True, 'tool_choice "auto" answered 200'
    elif name in _TOOL_FLAGS and probe.outcome == "rejected-flags":
        behaviour, why_b = False, f"tool_choice \"auto\" got vLLM's 400 '{probe.detail}'"
    elif name == "reasoning_parser" and (s.chat_reasoning or probe.reasoning):
        behaviour, why_b = True, "replies carry a reasoning field"
    if log_says is True and behaviour is False:
        return "fail", f"sources disagree: {why_log}, but {why_b}"
    if log_says is False and behaviour is True and name in args:  # type: ignore[operator]
        return "fail", f"{why_log} (expected {value!r}), while {why_b}"
    if log_says is True:
        return "pass", why_log + (f"; {why_b}" if why_b else "")
    if behaviour is False:
        return "fail", why_b + (f"; {why_log}" if why_log else "")
    if log_says is False and behaviour is True:
        if value is True:
            return "pass", f"{why_b} (the log does not list it: {why_log})"
        return "warn", f"{why_b}, but {why_log}: its value is not confirmed"
    if log_says is False:
        return "fail", why_log
    if behaviour is True:
        if value is True:
            return "pass", why_b
        return "warn", f"{why_b}, but which {name} is not observable without the server log"
    return "not-observable", "no server log and no behaviour that shows it"


def check_flags(s: EnvironmentSources, recipe: RecipeParams) -> Finding:
    if not recipe.required_flags:
        return finding("environment.flags", "info", "the recipe requires no server flag")
    args = engine_args(s)
    verdicts = {}
    for flag in recipe.required_flags:
        name, value = parse_flag(flag)
        verdicts[flag] = _flag_verdict(s, name, value, args)
    proofs = []
    if args is not None:
        proofs.append(Proof("server_log: non-default args", {parse_flag(f)[0]: args.get(parse_flag(f)[0])
                                                                  for f in recipe.required_flags}, args_where(s),
                            s.attachment("server_log")))
    if s.tool_probe.outcome != "not-run":
        proofs.append(Proof('chat with tool_choice "auto"', f"{s.tool_probe.outcome} (HTTP {s.tool_probe.status})",
                            s.tool_probe.detail or None, s.attachment("tool_choice")))
    order: tuple[FindingStatus, ...] = ("fail", "not-observable", "warn", "pass")
    status = next(st for st in order if st in {v[0] for v in verdicts.values()} or st == "pass")
    observed = {f: v[0] for f, v in verdicts.items()}
    bad = [f"{f} ({why})" for f, (st, why) in verdicts.items() if st == status]
    if status == "pass":
        message = "every required flag is set: " + ", ".join(recipe.required_flags)
    elif status == "fail":
        message = "required server flag(s) missing or wrong: " + "; ".join(bad)
    elif status == "warn":
        message = "flag(s) only partly confirmed: " + "; ".join(bad)
    else:
        message = "flag(s) not observable: " + "; ".join(bad) + " — " + missing(s, "server_log", "tool_choice")
    return finding("environment.flags", status, message, proofs, observed=observed,
                   expected=list(recipe.required_flags),
                   verdicts={f: {"status": st, "why": why} for f, (st, why) in verdicts.items()})


def check_prefix_caching(s: EnvironmentSources, recipe: RecipeParams) -> Finding:
    if not recipe.prefix_caching:
        return finding("environment.prefix_caching", "info", "the recipe does not require prefix caching")
    proofs = []
    label = s.cache_config.get("enable_prefix_caching")
    if label is not None:
        proofs.append(Proof("vllm:cache_config_info", f"enable_prefix_caching={label}", s.cache_config_endpoint,
                            s.attachment("cache_config_info")))
    args = engine_args(s)
    arg = args.get("enable_prefix_caching") if args else None
    if arg is not None:
        proofs.append(Proof("server_log: non-default args", f"enable_prefix_caching={arg}", args_where(s),
                            s.attachment("server_log")))
    engine_line = line_of(s.texts["server_log"].text, r"enable_prefix_caching=(True|False)") if s.log else None
    if engine_line:
        on = "enable_prefix_caching=True" in engine_line  # line_of keeps the text around the match
        proofs.append(Proof("server_log: engine config", f"enable_prefix_caching={on}", engine_line,
                            s.attachment("server_log")))
    states = {str(p.value).rsplit("=", 1)[1].lower() == "true" for p in proofs}
    if not proofs:
        if args is not None:
            return finding("environment.prefix_caching", "pass",
                           "prefix caching is not disabled in the non-default args (on by default in vLLM V1)",
                           observed=None, expected=True)
        return finding("environment.prefix_caching", "not-observable",
                       "prefix caching not observable: " + missing(s, "cache_config_info", "server_log"),
                       expected=True)
    if len(states) > 1:
        said = ", ".join(str(p) for p in proofs)
        return finding("environment.prefix_caching", "fail", f"prefix-caching sources disagree: {said}", proofs,
                       observed={p.source: p.value for p in proofs}, expected=True)
    if states == {False}:
        return finding("environment.prefix_caching", "fail",
                       f"prefix caching is disabled ({proofs[0]}): agent prompts re-prefill their whole history",
                       proofs, observed=False, expected=True)
    return finding("environment.prefix_caching", "pass", f"prefix caching enabled ({proofs[0]})", proofs, observed=True,
                   expected=True)

"""The vendor contract check judged: which acceptance item each result serves and whether it blocks the agents.

The policy, decided here and written in docs/real-engines.md ("Moonshot's vendor contract on stock vLLM 0.32.0"):
- **blocks the agents** (a failure is `fail`, limited observation with the agents blocked): what an agent's loop
  meets in production — a forced call missing or returned as text, a call under `none`, a strict answer or forced
  strict arguments that break their schema, the previous turn's reasoning not reaching the model, a reply after
  such a history that loses its reasoning or leaks it;
- **client compatibility** (an `info` finding that names the gap, never a decision on its own): what a client
  written against Moonshot's API would trip on but an agent written for this deployment need not — request
  validation 400s, a forced call ending with `stop`, unpinned sampling, the reasoning field's name, usage missing
  from a stream. Two of them block when the contract says clients depend on them: `contract.sampling_pinned` and
  `contract.client_reasoning_field`.
Blocking results are `agent.contract.<id>` findings on the sheet (C06, C07); compatibility ones are
`agent.compat.<id>`, listed beside them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence

from ...core.evidence import Finding
from ..shapes import Reply
from .shapes import ContractRow, ContractSheetRow, SettingsRow


@dataclasses.dataclass(frozen=True)
class ContractItem:
    id: str
    title: str
    seed_item: str  # the acceptance sheet item (k3lib.verdict.sheet) the result serves
    blocks: bool  # by the kit's policy; two items block only when the contract says so


ITEMS: Mapping[str, ContractItem] = {i.id: i for i in (
    ContractItem("tool_choice_required", "`tool_choice: required` forces a call, never the call as text", "C06", True),
    ContractItem("tool_choice_named", "a named `tool_choice` forces that function", "C06", True),
    ContractItem("tool_choice_none", "`tool_choice: none` forbids a call and its markup", "C06", True),
    ContractItem("forced_finish_reason", "a forced call ends with finish_reason `tool_calls`", "C06", False),
    ContractItem("tool_choice_validation", "`required` without tools, an empty `tools`, an invalid `tool_choice` are "
                                           "refused with 400", "C06", False),
    ContractItem("response_format_strict", "a strict `json_schema` answer is valid against its schema", "C07", True),
    ContractItem("response_format_validation", "a malformed `response_format` is refused with 400", "C07", False),
    ContractItem("schema_suite", "forced strict calls give schema-valid arguments over the JSON Schema suite (anyOf, "
                                 "$defs/$ref, ranges, enums, nested and type arrays)", "C07", True),
    ContractItem("sampling_pinned", "sampling outside the served values (temperature 1.1, top_p 0.8, penalties 0.5) "
                                    "is refused", "C06", False),
    ContractItem("reasoning_field", "the reasoning comes back in the field the clients read", "C06", False),
    ContractItem("stream_usage", "a streamed reply ends with its usage, equal to the whole reply's prompt_tokens",
                 "C06", False),
    ContractItem("history_reasoning", "the previous turn's reasoning reaches the model (prompt_tokens with it > "
                                      "without)", "C06", True),
    ContractItem("history_reply", "after a history with reasoning, the reply keeps its reasoning in its field, "
                                  "streamed or not", "C07", True),
)}


def blocks(item: ContractItem, settings: SettingsRow) -> bool:
    if item.id == "sampling_pinned":
        return bool(settings.get("sampling_pinned"))
    if item.id == "reasoning_field":
        return bool(settings.get("client_reasoning_field"))
    return item.blocks


def derived_rows(rows: Sequence[ContractRow], settings: SettingsRow) -> list[ContractRow]:
    """The results read off the other requests: the reasoning field's name, and usage in the streams."""
    out: list[ContractRow] = []
    fields = Counter(field for r in rows if (reply := r.get("reply")) and reply.get("ok")
                     and (field := reply.get("reasoning_field")))
    wanted = settings.get("client_reasoning_field")
    if not fields:
        out.append({"id": "reasoning_field", "mode": "-", "passed": None, "observed": {},
                    "detail": "no reply carried a reasoning field"})
    else:
        seen = ", ".join(f"`{k}` ×{v}" for k, v in fields.most_common())
        if wanted:
            ok = all(k in (wanted, "both") for k in fields)
            detail = f"reasoning came back as {seen}; the clients read `{wanted}`" + ("" if ok else ": they get nothing")
        else:
            ok = all(k in ("reasoning_content", "both") for k in fields)
            detail = f"reasoning came back as {seen}" + ("" if ok else "; clients written against Moonshot's API "
                                                          "read `reasoning_content` and get nothing there")
        out.append({"id": "reasoning_field", "mode": "-", "passed": ok, "detail": detail,
                    "observed": {k: v for k, v in fields.items()}})
    pairs: dict[str, dict[str, Reply]] = {}
    for r in rows:
        if r["id"] in ("tool_choice_required", "tool_choice_named") and (reply := r.get("reply")) and reply.get("ok"):
            pairs.setdefault(r["id"], {})[r["mode"]] = reply
    for item, by_mode in pairs.items():
        streamed, whole = by_mode.get("stream"), by_mode.get("non-stream")
        if streamed is None:
            continue
        if not streamed.get("usage_present") or streamed.get("prompt_tokens") is None:
            out.append({"id": "stream_usage", "mode": "stream", "passed": False, "observed": {},
                        "detail": f"{item}: the stream asked for usage (stream_options.include_usage) and got none"})
            continue
        same = whole is None or whole.get("prompt_tokens") == streamed.get("prompt_tokens")
        out.append({"id": "stream_usage", "mode": "stream", "passed": same,
                    "observed": {"stream": streamed.get("prompt_tokens"),
                                 "non-stream": None if whole is None else whole.get("prompt_tokens")},
                    "detail": f"{item}: streamed usage {streamed.get('prompt_tokens')} prompt tokens" +
                              ("" if whole is None else f", whole reply {whole.get('prompt_tokens')}")})
    return out


def contract_findings(rows: Sequence[ContractRow], settings: SettingsRow) -> list[Finding]:
    """One finding per contract item that ran: blocking ones pass or fail, the others pass or say the gap (info)."""
    everything = [*rows, *derived_rows(rows, settings)]
    out: list[Finding] = []
    for item in ITEMS.values():
        mine = [r for r in everything if r["id"] == item.id]
        if not mine:
            continue
        blocking = blocks(item, settings)
        rule = f"agent.contract.{item.id}" if blocking else f"agent.compat.{item.id}"
        bad = [r for r in mine if r.get("passed") is False]
        unknown = [r for r in mine if r.get("passed") is None]
        table = [{"mode": r.get("mode"), "passed": r.get("passed"), "detail": r.get("detail")} for r in mine]
        evidence = {"seed_item": item.seed_item, "blocks": "agents" if blocking else None, "results": table}
        tally = f"{len(mine) - len(bad) - len(unknown)} of {len(mine)}"
        if bad:
            first = f"{bad[0].get('mode')}: {bad[0].get('detail')}"
            if blocking:
                out.append(Finding(rule=rule, status="fail", observed=tally, expected=f"all {len(mine)}",
                                   message=f"{item.title}: fails ({tally} hold) — {first}",
                                   evidence={**evidence, "category": "tool-calls"}))
            else:
                out.append(Finding(rule=rule, status="info", observed=tally, expected=f"all {len(mine)}",
                                   message=f"client compatibility, does not block: {item.title}: {tally} hold — "
                                           f"{first}", evidence=evidence))
        elif unknown and len(unknown) == len(mine):
            out.append(Finding(rule=rule, status="not-observable" if blocking else "info",
                               message=f"{item.title}: not observed — {unknown[0].get('detail')}", evidence=evidence))
        else:
            out.append(Finding(rule=rule, status="pass", observed=tally,
                               message=f"{item.title} ({tally}: " + "; ".join(
                                   f"{r.get('mode')}: {r.get('detail')}" for r in mine[:2]) + ")",
                               evidence=evidence))
    return out


def contract_rows(rows: Sequence[ContractRow], settings: SettingsRow) -> list[ContractSheetRow]:
    """The results as the sheet shows them: item, mode, passed, the seed item it serves, blocking, what was seen."""
    return [{"id": r["id"], "mode": r.get("mode"), "passed": r.get("passed"), "detail": r.get("detail"),
             "seed_item": ITEMS[r["id"]].seed_item, "blocks": blocks(ITEMS[r["id"]], settings)}
            for r in [*rows, *derived_rows(rows, settings)] if r["id"] in ITEMS]

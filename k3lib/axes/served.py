"""Asked vs served: a class of requests (a capacity run, the agent scenario, the tool-turn series, the contract check)
is judged only on replies shaped as it asked, else its passing findings are opened with the reason "the target did
not serve what was asked: <field>".

Three comparisons, each over the records a class kept (each `ChatRecord` carries what it asked, `asked_of`):

- **length** — where `ignore_eos` was sent with a `max_tokens`, every reply that completed must carry exactly that
  many `completion_tokens` and end with `finish_reason` "length": vLLM honours `ignore_eos` exactly, so a shorter
  reply, or one that ended with "stop", was shaped by something else (a gateway that drops `ignore_eos`, or caps
  `max_tokens`, answers with 56 tokens of 1,024 and the load that was measured is not the load that was planned);
- **sampling** — at temperature >= 0.6 and no `seed`, replies to one question (the same messages, tools and sampling:
  `prompt_key`) are sampled: two of them byte-identical in at least `MIN_SAMPLED_CHARS` characters of free text
  (reasoning and content) is chance at most once in a class; more than one such repeat, and more than
  `MAX_REPEAT_SHARE` of the repeats compared, is a cache answering in front of the sampler. Two replies that carry the
  same response id are one reply served twice (vLLM draws an id per request);
- **counters** — the server's own request and token counters over the class' window against the client's
  (`k3lib.io.crosscheck`, exact): a cache or a gateway that answers in front of the engine leaves the engine's
  counters short of what the kit got back.

A class with nothing to compare on a point (no `ignore_eos` sent, no repeated sampled question) leaves that point
unjudged and says so; counters that could not be read make the class' own `served_as_asked` finding not observable.
Pure: record dicts in, plain dicts and findings out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.evidence import Finding
from .shapes import (AskedFields, CountersCheck, CrossCheckDict, LengthCheck, LengthDeviation, RepeatCheck, Reply,
                     ServedReason, ServedStatus, ServedVerdict)

#: Free text (reasoning + content) a sampled reply must carry for a byte-identical repeat to be beyond chance.
MIN_SAMPLED_CHARS = 64
#: More byte-identical repeats than this share of the repeats compared (and more than one) is not sampling.
MAX_REPEAT_SHARE = 0.10
PREFIX = "the target did not serve what was asked"


def _asked(r: Reply) -> AskedFields:
    a = r.get("asked")
    return a if isinstance(a, dict) else {}


def length_check(replies: Iterable[Reply]) -> LengthCheck:
    """`ignore_eos` with a `max_tokens`: each completed reply's tokens and finish reason against what was asked."""
    checked, unknown = 0, 0
    bad: list[LengthDeviation] = []
    served: list[int] = []
    for r in replies:
        a = _asked(r)
        want = a.get("max_completion_tokens", a.get("max_tokens"))
        if not a.get("ignore_eos") or not isinstance(want, int) or not r.get("ok"):
            continue
        got = r.get("completion_tokens")
        if not isinstance(got, int):
            unknown += 1
            continue
        checked += 1
        served.append(got)
        if got != want or r.get("finish_reason") != "length":
            bad.append({"request_id": r.get("request_id"), "asked": want, "served": got,
                        "finish_reason": r.get("finish_reason")})
    out: LengthCheck = {"checked": checked, "no_usage": unknown, "deviations": len(bad), "examples": bad[:5],
                           "served_min": min(served, default=None), "served_max": max(served, default=None)}
    if bad:
        wants = sorted({int(b["asked"]) for b in bad})
        stops = sum(1 for b in bad if b["finish_reason"] != "length")
        lengths = sorted(int(b["served"]) for b in bad)
        out["text"] = (f"max_tokens/ignore_eos ({len(bad)} of {checked} replies sent ignore_eos with max_tokens "
                       f"{'/'.join(map(str, wants))} and came back with {lengths[0]}–{lengths[-1]} tokens"
                       + (f", {stops} ended by {bad[0]['finish_reason'] if stops == len(bad) else 'stop'}"
                          if stops else "") + ")")
    return out


def sampled_text(r: Reply) -> tuple[str, str]:
    """(free text, whole reply) of one reply: reasoning and content, then the tool calls' names and arguments."""
    free = f"{r.get('reasoning') or ''}\x00{r.get('content') or ''}"
    calls = "\x00".join(f"{c.get('name')}({c.get('arguments')})" for c in r.get("tool_calls") or ()
                        if isinstance(c, dict))
    return free, free + "\x01" + calls


def repeat_check(replies: Iterable[Reply]) -> RepeatCheck:
    """Replies to one sampled question (temperature >= 0.6, no seed) that came back byte-identical, and replies
    that carry another reply's response id."""
    groups: dict[str, list[Reply]] = defaultdict(list)
    ids: Counter[str] = Counter()
    for r in replies:
        a = _asked(r)
        if not r.get("ok") or not a.get("prompt_key") or a.get("seed") is not None:
            continue
        groups[str(a["prompt_key"])].append(r)
        if r.get("response_id"):
            ids[str(r["response_id"])] += 1
    compared = repeated = 0
    for rows in groups.values():
        seen: set[str] = set()
        for r in rows:
            free, whole = sampled_text(r)
            if len(free.replace("\x00", "").strip()) < MIN_SAMPLED_CHARS:
                continue
            if seen:
                compared += 1
                repeated += whole in seen
            seen.add(whole)
    same_id = sum(n - 1 for n in ids.values() if n > 1)
    deviates = same_id > 0 or (repeated > 1 and repeated > MAX_REPEAT_SHARE * compared)
    out: RepeatCheck = {"questions": len(groups), "compared": compared, "byte_identical": repeated,
                           "same_response_id": same_id, "deviates": deviates}
    if deviates:
        out["text"] = (f"sampling ({repeated} of {compared} repeated sampled replies came back byte-identical"
                       + (f", {same_id} carried another reply's response id" if same_id else "") + ")")
    return out


def counters_check(cross_check: CrossCheckDict | None, error: str | None = None) -> CountersCheck:
    """The server's request and token counters against the client's, from a `CrossCheck.model_dump()` (latency items
    are not counts and do not decide here)."""
    if cross_check is None:
        return {"agrees": None, "text": f"server counters not read: {error or 'no /metrics endpoint'}"}
    items = {i.get("quantity"): i for i in cross_check.get("items") or []}
    bad = [q for q in cross_check.get("disagreements") or [] if q not in items or items[q].get("unit") != "ms"]
    compared = [q for q, i in items.items() if i.get("unit") != "ms" and i.get("agrees") is not None]
    if bad:
        said = "; ".join(f"{q}: the engine counted {_n(items[q].get('server'))}, the kit got "
                         f"{_n(items[q].get('client'))}" for q in bad)
        short = any((items[q].get("server") or 0) < (items[q].get("client") or 0) for q in bad)
        why = (" — a cache or gateway answered in front of the engine" if short
               else " — another client's load, or the counters are not this target's")
        return {"agrees": False, "disagreements": bad, "text": f"server counters ({said}){why}"}
    if not compared:
        return {"agrees": None, "text": "server counters not comparable: the target exports no request or token "
                                        "counters"}
    return {"agrees": True, "compared": compared}


def _n(v: Any) -> str:
    return "none" if v is None else f"{float(v):g}"


def served_verdict(replies: Sequence[Reply], cross_check: CrossCheckDict | None = None, *,
                   counters_error: str | None = None, counters: bool = True,
                   length_required: bool = False) -> ServedVerdict:
    """The three comparisons over one class' replies: {"status": "as-asked" | "deviates" | "not-observable",
    "fields": [...], "reason", "length", "sampling", "counters"}. `counters=False`: the class has no counter window
    of its own here (capacity compares its counters window by window). `length_required`: the class always sends
    ignore_eos (capacity), so replies none of which could be held to their length show nothing."""
    length, sampling = length_check(replies), repeat_check(replies)
    count = counters_check(cross_check, counters_error) if counters else {"agrees": None, "text": "not compared here"}
    fields = [c["text"] for c in (length, sampling) if c.get("text") and (c.get("deviations") or c.get("deviates"))]
    if count.get("agrees") is False:
        fields.append(count["text"])
    status: ServedStatus
    if fields:
        status = "deviates"
        reason = f"{PREFIX}: " + "; ".join(fields)
    elif counters and count.get("agrees") is None:
        status, reason = "not-observable", f"whether the target served what was asked is not shown: {count['text']}"
    elif length_required and not length["checked"] and any(r.get("ok") for r in replies):
        status, reason = "not-observable", ("whether the target served what was asked is not shown: no completed "
                                            "reply carries what it asked with its usage (max_tokens, ignore_eos)")
    else:
        status, reason = "as-asked", "served as asked"
    return {"status": status, "fields": fields, "reason": reason, "length": length, "sampling": sampling,
            "counters": count}


def served_finding(axis: str, verdict: ServedVerdict) -> Finding:
    """`<axis>.served_as_asked`: pass when every comparison held; not observable otherwise, with the reason."""
    length, sampling = verdict.get("length") or {}, verdict.get("sampling") or {}
    observed = {k: verdict.get(k) for k in ("length", "sampling", "counters")}
    if verdict.get("status") == "as-asked":
        said = [f"{length['checked']} ignore_eos replies of the length asked" if length.get("checked") else
                "no ignore_eos request", f"{sampling.get('compared', 0)} repeated sampled replies, "
                f"{sampling.get('byte_identical', 0)} byte-identical"]
        if (verdict.get("counters") or {}).get("agrees"):
            said.append("the server's request and token counters equal the kit's")
        return Finding(rule=f"{axis}.served_as_asked", status="pass", observed=observed,
                       message="served as asked: " + "; ".join(said))
    return Finding(rule=f"{axis}.served_as_asked", status="not-observable", observed=observed,
                   message=str(verdict.get("reason")))


def open_findings(findings: Sequence[Finding], verdict: ServedReason) -> list[Finding]:
    """The class' findings once its served shape is known: where it deviates from the asked shape, every passing
    finding is opened (not observable) with the reason; a failure stands (it showed even under what was served)."""
    if verdict.get("status") != "deviates":
        return list(findings)
    why = str(verdict.get("reason"))
    return [f.model_copy(update={"status": "not-observable", "message": f"{why} — was pass: {f.message}",
                                 "evidence": {**(f.evidence or {}), "served": why}})
            if f.status == "pass" and not f.rule.endswith(".served_as_asked") else f for f in findings]

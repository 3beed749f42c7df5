"""The API bill for the same tasks, rebuilt from per-request `usage`, as JSON lines, a JSON array or one JSON
object: chat completion (or Responses API) objects, a gateway's request log whose lines hold such a reply or the
token counts themselves, OpenAI Batch output (the reply under `response.body`), Anthropic Message Batch results
(under `result.message`) and LiteLLM spend logs. Cache-hit input is priced apart, each vendor's convention read as
it is: OpenAI's `prompt_tokens` (and the Responses API's `input_tokens`) include the cached tokens, Anthropic's
`input_tokens` exclude them (`cache_read_input_tokens` and `cache_creation_input_tokens` come on top). A reply
counted twice (the same response id) is counted once and said; a request without usage, a task of the set with no
request, or a model without a price is refused, because a bill missing them would understate the API's cost. A
file without times (Anthropic's results) is placed in the window by the batch's own dates, or taken whole on the
operator's word (`--all-rows`)."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...axes.paths.pricing import cached_tokens_of, input_tokens_of, output_tokens_of
from ...core.errors import BadInputError
from ..inputs import read_tasks
from .params import Prices, UsageParams
from .provenance import ReviewWindow, iso
from .tables import Row, RowError, blank, dig, looks_like, obj, read_rows, row_error, to_time

TIME_KEYS = ("created", "created_at", "timestamp", "startTime", "start_time", "request_time", "time")
WRAPPERS = ("response", "response_body", "body", "result", "message")
MARKERS = ("usage", "prompt_tokens", "input_tokens", "response", "result", "choices", "output")
NO_TIME = object()


@dataclasses.dataclass
class UsageBill:
    currency: str  # the prices' currency
    cost: float = 0.0
    cost_without_cache_price: float = 0.0  # the same tokens with every input token at the input price
    billed: int = 0
    errors: int = 0
    outside: int = 0
    other_tasks: int = 0
    duplicates: int = 0  # lines whose response id (without one: whole content) an earlier line already billed
    gateway_cache: int = 0  # replies a gateway served from its own cache: no provider bill
    undated: int = 0  # lines without a time, placed by the batch's dates or --all-rows
    tokens: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))
    cached_reported: int = 0  # billed requests whose usage says how many input tokens hit the cache
    conventions: set[str] = dataclasses.field(default_factory=set)
    tasks_seen: set[str] = dataclasses.field(default_factory=set)
    seen_ids: set[str] = dataclasses.field(default_factory=set)
    rows: int = 0


def _response(row: Row) -> Row:
    """The reply a line holds: the line itself, or the object a batch or log wraps it in, however deep."""
    node: Row = row
    for _ in range(3):
        inner = next((v for k in WRAPPERS for v in [node.get(k)] if isinstance(v, dict)), None)
        if inner is None or "usage" in node:
            break
        node = inner
    return node


def _time(row: Row, resp: Row) -> Any:
    for node in (resp, row, obj(row.get("response"))):
        for key in TIME_KEYS:
            if not blank(node.get(key)):
                return key, node[key]
    return None, NO_TIME


def _failed(row: Row, resp: Row) -> bool:
    status = row.get("status_code", row.get("status"))
    inner = obj(row.get("response"))
    code = inner.get("status_code") if isinstance(inner.get("status_code"), int) else status
    result = obj(row.get("result"))
    return (bool(row.get("error") or resp.get("error") or inner.get("error"))
            or (isinstance(code, int) and code >= 400) or str(status).lower() == "failure"
            or result.get("type") in ("errored", "canceled", "expired"))


def _prices(model: str, p: UsageParams) -> Prices:
    got = p.prices.get(model) or p.prices.get("default")
    if got is None:
        raise RowError("model", f"no price for model {model!r}; expected imports.usage.prices.{model or 'default'} "
                                "(or --price-input/--price-output)")
    return got


def api_task_ids(tasks_csv: str | Path) -> set[str]:
    return {t.task_id for t in read_tasks(tasks_csv) if t.path == "api"}


def _count(usage: Row, key: str) -> int:
    """A token count of a usage object (blank: 0)."""
    v = usage.get(key)
    if isinstance(v, (list, dict)):
        raise RowError(key, f"expected a token count (got {type(v).__name__})")
    return int(v or 0)


def tokens_of(usage: Row) -> tuple[int, int, int, int, str] | None:
    """(all input tokens, of which cache reads, of which cache writes, output, convention) of one usage object;
    None without input and output counts."""
    if "prompt_tokens" not in usage and any(k in usage for k in ("cache_read_input_tokens",
                                                                  "cache_creation_input_tokens")):
        fresh, out = input_tokens_of(usage), output_tokens_of(usage)  # Anthropic: input_tokens exclude the cache
        if fresh is None or out is None:
            return None
        read, write = (_count(usage, k) for k in ("cache_read_input_tokens", "cache_creation_input_tokens"))
        return fresh + read + write, read, write, out, "anthropic"
    prompt, out = input_tokens_of(usage), output_tokens_of(usage)
    if prompt is None or out is None:
        return None
    cached = cached_tokens_of(usage)
    gateway_read = usage.get("cache_read_input_tokens")
    if cached is None and isinstance(gateway_read, int):
        cached = gateway_read  # a gateway's OpenAI-shaped usage of an Anthropic model
    return prompt, -1 if cached is None else min(cached, prompt), 0, out, "openai"


def _usage(row: Row, resp: Row) -> Row:
    for node in (resp.get("usage"), dig(row, "metadata.usage_object"), row):
        if isinstance(node, dict) and tokens_of(node) is not None:
            return node
    return obj(resp.get("usage")) or row


def _placed(row: Row, resp: Row, p: UsageParams, window: ReviewWindow, bill: UsageBill) -> bool:
    """Whether the line is in the window: by its own time, else by the batch's dates or --all-rows."""
    key, value = _time(row, resp)
    if value is NO_TIME:
        bill.undated += 1
        if p.all_rows:
            return True
        if p.batch is None:
            raise RowError("created", "no time; expected `created` or a timestamp on every line, or for a batch's "
                                      "results --batch-dates START/END (the batch's created_at and ended_at) or "
                                      "--all-rows (the whole file is the window's)")
        a, b = p.batch.start, p.batch.end
        if window.holds(a) and window.start <= b <= window.end:
            return True
        if b <= window.start or a >= window.end:
            return False
        raise RowError("created", f"no time, and the batch ran {iso(a)} to {iso(b)}, across the window's edge; "
                                  "expected a batch inside the window, or --all-rows on the operator's word")
    try:
        return window.holds(to_time(value))
    except ValueError as exc:
        raise RowError(str(key), str(exc)) from None


def bill_row(row: Row, p: UsageParams, window: ReviewWindow, tasks: set[str] | None, bill: UsageBill) -> None:
    resp = _response(row)
    task = None
    if p.task_field:
        task = dig(row, p.task_field)
        task = dig(resp, p.task_field) if blank(task) else task
    if _failed(row, resp):
        bill.errors += 1  # an error reply is not billed (a batch's failed line may carry no time at all)
        return
    if not _placed(row, resp, p, window, bill):
        bill.outside += 1
        return
    if tasks is not None and (blank(task) or str(task) not in tasks):
        bill.other_tasks += 1
        return
    if str(row.get("cache_hit")).lower() == "true":
        bill.gateway_cache += 1  # LiteLLM served it from its own cache: the provider billed nothing
        return
    rid = resp.get("id") or row.get("request_id") or row.get("id")
    # a line without any id is known by its whole content: the same time, task and usage logged twice is one request
    rid = rid if not blank(rid) else "line:" + json.dumps({k: v for k, v in row.items() if k != "_line"},
                                                           sort_keys=True, default=str)
    if str(rid) in bill.seen_ids:
        bill.duplicates += 1
        return
    got = tokens_of(_usage(row, resp))
    if got is None:
        raise RowError("usage", "no prompt/completion token counts in a successful reply; expected usage on every "
                                "billed request (the bill cannot be rebuilt without it)")
    prompt, cached, written, completion, convention = got
    prices = _prices(str(resp.get("model") or row.get("model") or ""), p)
    if prices.currency != bill.currency:
        raise RowError("model", f"priced in {prices.currency}, other models in {bill.currency}; expected one currency")
    hit = max(cached, 0) if prices.cached_input_per_mtok is not None else 0
    write_price = prices.cache_write_input_per_mtok if prices.cache_write_input_per_mtok is not None \
        else prices.input_per_mtok
    bill.cost += ((prompt - hit - written) * prices.input_per_mtok + hit * (prices.cached_input_per_mtok or 0.0)
                  + written * write_price + completion * prices.output_per_mtok) / 1e6
    bill.cost_without_cache_price += (prompt * prices.input_per_mtok + completion * prices.output_per_mtok) / 1e6
    bill.billed += 1
    bill.cached_reported += cached >= 0
    bill.conventions.add(convention)
    bill.seen_ids.add(str(rid))
    for name, n in (("input", prompt), ("cached input", max(cached, 0)), ("cache writes", written),
                    ("output", completion)):
        bill.tokens[name] += n
    if task is not None:
        bill.tasks_seen.add(str(task))


def _recognised(path: str | Path, rows: list[Row]) -> None:
    """One line for a file that is no usage export at all (no row carries usage, a reply or token counts)."""
    if rows and not any(any(k in r for k in MARKERS) for r in rows[:200]):
        keys = sorted({k for r in rows[:50] for k in r if k != "_line"})
        raise BadInputError(f"{looks_like(keys, 'records with the keys')}; expected API usage: chat completions, "
                            "OpenAI Batch output, Anthropic Message Batch results, a LiteLLM spend log or a gateway "
                            "log with usage", source=str(path))


def read_usage(path: str | Path, p: UsageParams, window: ReviewWindow) -> UsageBill:
    if not p.prices:
        raise BadInputError("no prices; expected --price-input, --price-cached-input and --price-output (per million "
                            "tokens) or imports.usage.prices", source="k3 import usage")
    currencies = {x.currency for x in p.prices.values()}
    if p.tasks and not p.task_field:
        raise BadInputError("a task log but no task field; expected --task-field (e.g. metadata.task_id) naming where "
                            "each line holds its task id", source="k3 import usage")
    tasks = api_task_ids(p.tasks) if p.tasks else None
    rows = read_rows(path, "API usage (JSON lines, a JSON array or one JSON object)", ("data", "results", "logs"))
    _recognised(path, rows)
    bill = UsageBill(currency=sorted(currencies)[0])
    for row in rows:
        bill.rows += 1
        try:
            bill_row(row, p, window, tasks, bill)
        except RowError as exc:
            raise row_error(path, row, exc) from None
    if tasks is not None:
        missing = sorted(tasks - bill.tasks_seen)
        if missing:
            raise BadInputError(f"{len(missing)} of the task log's {len(tasks)} API-path task(s) have no billed request "
                                f"here ({', '.join(missing[:5])}{', …' if len(missing) > 5 else ''}); the bill for "
                                "the same tasks would be understated: expected a log that covers every task",
                                source=str(path))
    if not bill.billed:
        raise BadInputError(f"nothing billed: {summary(bill)}; expected at least one successful reply in the window",
                            source=str(path))
    return bill


def summary(bill: UsageBill) -> str:
    return (f"{bill.rows} line(s) read; {bill.billed} billed; {bill.errors} error repl(ies) not billed; "
            f"{bill.outside} outside the window; {bill.other_tasks} not of the task set; {bill.duplicates} "
            f"duplicate(s) of a response id (or of a whole line without one) counted once; {bill.gateway_cache} "
            "served from the gateway's cache")


def notes(bill: UsageBill, p: UsageParams) -> tuple[list[str], list[str]]:
    prices = "; ".join(f"{m}: input {x.input_per_mtok:g}, cached input "
                       f"{'as input' if x.cached_input_per_mtok is None else format(x.cached_input_per_mtok, 'g')}, "
                       f"output {x.output_per_mtok:g} {x.currency}/M tokens" for m, x in sorted(p.prices.items()))
    mapped = ["usage.prompt_tokens (or input_tokens) − cached → input; cached tokens (prompt_tokens_details."
              "cached_tokens, cached_tokens or prompt_cache_hit_tokens) → cached input; completion_tokens → output"
              if "anthropic" not in bill.conventions else "usage.input_tokens (cached tokens excluded, as Anthropic "
              "counts) → input; cache_read_input_tokens → cached input; cache_creation_input_tokens → cache "
              "writes; output_tokens → output",
              f"prices {prices}"]
    out = [summary(bill),
           "tokens: " + ", ".join(f"{k} {v}" for k, v in bill.tokens.items()),
           f"{bill.cached_reported} of {bill.billed} billed request(s) report their cache hits",
           f"cost {bill.cost:.2f} {bill.currency}; with cache hits priced as input it would be "
           f"{bill.cost_without_cache_price:.2f} {bill.currency}"]
    if bill.undated:
        out.append(f"{bill.undated} line(s) without a time: " + ("taken whole (--all-rows, the operator's word)"
                   if p.all_rows else f"placed by the batch's dates {iso(p.batch.start)} to {iso(p.batch.end)}"
                   if p.batch else ""))
    if p.tasks:
        out.append(f"task set: the API path's tasks of {p.tasks} ({len(bill.tasks_seen)} billed)")
    return mapped, out

"""The API bill for the same tasks, rebuilt from per-request `usage`: a JSON-lines file of OpenAI-format responses
(chat completions or Responses API objects), or a gateway's request log whose lines hold such a response or the
token counts themselves. Cache-hit input is priced apart; a request without usage, a task of the set with no
request, or a model without a price is refused, because a bill missing them would understate the API's cost."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

from ...axes.paths.pricing import cached_tokens_of, input_tokens_of, output_tokens_of, token_cost
from ...core.errors import BadInputError
from ..inputs import read_tasks
from .params import Prices, UsageParams
from .provenance import Window
from .tables import Row, RowError, blank, dig, read_rows, row_error, to_time

TIME_KEYS = ("created", "created_at", "timestamp", "startTime", "start_time", "request_time", "time")
WRAPPERS = ("response", "response_body", "body", "result")


@dataclasses.dataclass
class UsageBill:
    currency: str  # the prices' currency
    cost: float = 0.0
    cost_without_cache_price: float = 0.0  # the same tokens with every input token at the input price
    billed: int = 0
    errors: int = 0
    outside: int = 0
    other_tasks: int = 0
    tokens: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))
    cached_reported: int = 0  # billed requests whose usage says how many input tokens hit the cache
    tasks_seen: set[str] = dataclasses.field(default_factory=set)
    rows: int = 0


def _response(row: Row) -> dict[str, Any]:
    for key in WRAPPERS:
        inner = row.get(key)
        if isinstance(inner, dict) and ("usage" in inner or "choices" in inner or "output" in inner):
            return inner
    return row


def _time(row: Row, resp: dict[str, Any]) -> Any:
    for node in (resp, row):
        for key in TIME_KEYS:
            if not blank(node.get(key)):
                return key, node[key]
    raise RowError("created", "no time; expected `created` (epoch seconds) or a timestamp on every line")


def _failed(row: Row, resp: dict[str, Any]) -> bool:
    status = row.get("status_code", row.get("status"))
    return bool(row.get("error") or resp.get("error")) or (isinstance(status, int) and status >= 400)


def _prices(model: str, p: UsageParams) -> Prices:
    got = p.prices.get(model) or p.prices.get("default")
    if got is None:
        raise RowError("model", f"no price for model {model!r}; expected imports.usage.prices.{model or 'default'} "
                                "(or --price-input/--price-output)")
    return got


def api_task_ids(tasks_csv: str | Path) -> set[str]:
    return {t.task_id for t in read_tasks(tasks_csv) if t.path == "api"}


def bill_row(row: Row, p: UsageParams, window: Window, tasks: set[str] | None, bill: UsageBill) -> None:
    resp = _response(row)
    key, value = _time(row, resp)
    try:
        t = to_time(value)
    except ValueError as exc:
        raise RowError(key, str(exc)) from None
    task = None
    if p.task_field:
        task = dig(row, p.task_field)
        task = dig(resp, p.task_field) if blank(task) else task
    if not window.contains(t):
        bill.outside += 1
        return
    if tasks is not None and (blank(task) or str(task) not in tasks):
        bill.other_tasks += 1
        return
    if _failed(row, resp):
        bill.errors += 1  # an error reply is not billed
        return
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else row
    prompt, completion = input_tokens_of(usage), output_tokens_of(usage)
    if prompt is None or completion is None:
        raise RowError("usage", "no prompt/completion token counts in a successful reply; expected usage on every "
                                "billed request (the bill cannot be rebuilt without it)")
    prices = _prices(str(resp.get("model") or row.get("model") or ""), p)
    if prices.currency != bill.currency:
        raise RowError("model", f"priced in {prices.currency}, other models in {bill.currency}; expected one currency")
    cached = cached_tokens_of(usage)
    bill.cost += token_cost(prompt, cached, completion, prices.input_per_mtok, prices.output_per_mtok,
                            prices.cached_input_per_mtok) or 0.0
    bill.cost_without_cache_price += token_cost(prompt, None, completion, prices.input_per_mtok,
                                                prices.output_per_mtok) or 0.0
    bill.billed += 1
    bill.cached_reported += cached is not None
    for name, n in (("input", prompt), ("cached input", min(cached or 0, prompt)), ("output", completion)):
        bill.tokens[name] += n
    if task is not None:
        bill.tasks_seen.add(str(task))


def read_usage(path: str | Path, p: UsageParams, window: Window) -> UsageBill:
    if not p.prices:
        raise BadInputError("no prices; expected --price-input, --price-cached-input and --price-output (per million "
                            "tokens) or imports.usage.prices", source="k3 import usage")
    currencies = {x.currency for x in p.prices.values()}
    if p.tasks and not p.task_field:
        raise BadInputError("a task log but no task field; expected --task-field (e.g. metadata.task_id) naming where "
                            "each line holds its task id", source="k3 import usage")
    tasks = api_task_ids(p.tasks) if p.tasks else None
    rows = read_rows(path, "a JSON-lines file of API responses or a gateway request log", ("data", "results"))
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
    return bill


def notes(bill: UsageBill, p: UsageParams) -> tuple[list[str], list[str]]:
    prices = "; ".join(f"{m}: input {x.input_per_mtok:g}, cached input "
                       f"{'as input' if x.cached_input_per_mtok is None else format(x.cached_input_per_mtok, 'g')}, "
                       f"output {x.output_per_mtok:g} {x.currency}/M tokens" for m, x in sorted(p.prices.items()))
    mapped = ["usage.prompt_tokens − cached → input; cached tokens (prompt_tokens_details.cached_tokens, "
              "cached_tokens or prompt_cache_hit_tokens) → cached input; completion_tokens → output",
              f"prices {prices}"]
    out = [f"{bill.rows} line(s) read; {bill.billed} billed; {bill.errors} error repl(ies) not billed; "
           f"{bill.outside} outside the window; {bill.other_tasks} not of the task set",
           "tokens: " + ", ".join(f"{k} {v}" for k, v in bill.tokens.items()),
           f"{bill.cached_reported} of {bill.billed} billed request(s) report their cache hits",
           f"cost {bill.cost:.2f} {bill.currency}; with cache hits priced as input it would be "
           f"{bill.cost_without_cache_price:.2f} {bill.currency}"]
    if p.tasks:
        out.append(f"task set: the API path's tasks of {p.tasks} ({len(bill.tasks_seen)} billed)")
    return mapped, out

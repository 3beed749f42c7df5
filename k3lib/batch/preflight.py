"""The preflight: before any axis sends a request, is this the target the parameters describe? In seconds.

A wrong key, a `/v1` base URL, a server that is down, a mistyped host, a server of another kind or a model that is
not served would otherwise become a strong, wrong decision after minutes of load (a 401 read as "the engine
failed"). Each is one `BadInputError` line naming the parameter to change, exit 2, before a run folder exists
and before any notebook runs; the whole preflight, its timeouts included, takes at most `BUDGET_S`.

In order: the consent to load a remote target (`target.allow_remote_load`), the host's name (DNS, bounded), the
server root (`/health`), the OpenAI-compatible model list and the key (`/v1/models`), the served model
(`target.model`), the server's kind (`/version`, every `/metrics`: vLLM's, or what they are), and one short
streamed chat request, which proves the chat path and measures the target's speed for the plan's estimate.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..core.errors import BadInputError
from ..core.record import Record
from ..core.guards import is_loopback_url
from .shapes import ServedModelCard

__all__ = ["BUDGET_S", "PreflightReport", "Speed", "preflight", "server_kind"]

BUDGET_S = 9.0  # the whole preflight, timeouts included (the bound is 10 s)
CONNECT_S = 3.0
DNS_S = 3.0
CHAT_TOKENS = 16


@dataclasses.dataclass(frozen=True)
class Speed:
    """How fast the target answered the preflight's chat requests: time to first token and per output token of a
    request alone, and how a request's time grows with concurrency (`sharing`: at `c` streams a request lasts
    `c ** sharing` times longer; 0 a perfectly batching engine, 1 one that serves one at a time)."""

    ttft_s: float
    per_token_s: float
    tokens: int
    sharing: float | None = None  # None: not measured (the estimate then takes 0.5)

    def request_s(self, output_tokens: int) -> float:
        return self.ttft_s + output_tokens * self.per_token_s


class PreflightReport(Record):
    """What the preflight found, as `preflight.json` holds it (`model_dump()`)."""

    base_url: str
    kind: str  # vLLM, SGLang, llama.cpp, OpenAI-compatible (unknown engine)
    version: str | None
    model: str
    max_model_len: int | None
    key: str  # "accepted (VLLM_API_KEY)", "none asked"
    metrics: str
    speed: Speed | None
    notes: tuple[str, ...]
    duration_s: float

    def line(self) -> str:
        served = f"{self.kind}{' ' + self.version if self.version else ''} serving {self.model}"
        if self.max_model_len:
            served += f" (max_model_len {self.max_model_len})"
        chat = "chat path not measured (see the notes)"
        if self.speed:
            chat = "chat path answers"
            sp = self.speed
            chat += (f" ({sp.tokens} tokens in {sp.request_s(sp.tokens):.2f} s"
                     + (f", x{2 ** sp.sharing:.2f} at 2 at once" if sp.sharing is not None else "") + ")")
        return (f"preflight: {self.base_url}: {served}; key {self.key}; {chat}; {self.metrics} "
                f"({self.duration_s:.1f} s)")


class _Clock:
    def __init__(self, budget_s: float) -> None:
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s

    def left(self, cap: float | None = None) -> float:
        left = max(0.1, self.deadline - time.monotonic())
        return min(left, cap) if cap is not None else left

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def check_consent(base_url: str, allow_remote_load: bool) -> None:
    if not allow_remote_load and not is_loopback_url(base_url):
        raise BadInputError(
            f"{base_url} is not on this machine and the agent, capacity and prefix-cache axes send load to it; if "
            "this server may take that load, set `allow_remote_load: true` under `target:` in the parameters file "
            "(or --set target.allow_remote_load=true)", field="target.allow_remote_load")


def check_host(base_url: str, clock: _Clock) -> None:
    """The host resolves, within DNS_S (getaddrinfo cannot be timed out: it runs in a thread that is left)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(socket.getaddrinfo, host, parts.port or (443 if parts.scheme == "https" else 80)).result(
            timeout=clock.left(DNS_S))
    except concurrent.futures.TimeoutError:
        raise BadInputError(f"the name {host!r} did not resolve within {DNS_S:g} s (DNS); check the host name",
                            field="target.base_url") from None
    except (socket.gaierror, UnicodeError, OSError) as exc:
        raise BadInputError(f"unknown host {host!r} ({_reason(exc)}); check the host name in {base_url}",
                            field="target.base_url") from None
    finally:
        pool.shutdown(wait=False)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.split("] ", 1)[-1] if text.startswith("[") else text


def _get(client: httpx.Client, url: str, clock: _Clock, what: str) -> httpx.Response:
    try:
        return client.get(url, timeout=httpx.Timeout(clock.left(), connect=clock.left(CONNECT_S)))
    except httpx.ConnectError as exc:
        raise BadInputError(f"nothing answers at {url} ({_reason(exc)}): is the server running and the port "
                            "right?", field="target.base_url") from None
    except httpx.TimeoutException:
        raise BadInputError(f"{url} gave no answer within {clock.elapsed():.0f} s: the server is still loading its "
                            f"model, hung, or this is not {what}", field="target.base_url") from None
    except httpx.HTTPError as exc:
        raise BadInputError(f"{url}: {type(exc).__name__}: {_reason(exc)}", field="target.base_url") from None


def _refused_key(resp: httpx.Response, url: str, key_env: str | None) -> BadInputError:
    if key_env:
        return BadInputError(f"the server refused the key in ${key_env} (HTTP {resp.status_code} at {url}): put this "
                             "server's key (vllm serve --api-key) in that variable", field="target.api_key_env")
    return BadInputError(f"the server asks for an API key (HTTP {resp.status_code} at {url}): export it in an "
                         "environment variable and name that variable in target.api_key_env",
                         field="target.api_key_env")


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def server_kind(version_resp: httpx.Response | None, metrics_bodies: list[str]) -> str:
    """vLLM, SGLang, llama.cpp or an OpenAI-compatible server of an unknown engine, from /version and /metrics."""
    text = "\n".join(metrics_bodies)
    if "vllm:" in text:
        return "vLLM"
    if "sglang:" in text:
        return "SGLang"
    if "llamacpp:" in text:
        return "llama.cpp"
    body = _json(version_resp) if version_resp is not None and version_resp.status_code == 200 else None
    if isinstance(body, dict) and "version" in body and not metrics_bodies:
        return "vLLM"  # /version answers the vLLM way, its /metrics are not exposed here
    return "an OpenAI-compatible server (engine unknown)"


def _models(client: httpx.Client, base: str, clock: _Clock, key_env: str | None
            ) -> tuple[list[ServedModelCard], int]:
    """The served model cards and /v1/models' status. A 5xx is an engine not ready or dead (the batch judges it),
    anything else without a model list is not an OpenAI-compatible server."""
    url = f"{base}/v1/models"
    resp = _get(client, url, clock, "an OpenAI-compatible server")
    if resp.status_code in (401, 403):
        raise _refused_key(resp, url, key_env)
    body = _json(resp)
    cards = body.get("data") if isinstance(body, dict) else None
    if resp.status_code >= 500:
        return [], resp.status_code
    if resp.status_code != 200 or not isinstance(cards, list):
        what = resp.headers.get("content-type", "no content type").split(";")[0]
        raise BadInputError(f"{url} answers {resp.status_code} ({what}) with no model list: this is not an "
                            "OpenAI-compatible server; point target.base_url at the inference server's root",
                            field="target.base_url")
    cards = [c for c in cards if isinstance(c, dict) and c.get("id")]
    if not cards:
        raise BadInputError(f"{url} lists no model: the server serves nothing yet", field="target.base_url")
    return cards, resp.status_code


def _served(cards: list[ServedModelCard], wanted: str | None, base: str) -> ServedModelCard:
    ids = [str(c["id"]) for c in cards]
    if wanted is None:
        return cards[0]
    if wanted not in ids:
        raise BadInputError(f"model {wanted!r} is not served at {base}; it serves {', '.join(map(repr, ids))}: set "
                            "target.model to one of them", field="target.model")
    return cards[ids.index(wanted)]


def _metrics(client: httpx.Client, urls: tuple[str, ...], clock: _Clock) -> tuple[list[str], str]:
    """Each /metrics body that answered 200, and what they are, in words."""
    bodies, said = [], []
    for url in urls:
        try:
            resp = client.get(url, timeout=httpx.Timeout(clock.left(), connect=clock.left(CONNECT_S)))
        except httpx.HTTPError as exc:
            said.append(f"{url} unreachable ({type(exc).__name__})")
            continue
        if resp.status_code != 200:
            said.append(f"{url} answers {resp.status_code}")
            continue
        bodies.append(resp.text)
    text = "\n".join(bodies)
    if not bodies:
        return bodies, "; ".join(said) or "no /metrics"
    kind = ("vLLM's" if "vllm:" in text else "SGLang's" if "sglang:" in text else
            "llama.cpp's" if "llamacpp:" in text else "Prometheus text without any vllm: series")
    return bodies, f"/metrics {kind}" + (f" ({'; '.join(said)})" if said else "")


def _chat(client: httpx.Client, base: str, model: str, clock: _Clock, key_env: str | None
          ) -> tuple[Speed | None, str | None]:
    """Short streamed chat requests: the first proves the chat path, the second alone gives the speed, two more at
    once how it shares (each only while the budget allows). Only a refused key and a missing chat path are a
    wrong target; a reply that fails otherwise (a 5xx, a broken stream, a slow engine) is the axes' to measure, so
    the run goes on and the estimate uses a default speed: (speed or None, why there is none)."""
    first, why = _timed_chat(client, base, model, clock, key_env)
    if first is None:
        return None, why
    alone, _ = _timed_chat(client, base, model, clock, key_env) if clock.left() > 3 * first[0] else (None, None)
    ttft, total, tokens = alone or first
    per_token = (total - ttft) / (tokens - 1) if tokens > 1 else 0.0
    sharing = None
    if clock.left() > 4 * total:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            pair = list(pool.map(lambda _: _timed_chat(client, base, model, clock, key_env)[0], range(2)))
        if all(p is not None for p in pair) and total > 0:
            grown = max(p[1] for p in pair if p is not None) / total  # type: ignore[index]
            sharing = round(min(1.0, max(0.0, math.log2(max(grown, 1.0)))), 3)
    return Speed(round(ttft, 4), round(per_token, 5), tokens, sharing), None


def _timed_chat(client: httpx.Client, base: str, model: str, clock: _Clock, key_env: str | None
                ) -> tuple[tuple[float, float, int] | None, str | None]:
    """One request: ((first token s, last token s, tokens), None), or (None, why it gave no timing)."""
    url = f"{base}/v1/chat/completions"
    body = {"model": model, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": CHAT_TOKENS,
            "messages": [{"role": "user", "content": "Count from 1 to 20, separated by spaces."}]}
    t0 = time.perf_counter()
    marks: list[float] = []
    tokens = 0
    try:
        with client.stream("POST", url, json=body,
                           timeout=httpx.Timeout(clock.left(), connect=clock.left(CONNECT_S))) as resp:
            if resp.status_code in (401, 403):
                raise _refused_key(resp, url, key_env)
            if resp.status_code == 404:
                raise BadInputError(f"{url} answers 404: no OpenAI-compatible chat path here (or the model "
                                    f"{model!r} is not served on it)", field="target.base_url")
            if resp.status_code != 200:
                resp.read()
                return None, f"the chat request got {resp.status_code} ({resp.text[:120].strip()}): the axes measure it"
            for line in resp.iter_lines():
                tokens = _chat_line(line, marks, tokens)
    except httpx.TimeoutException:
        return None, f"the chat request did not finish within the preflight's {BUDGET_S:g} s"
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"the chat reply broke ({type(exc).__name__}: {_reason(exc)[:120]}): the axes measure it"
    if not marks:
        return None, "the chat reply carried no choices: the axes measure it"
    return (marks[0] - t0, marks[-1] - t0, tokens or len(marks)), None


def _chat_line(line: str, marks: list[float], tokens: int) -> int:
    """One SSE line of the preflight's reply: the time of each chunk with choices, the tokens from usage."""
    if not line.startswith("data:") or line[5:].strip() in ("", "[DONE]"):
        return tokens
    chunk = json.loads(line[5:])
    if not isinstance(chunk, dict):
        raise ValueError("an SSE event that is not a JSON object")
    if chunk.get("choices"):
        marks.append(time.perf_counter())
    usage = chunk.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    return tokens


def preflight(params: Any, base_url: str, metrics_urls: tuple[str, ...], headers: dict[str, str], *,
              budget_s: float = BUDGET_S) -> PreflightReport:
    """Every check above, in order; the first that fails raises one BadInputError line. `params`: the acceptance
    parameters (their target, recipe); `headers`: the target's auth header, read from the environment by the
    caller (`Target.headers()`), never stored here.

    The right server in a bad state is not a wrong target: an engine not ready or dead (/health or /v1/models
    answering 5xx) is noted and the batch judges it (a startup OOM is an `environment-rebuild` with its evidence,
    and `target.restart` may bring it back); only a server of another kind is then still refused."""
    clock = _Clock(budget_s)
    tp, recipe = params.target, params.recipe
    check_consent(base_url, tp.allow_remote_load)
    check_host(base_url, clock)
    notes: list[str] = []
    with httpx.Client(headers=headers, follow_redirects=False) as client:
        health = _get(client, f"{base_url}/health", clock, "an inference server")
        cards, models_status = _models(client, base_url, clock, tp.api_key_env)
        card = _served(cards, tp.model, base_url) if cards else ServedModelCard(id=tp.model or "(not listed)")
        version = _get(client, f"{base_url}/version", clock, "a vLLM server")
        bodies, metrics = _metrics(client, metrics_urls, clock)
        kind = server_kind(version, bodies)
        vbody = _json(version) if version.status_code == 200 else None
        vllm_version = str(vbody["version"]) if isinstance(vbody, dict) and vbody.get("version") else None
        down = health.status_code >= 500 or models_status >= 500
        _check_kind(kind, health, recipe, base_url, notes, engine_down=down)
        speed, why = (None, None) if down else _chat(client, base_url, str(card["id"]), clock, tp.api_key_env)
    if down:
        notes.append(f"the engine is not ready or dead (/health {health.status_code}, /v1/models {models_status}): "
                     "the batch runs and judges it" + (", its capacity axis restarting it with target.restart"
                                                       if tp.restart else "; no target.restart brings it back"))
    if why:
        notes.append(why)
    key = f"accepted (${tp.api_key_env})" if tp.api_key_env else "none asked"
    limit = card.get("max_model_len")
    return PreflightReport(base_url=base_url, kind=kind, version=vllm_version if kind == "vLLM" else None,
                           model=str(card["id"]), max_model_len=limit if isinstance(limit, int) else None, key=key,
                           metrics=metrics, speed=speed, notes=tuple(notes), duration_s=round(clock.elapsed(), 2))


def _check_kind(kind: str, health: httpx.Response, recipe: Any, base_url: str, notes: list[str], *,
                engine_down: bool) -> None:
    """A recipe that asks for vLLM refuses another engine: one that says what it is (its metrics), or, while the
    engine answers, one that does not look like vLLM at all."""
    wants_vllm = bool(recipe.vllm_min or recipe.vllm_max)
    if kind == "vLLM":
        return
    other = kind in ("SGLang", "llama.cpp")
    if wants_vllm and (other or not engine_down):
        raise BadInputError(
            f"{base_url} is not a vLLM server: it looks like {kind} (no vllm: series on /metrics, /health "
            f"{health.status_code}); the recipe {recipe.name!r} asks for vLLM — point target.base_url at the "
            "vLLM server, or use a recipe without vllm_min for another engine", field="target.base_url")
    notes.append(f"not a vLLM server ({kind}): the checks that need vLLM will be not observable" if not engine_down
                 else f"the server does not say what it is while its engine is down ({kind})")

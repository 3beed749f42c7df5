"""The compatibility chain's entry point: `check_environment(ctx)` gathers every source (the configured artifacts,
files or URLs, the server's own answers, local NVML), keeps each as an attachment in the run folder, then applies
the rules (`judge.evaluate`, pure). Fetching is here and only here; a source that cannot be had is recorded with
the reason, never raised.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

import httpx

from ...core.errors import BadInputError
from ...core.session import find_path
from ...io.gpu import NvmlSource
from ...io.metrics import Snapshot
from ...io.metrics.parse import parse_exposition
from .judge import EnvironmentResult, evaluate
from ...core.jsonvalue import JsonObject
from .sources import (
    _TOOL,
    ARTIFACTS,
    ATTACH_DIR,
    EnvironmentSources,
    ServerAnswers,
    SourceText,
    _error_text,
    read_sources,
    server_answers,
    substitute,
)

if TYPE_CHECKING:
    from ...core.session import AxisContext
    from ...io.gpu import GpuSourceInfo

__all__ = ["check_environment", "fetch_text", "gather_sources"]


def check_environment(ctx: "AxisContext") -> EnvironmentResult:
    """Gather every source of the chain (attachments kept in the run folder), then apply the rules."""
    return evaluate(gather_sources(ctx), ctx.params.recipe, ctx.params.axes.environment)


def fetch_text(name: str, value: str | None, base_url: str, client: httpx.Client) -> SourceText:
    """A file path or http(s) URL as text; missing, unreadable or non-2xx is an `error`, never an exception."""
    if not value:
        return SourceText(name, None, error=f"not configured (set axes.environment.{name})")
    location = substitute(value, base_url)
    if location.startswith(("http://", "https://")):
        try:
            resp = client.get(location)
        except httpx.HTTPError as exc:
            return SourceText(name, location, error=f"unreachable: {type(exc).__name__}: {exc}")
        if not 200 <= resp.status_code < 300:
            return SourceText(name, location, error=f"HTTP {resp.status_code} at {location}",
                              status=resp.status_code)
        return SourceText(name, location, resp.text, status=resp.status_code)

    path = find_path(location)
    try:
        return SourceText(name, str(path), path.read_bytes().decode("utf-8", errors="replace"))
    except FileNotFoundError:
        return SourceText(name, str(path), error=f"file not found: {path}")
    except OSError as exc:
        return SourceText(name, str(path), error=f"cannot read {path}: {exc}")


def _get_json(client: httpx.Client, url: str) -> tuple[SourceText, Any]:
    name = url.rsplit("/", 1)[-1]
    try:
        resp = client.get(url)
    except httpx.HTTPError as exc:
        return SourceText(name, url, error=f"unreachable: {type(exc).__name__}: {exc}"), None
    if not 200 <= resp.status_code < 300:
        return SourceText(name, url, resp.text, error=f"HTTP {resp.status_code}: {_error_text(resp.text)}",
                          status=resp.status_code), None
    try:
        return SourceText(name, url, resp.text, status=resp.status_code), resp.json()
    except ValueError:
        return SourceText(name, url, resp.text, error="not JSON", status=resp.status_code), None


def _post(client: httpx.Client, name: str, url: str, body: JsonObject) -> SourceText:
    try:
        resp = client.post(url, json=body)
    except httpx.HTTPError as exc:
        return SourceText(name, url, error=f"unreachable: {type(exc).__name__}: {exc}")
    return SourceText(name, url, resp.text, status=resp.status_code)


def _cache_config(client: httpx.Client, urls: tuple[str, ...]) -> tuple[SourceText, dict[str, str], str | None]:
    kept: list[str] = []
    errors: list[str] = []
    for url in urls:
        try:
            resp = client.get(url)
        except httpx.HTTPError as exc:
            errors.append(f"{url}: unreachable ({type(exc).__name__})")
            continue
        if resp.status_code != 200:
            errors.append(f"{url}: HTTP {resp.status_code}")
            continue
        lines = [ln for ln in resp.text.splitlines() if "cache_config_info" in ln]
        kept.append(f"# {url}\n" + "\n".join(lines))
        if not any(not ln.startswith("#") for ln in lines):
            errors.append(f"{url}: no vllm:cache_config_info series")
            continue
        try:
            labels = Snapshot.from_expositions({url: parse_exposition("\n".join(lines) + "\n")}).cache_config_info()
        except BadInputError as exc:
            errors.append(f"{url}: {exc}")
            continue
        if labels:
            text = "\n\n".join(kept)
            return SourceText("cache_config_info", url, text), labels, url
    kept_text = "\n\n".join(kept) if kept else None
    return SourceText("cache_config_info", ", ".join(urls), kept_text, error="; ".join(errors) or "no metrics URL"), {}, None


def _probe_server(ctx: "AxisContext", client: httpx.Client) -> tuple[dict[str, SourceText], ServerAnswers]:
    """`/version`, `/v1/models`, one tiny chat completion and one auto-tool-choice request: their texts, and what
    they say."""
    base = ctx.target.base_url
    texts: dict[str, SourceText] = {}
    version_src, _ = _get_json(client, f"{base}/version")
    texts["version"] = dataclasses.replace(version_src, name="version")
    models_src, models = _get_json(client, f"{base}/v1/models")
    texts["models"] = dataclasses.replace(models_src, name="models")
    cards = tuple(c for c in (models or {}).get("data", []) if isinstance(c, dict)) if isinstance(models, dict) else ()
    model = ctx.params.target.model or (cards[0].get("id") if cards else None)
    if model is None:
        reason = "no served model to ask (/v1/models gave none)"
        texts["chat"] = SourceText("chat", None, error=reason)
        texts["tool_choice"] = SourceText("tool_choice", None, error=reason)
    else:
        url = f"{base}/v1/chat/completions"
        texts["chat"] = _post(client, "chat", url, {"model": model, "max_tokens": 4, "temperature": 0,
                                                    "messages": [{"role": "user", "content": "Reply with OK."}]})
        texts["tool_choice"] = _post(client, "tool_choice", url, {
            "model": model, "max_tokens": 16, "temperature": 0, "tools": [_TOOL], "tool_choice": "auto",
            "messages": [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]})
    return texts, server_answers(texts)


def _nvml(ctx: "AxisContext") -> "tuple[GpuSourceInfo | None, SourceText]":
    if ctx.params.target.gpu_metrics.source != "nvml":
        return None, SourceText("nvml", None, error="target.gpu_metrics.source is not nvml (kit not on the GPU host)")

    source = NvmlSource()
    try:
        info = source.describe()
    finally:
        source.close()
    text = json.dumps(dataclasses.asdict(info), indent=2)
    return info, SourceText("nvml", info.endpoint, text, error=None if info.available else info.reason)


def gather_sources(ctx: "AxisContext") -> EnvironmentSources:
    """Fetch every configured source and ask the server; keep each raw copy under evidence/environment/."""
    env = ctx.params.axes.environment
    base = ctx.target.base_url
    texts: dict[str, SourceText] = {}
    with httpx.Client(timeout=env.timeout_s, headers=ctx.target.headers()) as client:
        for name in ARTIFACTS:
            texts[name] = fetch_text(name, getattr(env, name), base, client)
        probed, server = _probe_server(ctx, client)
        texts.update(probed)
        cache_src, labels, cache_url = _cache_config(client, ctx.target.metrics_urls)
        texts["cache_config_info"] = cache_src
    nvml, texts["nvml"] = _nvml(ctx)
    texts = {name: _keep(ctx, src) for name, src in texts.items()}
    recipe = ctx.params.recipe
    return read_sources(texts, cache_config=labels, cache_config_endpoint=cache_url, nvml=nvml,
                        declared_image=recipe.image, declared_digest=recipe.image_digest, build=recipe.build,
                        **server)


def _keep(ctx: "AxisContext", src: SourceText) -> SourceText:
    if src.text is None:
        return src
    rel = f"{ATTACH_DIR}/{src.name}.txt"
    ctx.store.write_text(rel, src.text)
    return dataclasses.replace(src, attachment=rel)

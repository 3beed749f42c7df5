"""What the compatibility chain is read from, as data: the configured artifacts (files or URLs), the server's own
answers (`/version`, `/v1/models`, `system_fingerprint`, auto tool choice, `vllm:cache_config_info`), local NVML
and the image reference, each parsed from its text. A source that cannot be had is recorded with the reason, never
raised. Fetching them from the target and the files is `run.py` (`gather_sources`); the rules read them here.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from ...core.errors import ArtifactError, BadInputError
from ...io.metrics import Snapshot
from ...io.metrics.parse import parse_exposition
from ...io.readers.collect_env import CollectEnvReport, parse_collect_env
from ...io.readers.nvidia_smi import NvidiaSmiReport, parse_nvidia_smi
from ...io.readers.vllm_log import VllmLogReport, parse_vllm_log
from ...core.jsonvalue import JsonObject

if TYPE_CHECKING:
    from ...io.gpu import GpuSourceInfo

_Parsed = TypeVar("_Parsed")  # what a reader makes of a source's text

ARTIFACTS = ("collect_env", "nvidia_smi", "server_log", "image_inspect")
ATTACH_DIR = "evidence/environment"
# vLLM's answer to tool_choice "auto" when --enable-auto-tool-choice / --tool-call-parser are missing (0.10–0.33).
AUTO_TOOL_CHOICE_400 = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
_FINGERPRINT_RE = re.compile(r"^vllm-(?P<version>\d[^-\s]*)")
_TOOL: JsonObject = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@dataclasses.dataclass(frozen=True)
class SourceText:
    """One raw source as fetched: its text, or why there is none (`error`), and where the copy was kept."""

    name: str
    location: str | None  # the path or URL after `{base_url}` substitution; None when not configured
    text: str | None = None
    error: str | None = None
    status: int | None = None  # HTTP status when fetched over HTTP
    attachment: str | None = None  # run-folder path of the kept copy

    @property
    def ok(self) -> bool:
        return self.text is not None and self.error is None


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """The image the server runs, from `docker inspect` / `crictl inspect` JSON or from the parameters."""

    reference: str | None
    digest: str | None
    source: str  # "image_inspect" | "parameters"
    created: str | None = None  # the image's (or container's) creation date, when the JSON carries it
    started: str | None = None  # when the container last started (docker State.StartedAt, crictl status.startedAt)


@dataclasses.dataclass(frozen=True)
class ToolChoiceProbe:
    """One chat request with `tools` and `tool_choice: "auto"`: did the server accept it?"""

    outcome: str  # "answered" | "rejected-flags" (vLLM's exact 400) | "error" | "not-run"
    status: int | None = None
    detail: str = ""
    tool_calls: int = 0
    reasoning: bool = False  # the reply carried a reasoning field: a reasoning parser is active
    fingerprint: str | None = None


@dataclasses.dataclass(frozen=True)
class EnvironmentSources:
    """Every proof of the chain, parsed; `texts` keeps the raw copies and why a source is missing."""

    texts: dict[str, SourceText]
    collect_env: CollectEnvReport | None = None
    nvidia_smi: NvidiaSmiReport | None = None
    log: VllmLogReport | None = None
    read_errors: dict[str, str] = dataclasses.field(default_factory=dict)  # source -> ArtifactError text
    api_version: str | None = None  # GET /version
    models: tuple[JsonObject, ...] = ()
    fingerprint: str | None = None  # system_fingerprint of one small chat completion
    chat_reasoning: bool | None = None
    tool_probe: ToolChoiceProbe = ToolChoiceProbe("not-run")
    cache_config: dict[str, str] = dataclasses.field(default_factory=dict)
    cache_config_endpoint: str | None = None
    nvml: "GpuSourceInfo | None" = None
    image: ImageRef | None = None
    build: str = "official"  # declared in parameters: official | custom

    @property
    def fingerprint_version(self) -> str | None:
        m = _FINGERPRINT_RE.match(self.fingerprint or "")
        return m.group("version") if m else None

    def attachment(self, name: str) -> str | None:
        src = self.texts.get(name)
        return src.attachment if src else None

    def located(self, name: str) -> str:
        """`collect_env (http://…/collect_env) → evidence/environment/collect_env.txt`, for proofs."""
        src = self.texts.get(name)
        if src is None:
            return name
        where = f"{name} ({src.location})" if src.location else name
        return f"{where} → {src.attachment}" if src.attachment else where


# ---------------------------------------------------------------------------------------------------------------
# Pure: raw texts and answers in, parsed sources out


def parse_image_inspect(text: str) -> ImageRef:
    """`docker inspect` (container or image), `crictl inspect`, or a plain `{"image": …, "digest": …}` JSON."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ArtifactError(f"not JSON ({exc}); expected `docker inspect` or `crictl inspect` output") from None
    if isinstance(data, list):
        data = data[0] if data and isinstance(data[0], dict) else {}
    if not isinstance(data, dict):
        raise ArtifactError("expected a JSON object (or a list of one) from `docker inspect` / `crictl inspect`")
    ref = digest = created = started = None
    status = data["status"] if isinstance(data.get("status"), dict) else {}
    config = data["Config"] if isinstance(data.get("Config"), dict) else {}
    # crictl inspect: status.image.image is the reference, status.imageRef the repo@sha256 it resolved to
    if status:
        image = status.get("image")
        ref = image.get("image") if isinstance(image, dict) else None
        digest = _digest_of(status.get("imageRef"))
        created = status.get("createdAt")
        started = status.get("startedAt")
    # docker container inspect: Config.Image as started; docker image inspect: RepoTags / RepoDigests
    started_as = config.get("Image")
    if ref is None and isinstance(started_as, str) and not started_as.startswith("sha256:"):
        ref = started_as
    tags = data["RepoTags"] if isinstance(data.get("RepoTags"), list) else []
    ref = ref or (tags[0] if tags else None)
    digests = data["RepoDigests"] if isinstance(data.get("RepoDigests"), list) else []
    digest = digest or next((d for d in map(_digest_of, digests) if d), None)
    # plain shape, e.g. the emulator's /_emulator/state or a hand-written note
    for key in ("image", "image_ref", "reference"):
        if ref is None and isinstance(data.get(key), str):
            ref = data[key]
    for key in ("image_digest", "digest", "imageRef"):
        if digest is None and isinstance(data.get(key), str):
            digest = _digest_of(data[key])
    created = created or (data.get("Created") if isinstance(data.get("Created"), str) else None)
    state = data["State"] if isinstance(data.get("State"), dict) else {}
    started = started if isinstance(started, str) else state.get("StartedAt") if isinstance(
        state.get("StartedAt"), str) else None
    if ref is None and digest is None:
        raise ArtifactError("no image reference in this JSON: expected docker inspect's Config.Image or RepoTags, "
                            "crictl inspect's status.image.image, or an \"image\" key")
    if ref and "@sha256:" in ref:
        ref, _, tail = ref.partition("@")
        digest = digest or "sha256:" + tail.removeprefix("sha256:")
    return ImageRef(reference=ref, digest=digest, source="image_inspect", created=created, started=started)


def _digest_of(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    m = re.search(r"sha256:[0-9a-f]{64}", value)
    return m.group(0) if m else None


def classify_tool_probe(status: int | None, body: str, error: str | None = None) -> ToolChoiceProbe:
    """What one `tool_choice: "auto"` request proves. Only vLLM's exact 400 text means the flags are missing."""
    if error is not None or status is None:
        return ToolChoiceProbe("error", status, error or "no answer")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    # the text arrives JSON-escaped in the body (\"auto\"): compare the decoded message
    if status == 400 and (AUTO_TOOL_CHOICE_400 in _error_text(body) or AUTO_TOOL_CHOICE_400 in body):
        return ToolChoiceProbe("rejected-flags", status, AUTO_TOOL_CHOICE_400)
    if 200 <= status < 300 and isinstance(data, dict):
        choices = data.get("choices") or [{}]
        msg = choices[0].get("message") or {} if isinstance(choices[0], dict) else {}
        calls = msg.get("tool_calls") or []
        reasoning = bool(msg.get("reasoning") or msg.get("reasoning_content"))
        fp = data.get("system_fingerprint")
        return ToolChoiceProbe("answered", status, "", len(calls) if isinstance(calls, list) else 0, reasoning,
                               fp if isinstance(fp, str) else None)
    return ToolChoiceProbe("error", status, _error_text(body))


def _error_text(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:300]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if data.get("message"):  # vLLM 0.10.0's flat error body
            return str(data["message"])[:300]
    return body[:300]


def read_sources(texts: dict[str, SourceText], *, api_version: str | None = None,
                 models: tuple[JsonObject, ...] = (), fingerprint: str | None = None,
                 chat_reasoning: bool | None = None, tool_probe: ToolChoiceProbe = ToolChoiceProbe("not-run"),
                 cache_config: dict[str, str] | None = None, cache_config_endpoint: str | None = None,
                 nvml: "GpuSourceInfo | None" = None, declared_image: str | None = None,
                 declared_digest: str | None = None, build: str = "official") -> EnvironmentSources:
    """Parse the raw texts with the readers; a text that is not what it claims is a read error, kept by name."""
    errors: dict[str, str] = {}

    def read(name: str, reader: Callable[[str], _Parsed]) -> _Parsed | None:
        src = texts.get(name)
        if src is None or not src.ok:
            return None
        assert src.text is not None  # `ok`: the text was fetched
        try:
            return reader(src.text)
        except BadInputError as exc:
            errors[name] = exc.one_line()
            return None

    collect_env = read("collect_env", lambda t: parse_collect_env(t, source="collect_env"))
    nvidia_smi = read("nvidia_smi", lambda t: parse_nvidia_smi(t, source="nvidia_smi"))
    log = read("server_log", parse_vllm_log)
    image = read("image_inspect", parse_image_inspect)
    if declared_image or declared_digest:
        if image is None:
            image = ImageRef(declared_image, declared_digest, "parameters")
    return EnvironmentSources(
        texts=dict(texts), collect_env=collect_env, nvidia_smi=nvidia_smi, log=log, read_errors=errors,
        api_version=api_version, models=tuple(models),
        fingerprint=fingerprint or tool_probe.fingerprint, chat_reasoning=chat_reasoning, tool_probe=tool_probe,
        cache_config=dict(cache_config or {}), cache_config_endpoint=cache_config_endpoint, nvml=nvml,
        image=image, build=build)


def sources_from_texts(build: str = "official", **raw: str | None) -> EnvironmentSources:
    """Sources from strings (tests, `k3 inspect`): keywords are ARTIFACTS names, plus `version` and `fingerprint`."""
    version = raw.pop("version", None)
    fingerprint = raw.pop("fingerprint", None)
    texts = {name: SourceText(name, f"<{name}>", text) if text is not None else
             SourceText(name, None, error="not configured") for name, text in raw.items()}
    return read_sources(texts, api_version=version, fingerprint=fingerprint, build=build)


# ---------------------------------------------------------------------------------------------------------------
# I/O: fetch everything the parameters point at


def substitute(value: str, base_url: str) -> str:
    return value.replace("{base_url}", base_url.rstrip("/"))


class ServerAnswers(TypedDict, total=False):
    """What the server's own answers say (sources.server_answers): `/version`, `/v1/models`, the chat reply and the
    auto-tool-choice probe."""

    api_version: str | None
    models: tuple[JsonObject, ...]
    fingerprint: str | None
    chat_reasoning: bool
    tool_probe: ToolChoiceProbe


def _json_of(src: SourceText | None) -> Any:
    if src is None or src.text is None:
        return None
    try:
        return json.loads(src.text)
    except ValueError:
        return None


def server_answers(texts: dict[str, SourceText]) -> ServerAnswers:
    """Pure: what the server's own answers say (`/version`, `/v1/models`, the chat and tool-choice replies), from
    their texts — as fetched, or as kept in a run folder."""
    out: ServerAnswers = {}
    version = _json_of(texts.get("version")) if texts.get("version") and texts["version"].ok else None
    out["api_version"] = str(version["version"]) if isinstance(version, dict) and version.get("version") else None
    models = _json_of(texts.get("models")) if texts.get("models") and texts["models"].ok else None
    out["models"] = tuple(c for c in (models or {}).get("data", []) if isinstance(c, dict)) \
        if isinstance(models, dict) else ()
    chat = texts.get("chat")
    body = _json_of(chat)
    if isinstance(body, dict) and chat is not None and chat.status == 200:
        fp = body.get("system_fingerprint")
        out["fingerprint"] = fp if isinstance(fp, str) else None
        choice = (body.get("choices") or [{}])[0]
        msg = choice.get("message") or {} if isinstance(choice, dict) else {}
        out["chat_reasoning"] = bool(msg.get("reasoning") or msg.get("reasoning_content"))
    tools = texts.get("tool_choice")
    if tools is None or tools.location is None:
        out["tool_probe"] = ToolChoiceProbe("not-run", None, (tools.error if tools else None) or "not run")
    else:
        out["tool_probe"] = classify_tool_probe(tools.status, tools.text or "", tools.error)
    return out


def cache_config_of(text: str | None) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels from the lines kept of it."""

    if not text:
        return {}
    try:
        return Snapshot.from_expositions({"<kept>": parse_exposition(text)}).cache_config_info()
    except BadInputError:
        return {}


def attachments(sources: EnvironmentSources) -> list[str]:
    return [s.attachment for s in sources.texts.values() if s.attachment]

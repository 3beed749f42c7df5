"""The JSON shapes the kit sends to and reads from an OpenAI-compatible server, and the records io writes of them.

These are `TypedDict`s: they name the keys a dict carries and change nothing at run time (a reply is still the
dict `json.loads` gave). `total=False` where a key may be absent; `JsonObject` for a nested JSON object of its own
(a tool's parameter schema, a template's switches); `Any` where a value is kept as the server sent it, whatever its
type (a tool call's `arguments`, an `id` that should be a string).

- The request: `ChatBody` (what `POST /v1/chat/completions` is sent), its `ChatMessage`s and `ToolDef`s.
- The reply: `ChatCompletion` with its `ChatChoice`s, each holding a `ChatMessage`; `ToolCallJson` is one entry of
  a message's `tool_calls`; `ChatChunk` one `chat.completion.chunk` event of a stream; `Usage` the token counts.
- The records: `AskedFields` (what a request asked, held against what was served); a tool call is the
  `k3lib.io.chatstream.ToolCall` model itself, dumped and read back.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

from typing_extensions import TypedDict as ModelTypedDict

from k3lib.core.jsonvalue import JsonObject

__all__ = ["AskedFields", "ChatBody", "ChatChoice", "ChatChunk", "ChatCompletion", "ChatMessage", "ChunkChoice",
           "ResponsesCall", "ResponsesEvent", "ToolCallFunction", "ToolCallJson", "FunctionDef",
           "ToolDef", "Usage"]


# -- the request ---------------------------------------------------------------------------------------------


class FunctionDef(TypedDict, total=False):
    """A tool's function as offered: its name, what it does, its JSON Schema of parameters."""

    name: Required[str]
    description: str
    parameters: JsonObject  # a JSON Schema
    strict: bool


class ToolDef(TypedDict, total=False):
    """One entry of a request's `tools`: `{"type": "function", "function": {...}}`."""

    type: str
    function: FunctionDef


class ToolCallFunction(TypedDict):
    """A tool call's `function`: the name called and the `arguments` as sent (a JSON string by contract; an
    object, None or a cut string as received)."""

    name: Any
    arguments: Any


class ToolCallJson(TypedDict):
    """One entry of a message's `tool_calls`: `{"id", "type", "function": {"name", "arguments"}}`."""

    id: Any  # a string by contract; kept as received
    type: Any
    function: ToolCallFunction


class ChatMessage(TypedDict, total=False):
    """One message of a conversation: system, user, assistant (with its reasoning and tool calls) or a tool's
    result (`tool_call_id`)."""

    role: Required[str]
    content: Any  # text, None, or a list of content parts
    reasoning: str | None
    reasoning_content: str | None
    tool_calls: list[ToolCallJson]
    tool_call_id: str | None
    name: str


class ChatBody(TypedDict, total=False):
    """What `POST /v1/chat/completions` is sent (the fields the kit uses; a server takes more)."""

    model: str | None  # None until the server's /v1/models named it (a body never leaves with it so)
    messages: Required[list[ChatMessage]]
    max_tokens: int | None
    max_completion_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    stream_options: dict[str, bool]
    tools: list[ToolDef]
    tool_choice: Any  # "auto", "none", "required" or `{"type": "function", "function": {"name": ...}}`
    temperature: float
    top_p: float
    top_k: int
    presence_penalty: float
    frequency_penalty: float
    seed: int
    n: int
    response_format: JsonObject | None  # a schema
    chat_template_kwargs: JsonObject  # the template's own switches
    cache_salt: str
    request_id: str
    user: str


# -- the reply -----------------------------------------------------------------------------------------------


class Usage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int  # Moonshot's (Kimi API) usage puts its cache hits on top
    prompt_tokens_details: dict[str, int] | None
    completion_tokens_details: dict[str, int] | None


class ChatChoice(TypedDict, total=False):
    index: int
    message: ChatMessage
    finish_reason: str | None


class ChatCompletion(TypedDict, total=False):
    """A `chat.completion` (or one a reader rebuilt from chunks or Responses events)."""

    id: str
    object: str
    model: str
    created: int
    system_fingerprint: str | None
    usage: Usage
    choices: list[ChatChoice]


class ChunkChoice(TypedDict, total=False):
    index: int
    delta: ChatMessage
    message: ChatMessage  # some proxies send whole messages in chunks
    finish_reason: str | None


class ChatChunk(TypedDict, total=False):
    """One `chat.completion.chunk` event of a stream (a reader takes any JSON object of a capture as one)."""

    id: str
    object: str
    model: str
    created: int
    system_fingerprint: str | None
    usage: Usage | None
    choices: list[ChunkChoice]


class ResponsesEvent(TypedDict, total=False):
    """One Responses-API streaming event (or a reply's output item framed as one): the keys the reader uses."""

    type: str
    output_index: int
    item_id: str
    item: JsonObject  # an output item
    delta: str
    arguments: Any
    name: str
    response: Any


class ResponsesCall(TypedDict):
    """A function call gathered from Responses-API events, before it becomes a `ToolCallJson`."""

    item_id: Any
    id: Any
    name: Any
    arguments: Any


# -- the records io writes -----------------------------------------------------------------------------------


class AskedFields(ModelTypedDict, total=False):
    """What one chat body asked (`asked_of`): the reply-shaping fields sent, the tools' names, the question's key
    (typing_extensions' TypedDict: a field of the `ChatRecord` model, which pydantic requires before Python 3.12)."""

    max_tokens: int | None
    max_completion_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    temperature: float
    top_p: float
    top_k: int
    seed: int
    n: int
    tool_choice: Any
    stream: bool
    response_format: JsonObject
    tools: list[str]
    prompt_key: str

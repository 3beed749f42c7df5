"""Chat client: one request to an OpenAI-compatible server becomes one frozen `ChatRecord`.

Timing uses `perf_counter_ns` marks plus one wall-clock anchor per request; tokens come from `usage`, never
from chunk counts. Also small probes (`/health`, `/version`, `/v1/models`, `/tokenize`) for the probe axis.

The package, one concept a module: `records` (the values), `stream` (reading a reply without I/O: error bodies,
JSON, the SSE stream), `attempt` (one request while it runs, the streamed-body timing path, the transport-error
map), `access` (the root URL, the key from the environment), `chat` (the async `ChatClient`), `loops` (what a
client opened on a loop, closed when the loop ends), `sync` (`run_sync`, `SyncChatClient` for notebook cells),
`probe` (one absolute URL), `heap` (the collector kept off a measured phase). Every name below is importable from
`k3lib.io.client` as it was before the split.
"""

from __future__ import annotations

from k3lib.io.chatstream import SSEDecoder, ToolCall, ToolCallAssembler

from .access import root_url
from .attempt import TRANSPORT_ERRORS, _Attempt, _read_stream
from .chat import POOL_CONNECTIONS, ChatClient
from .heap import quiet_collector
from .probe import aprobe_endpoint, probe_endpoint
from .records import BODY_TEXT_LIMIT_CHARS, WITHOUT_RAW, ChatRecord, ProbeRecord, TokenizeResult, record_of
from .stream import StreamAssembler, completion_fields, loads_json, parse_error_body
from .sync import SyncChatClient, run_sync

__all__ = [
    "BODY_TEXT_LIMIT_CHARS",
    "POOL_CONNECTIONS",
    "SSEDecoder",
    "TRANSPORT_ERRORS",
    "WITHOUT_RAW",
    "ChatClient",
    "ChatRecord",
    "ProbeRecord",
    "StreamAssembler",
    "SyncChatClient",
    "TokenizeResult",
    "ToolCall",
    "ToolCallAssembler",
    "_Attempt",
    "_read_stream",
    "aprobe_endpoint",
    "completion_fields",
    "loads_json",
    "parse_error_body",
    "probe_endpoint",
    "quiet_collector",
    "record_of",
    "root_url",
    "run_sync",
]

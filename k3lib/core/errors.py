"""The kit's exceptions: one root, translated from foreign errors at the boundary.

    K3Error                      root; the CLI turns anything else into exit 1 (internal error)
     ├── BadInputError           exit 2: a parameter file, CLI argument or artifact is not what it must be
     │    └── ArtifactError      an artifact (log, collect_env report, exposition, CSV…) cannot be read as one
     ├── TargetError             the target did not give what a vLLM/OpenAI-compatible server gives
     │    ├── TargetUnreachable  connection refused, DNS, timeout before any byte
     │    ├── APIError           an HTTP error reply, both vLLM error-body shapes folded into status/type/message
     │    ├── ProtocolError      a reply in an unknown shape: invalid JSON, truncated SSE, missing fields
     │    └── MissingSeriesError a metric the axis needs is absent from every endpoint scraped
     └── EvidenceError           the evidence store is inconsistent (hash mismatch, unreadable record)

Findings about the target (a tool call with bad arguments, a cache that never hits) are *values*, never
exceptions; these classes are for the cases where the kit itself cannot go on.
"""

from __future__ import annotations


class K3Error(Exception):
    """Root of every error the kit raises on purpose."""


class BadInputError(K3Error):
    """Input the user controls is malformed. `source` names the file or argument, `field` the key path."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(message)

    def one_line(self) -> str:
        """The single line the CLI prints: which input, which field, what is wrong and what is expected."""
        where = ": ".join(" ".join(str(p).split()) for p in (self.source, self.field) if p)
        text = " ".join(str(self.message).split())
        return f"{where}: {text}" if where else text

    def __str__(self) -> str:
        # a notebook's traceback (a bad override in the OOM explorer) names the input as the CLI does, not only
        # "unknown key"
        return self.one_line()


class ArtifactError(BadInputError):
    """An artifact file is not what it claims to be (e.g. not a collect_env report at all)."""


class TargetError(K3Error):
    """The target server misbehaved in a way the kit cannot measure around."""


class TargetUnreachable(TargetError):
    pass


class APIError(TargetError):
    """An HTTP error reply. vLLM ≤0.10.0 sends a flat body, 0.10.1+ a nested `{"error": {...}}`; both land here."""

    def __init__(self, status: int, message: str, *, type: str | None = None, param: str | None = None,
                 url: str | None = None) -> None:
        self.status = status
        self.type = type
        self.message = message
        self.param = param
        self.url = url
        super().__init__(f"HTTP {status} {type or ''} from {url or 'target'}: {message}".replace("  ", " "))


class ProtocolError(TargetError):
    """The reply is in a shape the kit does not know (invalid JSON, truncated stream, missing fields)."""


class MissingSeriesError(TargetError):
    """None of the names a metric went by is exposed at the scraped endpoint(s)."""


class EvidenceError(K3Error):
    """The evidence store does not verify or a record cannot be read back."""

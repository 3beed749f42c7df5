"""The JSON shapes the batch reads and writes: a file's entry in the run's manifest, a running notebook's line on
the terminal. TypedDicts: they change nothing at run time."""

from __future__ import annotations

from typing import TypedDict

__all__ = ["ManifestEntry", "ManifestPending", "ServedModelCard"]


class ManifestPending(TypedDict):
    """The new content of a file being rewritten (k3lib.core.store: the manifest names it before the replace)."""

    sha256: str
    bytes: int


class ManifestEntry(TypedDict, total=False):
    """A file's entry in `manifest.json`'s `files` (k3lib.core.store.RunStore)."""

    sha256: str
    bytes: int
    pending: ManifestPending


class ServedModelCard(TypedDict, total=False):
    """One model card of a server's `/v1/models` (OpenAI's list, vLLM's extra fields), as the preflight and
    `k3 init` read it: only `id` is sure (a card without one is dropped)."""

    id: str
    object: str
    created: int
    owned_by: str
    root: str | None
    parent: str | None
    max_model_len: int

"""What `k3 import` writes beside the rows it imports, as `TypedDict`s: a bill's lines listed apart and the
`# k3-import:` meta line naming the import that wrote a file's rows or items."""

from __future__ import annotations

from typing import TypedDict


class ListedApart(TypedDict):
    """A bill's credit, refund or adjustment listed apart, as the import's costs file and meta line carry it."""

    category: str
    service: str
    amount: float
    currency: str
    lines: int


class ImportMeta(TypedDict, total=False):
    """A `# k3-import:` line: which import wrote the file's rows or items, from which source."""

    importer: str
    source: str
    sha256: str
    owns: list[str]
    credits: list[ListedApart]  # a bill's lines listed apart

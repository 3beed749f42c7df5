"""The kit's one version parser: PEP 440 through `packaging`, for every version it reads or compares (vLLM's
`/version`, a recipe's bounds, a collect_env line, an image tag). `0.27.0rc9` is a release candidate of 0.27.0, below
it and below 0.27.1 — never a "9" read from its last digits."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

__all__ = ["InvalidVersion", "Version", "at_least", "parse_version", "public", "release", "same_release"]


def parse_version(text: object) -> Version | None:
    """PEP 440 reading of what vLLM prints (`0.6.3.post2.dev174+g5b8a1fde`, `0.7.2+cpu`, `v0.33.0`); None if it is
    not a version."""
    if text is None:
        return None
    raw = str(text).strip()
    if not raw:
        return None
    try:
        return Version(raw.lstrip("vV"))
    except InvalidVersion:
        return None


def public(version: Version) -> Version:
    """The release without its local tag (`0.33.0+cu130` → 0.33.0): a build tag says nothing of the release."""
    return Version(version.public)


def at_least(version: object, minimum: object) -> bool | None:
    """version ≥ minimum on the public versions; None when either is not a version."""
    v, m = parse_version(version), parse_version(minimum)
    if v is None or m is None:
        return None
    return public(v) >= public(m)


def same_release(a: object, b: object) -> bool | None:
    """Whether two texts name the same public release; None when either is not a version."""
    va, vb = parse_version(a), parse_version(b)
    if va is None or vb is None:
        return None
    return public(va) == public(vb)


def release(text: object) -> tuple[int, ...] | None:
    """The release numbers (`0.10.1.1` → (0, 10, 1, 1); `0.27.0rc9` → (0, 27, 0)) for comparing with a tuple such as
    (0, 12); None when the text is not a version."""
    v = parse_version(text)
    return None if v is None else v.release

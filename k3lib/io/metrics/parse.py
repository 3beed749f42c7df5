"""Prometheus exposition text → samples, tolerant of pasted dumps (grep-filtered, indented, fenced, CRLF, ANSI,
kubectl timestamps, log-collector prefixes); every line it could not read is kept with its number as a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from prometheus_client.parser import text_string_to_metric_families

from k3lib.io.readers._text import numbered_lines

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# A sample at the END of a line, after whatever prefix a paste added. Label values may hold spaces, braces and
# escaped quotes, hence the quoted-string alternative. The name must start after start-of-line or a separator.
_LABEL_BLOCK = r"\{(?:[^\"{}]|\"(?:[^\"\\]|\\.)*\")*\}"
_SAMPLE_AT_END = re.compile(
    r"(?:^|(?<=[\s|\]>]))"
    r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)"
    rf"(?P<labels>{_LABEL_BLOCK})?"
    r"[ \t]+(?P<value>[-+]?(?:[0-9][0-9_.]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|inf|NaN|nan))"
    r"(?:[ \t]+(?P<ts>-?[0-9]+(?:\.[0-9]+)?))?"
    r"[ \t]*$"
)
_HELP_LINE = re.compile(r"#\s*HELP\s")
_TYPE_LINE = re.compile(r"#\s*TYPE\s+(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\s+(?P<type>[a-z]+)\s*$")


@dataclass(frozen=True)
class Sample:
    """One exposed sample. `labels` is read-only; `value` is always a float."""

    name: str
    labels: Mapping[str, str]
    value: float

    def label_key(self, drop: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
        """Sorted label pairs, minus `drop`: the identity of a series across scrapes."""
        return tuple(sorted((k, v) for k, v in self.labels.items() if k not in drop))


@dataclass(frozen=True)
class SkippedLine:
    line_no: int  # 1-based, in the text as given
    line: str
    reason: str


@dataclass(frozen=True)
class Exposition:
    """What was read from one exposition text. `strict` is True when prometheus_client accepted the whole text."""

    samples: tuple[Sample, ...]
    types: Mapping[str, str] = field(default_factory=dict)
    skipped: tuple[SkippedLine, ...] = ()
    strict: bool = True


# Characters a paste may put before every line (a shell comment, a quote, a C comment); never a character a metric
# name or a `# HELP` line starts with once the prefix is gone.
_SHARED_PREFIX = re.compile(r"^(?:#+|>+|//+|;+|--)[ \t]*")


def clean_text(text: str) -> str:
    """Drop ANSI colour codes and carriage returns (CRLF dumps, progress bars), which the strict parser rejects;
    lines numbered as every reader numbers them (`numbered_lines`)."""
    return "\n".join(_ANSI.sub("", line) for _, line in numbered_lines(text))


def shared_prefix(text: str) -> str | None:
    """The comment-like prefix (`# `, `> `, `// `) that every non-blank line carries, or None."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if len(lines) < 2:
        return None
    found = [m.group(0) for ln in lines if (m := _SHARED_PREFIX.match(ln.lstrip()))]
    if len(found) < len(lines):
        return None
    # `# HELP` lines keep their own `#` after the shared one, so the shortest match is the shared part.
    prefix = min(found, key=len)
    return prefix.rstrip() or None


def parse_exposition(text: str) -> Exposition:
    """Parse exposition text; fall back to line-by-line reading when the strict parser rejects the whole.

    A dump saved with a prefix on every line (`# ` as a shell comment, `> ` as a quote) is read without it when
    the text as given holds no sample."""
    cleaned = clean_text(text)
    exposition = _parse_clean(cleaned)
    if exposition.samples:
        return exposition
    prefix = shared_prefix(cleaned)
    if prefix is None:
        return exposition
    unprefixed = "\n".join(_strip_one(ln, prefix) for ln in cleaned.split("\n"))
    retried = _parse_clean(unprefixed)
    return retried if retried.samples or len(retried.types) > len(exposition.types) else exposition


def _strip_one(line: str, prefix: str) -> str:
    body = line.lstrip()
    if not body.startswith(prefix):
        return line
    body = body[len(prefix):]
    return body[1:] if body.startswith(" ") else body


def _parse_clean(cleaned: str) -> Exposition:
    try:
        families = list(text_string_to_metric_families(cleaned))
    except (ValueError, TypeError, IndexError, KeyError):
        # The parser is all-or-nothing (a shell prompt, a Markdown fence or a cut-off last line fails the whole
        # text), so read what each line holds instead.
        return _parse_lines(cleaned)
    samples = [_sample(s.name, s.labels, s.value) for fam in families for s in fam.samples]
    types = {fam.name: fam.type for fam in families if fam.type != "unknown"}
    return Exposition(samples=_dedupe(samples), types=MappingProxyType(types), strict=True)


def _sample(name: str, labels: Mapping[str, str], value: float) -> Sample:
    return Sample(name=name, labels=MappingProxyType(dict(labels)), value=float(value))


def _dedupe(samples: list[Sample]) -> tuple[Sample, ...]:
    # A dump pasted twice must not double every counter: the last occurrence of a series wins.
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
    for s in samples:
        seen[(s.name, s.label_key())] = s
    return tuple(seen.values())


def _parse_lines(text: str) -> Exposition:
    samples: list[Sample] = []
    types: dict[str, str] = {}
    skipped: list[SkippedLine] = []
    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if "#" in line and (m := _TYPE_LINE.search(line)):
            types[m["name"]] = m["type"]
            continue
        if line.startswith("#") or _HELP_LINE.search(line):
            continue  # HELP (its text may end in a number), comments, '# EOF'
        m = _SAMPLE_AT_END.search(line)
        if m is None or m["name"].endswith(":"):
            # A name ending in ':' is prose ("throughput: 5.0"), not a metric.
            skipped.append(SkippedLine(line_no, raw, "not a sample line"))
            continue
        candidate = f"{m['name']}{m['labels'] or ''} {m['value']}\n"
        try:
            fams = list(text_string_to_metric_families(candidate))
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            skipped.append(SkippedLine(line_no, raw, f"unparseable sample: {exc}"))
            continue
        samples.extend(_sample(s.name, s.labels, s.value) for f in fams for s in f.samples)
    return Exposition(samples=_dedupe(samples), types=MappingProxyType(types), skipped=tuple(skipped), strict=False)

"""The HTML pieces the index, its figures and the printed copy share: the page head, a badge, a table, a value with
its unit, one line of text, and an axis' evidence read as its typed model."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

from ..core.numbers import figure
from .pages import PLOTLY_JS, STYLESHEET
from .views import badge

if TYPE_CHECKING:
    from pydantic import BaseModel

esc = html.escape


def page_head(title: str, *, plotly: bool = True) -> str:
    js = (f"<script>window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script><script src='{PLOTLY_JS}'></script>"
          if plotly else "")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<link rel='stylesheet' href='{STYLESHEET}'>{js}</head><body class='k3-index'>")


def _badge(word: Any) -> str:
    return badge(str(word))


def _fmt(value: Any, unit: str = "") -> str:
    """A figure for people (`k3lib.core.numbers.figure`: 1,890 ms, never 1.89e+03 ms)."""

    if value is None:
        return ""
    return figure(value, unit)


_M = TypeVar("_M", bound="BaseModel")


def _typed(run: Any, axis: str, model: type[_M]) -> _M | None:
    """An axis' data as its typed model (k3lib.core.evidence.DATA_MODELS: declared fields only, so a key the axis does
    not write cannot be read by mistake); None when the run has no such record."""
    rec = run.records.get(axis)
    data = rec.typed() if rec is not None else None
    return data if isinstance(data, model) else None


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """Cells are given as markup already (escape what comes from evidence before passing it)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{cls}'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _one_line(text: Any) -> str:
    """The text on one logical line, whole: the page wraps it (a reason is never cut)."""
    return " ".join(str(text or "").split())

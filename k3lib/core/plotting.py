"""Plotly figures that survive offline HTML export: no plotly.js in the notebook, no CDN, no MathJax.

Inside a kernel plotly defaults to `plotly_mimetype`, which nbconvert drops (figures vanish from the HTML);
`notebook_connected` loads plotly.js from a CDN (blank offline). This renderer emits the JSON mimetype for
JupyterLab plus HTML for nbconvert that calls the page's `Plotly`: every report page loads the report folder's one
`plotly.min.js` (k3lib.report.pages), so no notebook carries its own 4.8 MB copy.
"""

from __future__ import annotations


from ._deferred import defer_rfc3987_syntax
from .jsonvalue import JsonObject

RENDERER = "k3_offline"


def _renderer_class() -> type:
    import plotly.io as pio
    from plotly.io._base_renderers import MimetypeRenderer

    class OfflineHtmlRenderer(MimetypeRenderer):
        def to_mimebundle(self, fig_dict: JsonObject) -> dict[str, str]:
            html = pio.to_html(fig_dict, full_html=False, include_plotlyjs=False, include_mathjax=False,
                               validate=False, config={"displaylogo": False})
            return {"text/html": html}

    return OfflineHtmlRenderer


def use_offline_renderer() -> None:
    """Make `fig.show()` / display(fig) export offline; called by the notebooks' first cell, never at import.
    Displaying a figure imports nbformat, hence jsonschema: its costly optional import is deferred here first."""
    defer_rfc3987_syntax()
    import plotly.io as pio

    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = _renderer_class()()
    pio.renderers.default = f"plotly_mimetype+{RENDERER}"

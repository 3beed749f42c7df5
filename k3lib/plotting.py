"""Plotly figures that survive offline HTML export: plotly.js inlined once per kernel, no CDN, no MathJax.

Inside a kernel plotly defaults to `plotly_mimetype`, which nbconvert drops (figures vanish from the HTML);
`notebook_connected` loads plotly.js from a CDN (blank offline). This renderer emits the JSON mimetype for
JupyterLab plus self-contained HTML for nbconvert. plotly copies renderer objects on every `show()`, so the
"plotly.js already emitted" flag lives on the class, not the instance.
"""

from __future__ import annotations

from typing import Any, ClassVar

RENDERER = "k3_offline"


def _renderer_class() -> type:
    import plotly.io as pio
    from plotly.io._base_renderers import MimetypeRenderer

    class OfflineHtmlRenderer(MimetypeRenderer):
        emitted: ClassVar[dict[str, bool]] = {"plotlyjs": False}

        def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, str]:
            first = not OfflineHtmlRenderer.emitted["plotlyjs"]
            OfflineHtmlRenderer.emitted["plotlyjs"] = True
            html = pio.to_html(fig_dict, full_html=False, include_plotlyjs=first, include_mathjax=False,
                               validate=False, config={"displaylogo": False})
            return {"text/html": html}

    return OfflineHtmlRenderer


def use_offline_renderer() -> None:
    """Make `fig.show()` / display(fig) export offline; called by the notebooks' first cell, never at import."""
    import plotly.io as pio

    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = _renderer_class()()
    pio.renderers.default = f"plotly_mimetype+{RENDERER}"

"""Build the self-contained rollout browser page: inline CSS and JS, data in JSON script tags.

Each tree's body sits in its own ``<script type="application/json">`` tag, so the browser only parses
the trees a person opens; the page never fetches anything.
"""

from __future__ import annotations

import json
import math
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from matpo_graph.viz.show_data import ShowData

__all__ = ["script_json", "show_page", "write_show_page"]

# Any script error lands in #errors, where people (and tests) can see it.
_ERROR_SINK = """<script>
(function(){function show(msg){var e=document.getElementById('errors');if(!e)return;e.hidden=false;
e.textContent+=(e.textContent?'\\n':'')+msg;}
window.addEventListener('error',function(ev){
show('error: '+(ev.message||ev.type)+(ev.filename?' ('+ev.filename+':'+ev.lineno+')':''));});
window.addEventListener('unhandledrejection',function(ev){show('unhandled rejection: '+ev.reason);});})();
</script>"""

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def script_json(obj: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' (so no '</script>'), no NaN."""
    try:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, esc in _ESCAPES.items():
        text = text.replace(raw, esc)
    return text


def _asset(name: str) -> str:
    return resources.files("matpo_graph.viz").joinpath(name).read_text(encoding="utf-8")


def show_page(data: ShowData, *, title: str | None = None) -> str:
    """The whole HTML document as a string."""
    s = data.summary
    title = title or ("Rollouts" + (f" · step {s['step']}" if s.get("step") is not None else "") + " · matpo-graph")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No network at view time: only inline scripts/styles and data: images may load.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{escape(title)}</title>",
        f"<style>{_asset('show.css')}</style>",
        "</head><body>",
        _ERROR_SINK,
        '<div id="errors" hidden></div>',
        '<header class="top" id="top"></header>',
        '<main><div class="controls" id="controls"></div><div id="groups"></div></main>',
        f'<script type="application/json" id="matpo-summary">{script_json(s)}</script>',
    ]
    for i, body in enumerate(data.bodies):
        parts.append(f'<script type="application/json" id="matpo-tree-{i}">{script_json(body)}</script>')
    parts.append(f"<script>{_asset('show.js')}</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_show_page(data: ShowData, out: str | Path) -> Path:
    """Write the page; lone surrogates in model text are kept as JSON escapes rather than failing."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(show_page(data).encode("utf-8", "backslashreplace"))
    return out

"""One page of the embedded web: its content, and the HTML the server sends for it."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

__all__ = ["Page", "render_html"]


@dataclass
class Page:
    """A page's content; HTML is rendered on demand from it."""

    slug: str
    title: str
    kind: str
    hatnote: str = ""
    paragraphs: list[list[str]] = field(default_factory=list)
    infobox: list[tuple[str, str, str | None]] = field(default_factory=list)
    see_also: list[tuple[str, str]] = field(default_factory=list)

    @property
    def sentences(self) -> list[str]:
        return [s for para in self.paragraphs for s in para]

    @property
    def text(self) -> str:
        """Plain text used for indexing and snippets."""
        box = " ".join(f"{label}: {value}." for label, value, _ in self.infobox)
        return " ".join([self.hatnote, *self.sentences, box]).strip()


def render_html(page: Page) -> str:
    """A complete HTML document for `page` (links are site-relative)."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(page.title)}</title></head>",
        '<body><nav><a href="/">Embedded Encyclopedia</a> | <a href="/search?q=">Search</a></nav>',
        f"<main><h1>{esc(page.title)}</h1>",
    ]
    if page.hatnote:
        parts.append(f'<p class="hatnote"><i>{esc(page.hatnote)}</i></p>')
    parts.append('<table class="infobox">')
    for label, value, target in page.infobox:
        cell = f'<a href="/page/{target}">{esc(value)}</a>' if target else esc(value)
        parts.append(f"<tr><th>{esc(label)}</th><td>{cell}</td></tr>")
    parts.append("</table>")
    for para in page.paragraphs:
        parts.append(f"<p>{esc(' '.join(para))}</p>")
    if page.see_also:
        parts.append("<h2>See also</h2><ul>")
        parts.extend(f'<li><a href="/page/{slug}">{esc(name)}</a></li>' for slug, name in page.see_also)
        parts.append("</ul>")
    parts.append("</main><footer>All names on this site are fictional.</footer></body></html>")
    return "\n".join(parts)

"""HTML to clean text (or light markdown) with selectolax's lexbor parser: what a model should read."""

from __future__ import annotations

import re
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser, LexborNode

__all__ = ["html_to_text"]

_DROP = ("script", "style", "noscript", "svg", "iframe", "template", "canvas", "form", "button",
         "select", "input", "textarea", "nav", "footer", "object", "embed", "head", "link", "meta")
_BLOCK = frozenset({
    "p", "div", "section", "article", "main", "header", "aside", "blockquote", "pre", "figure", "figcaption",
    "ul", "ol", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "caption", "address", "details",
    "summary", "hr", "body", "html",
})
_LINE_ITEMS = frozenset({"tr", "dt", "dd"})
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_ANY_SPACE = re.compile(r"\s+")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANKS = re.compile(r"\n{3,}")


def _title(tree: LexborHTMLParser) -> str:
    for selector in ("title", "h1"):
        node = tree.css_first(selector)
        if node is not None:
            text = " ".join(node.text(deep=True).split())
            if text:
                return text
    return ""


def _render(root: LexborNode, markdown: bool, base_url: str) -> str:
    """Walk the tree iteratively (deep documents must not hit the recursion limit)."""
    out: list[str] = []
    stack: list[tuple[LexborNode, bool]] = [(root, False)]
    in_pre = 0
    while stack:
        node, leaving = stack.pop()
        tag = node.tag or ""
        if leaving:
            if tag == "pre":
                in_pre -= 1
            if tag in _HEADINGS or (tag in _BLOCK and tag not in _LINE_ITEMS):
                out.append("\n\n")
            elif tag in ("td", "th"):
                out.append(" | ")
            elif tag == "a" and markdown:
                href = (node.attributes.get("href") or "").strip()
                if href and not href.startswith(("javascript:", "#", "data:")):
                    out.append(f"]({urljoin(base_url, href) if base_url else href})")
                else:
                    out.append("]")
            elif tag in ("b", "strong") and markdown:
                out.append("**")
            continue
        if tag == "-text":
            text = node.text_content or ""
            out.append(text if in_pre else _ANY_SPACE.sub(" ", text))
            continue
        if tag in ("-comment", "!doctype") or tag in _DROP:
            continue
        if tag == "br":
            out.append("\n")
            continue
        if tag in _HEADINGS:
            out.append("\n\n" + ("#" * _HEADINGS[tag] + " " if markdown else ""))
        elif tag == "li":
            out.append("\n- ")
        elif tag in _LINE_ITEMS:
            out.append("\n")
        elif tag in _BLOCK:
            out.append("\n\n")
        elif tag == "a" and markdown:
            out.append("[")
        elif tag in ("b", "strong") and markdown:
            out.append("**")
        if tag == "pre":
            in_pre += 1
        stack.append((node, True))
        children = list(node.iter(include_text=True))
        for child in reversed(children):
            stack.append((child, False))
    return "".join(out)


def _tidy(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        line = _SPACES.sub(" ", line).strip()
        line = line.strip("|").strip() if line.endswith("|") else line
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r"\[\s*\]\([^)]*\)", "", text)
    return _BLANKS.sub("\n\n", text).strip()


def html_to_text(html: str, *, markdown: bool = False, base_url: str = "") -> tuple[str, str]:
    """Return (title, text) of an HTML document; scripts, styles, navigation and forms are dropped.

    Args:
        html: the document (possibly cut short; the parser recovers).
        markdown: render headings as '#', list items as '- ', links as [text](href), bold as **.
        base_url: makes relative link targets absolute (markdown only).
    """
    tree = LexborHTMLParser(html)
    title = _title(tree)
    root = tree.body or tree.root
    if root is None:
        return title, ""
    return title, _tidy(_render(root, markdown, base_url))

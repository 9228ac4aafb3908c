"""HTML to text: structure kept as lines, noise dropped, deep or broken documents survive."""

from __future__ import annotations

from matpo_graph.tools.htmltext import html_to_text

DOC = """<html><head><title> The  Title </title><script>var x = 1;</script></head><body>
<nav>Menu</nav><h1>Heading</h1>
<table>
<tr><th>A</th><td>1</td></tr>
<tr><th>B</th><td><a href="/x">two</a></td></tr>
</table>
<p>Some   text
 across lines.</p>
<ul>
<li>one</li>
<li>two</li>
</ul><form><input value="secret"></form><footer>bye</footer></body></html>"""


def test_htmltext_plain_structure():
    title, text = html_to_text(DOC)
    assert title == "The Title"
    assert text == "Heading\n\nA | 1\nB | two\n\nSome text across lines.\n\n- one\n- two"


def test_htmltext_markdown_absolute_links():
    _, text = html_to_text(DOC, markdown=True, base_url="http://site.test/dir/page")
    assert text.startswith("# Heading")
    assert "B | [two](http://site.test/x)" in text


def test_htmltext_survives_deep_nesting_and_truncation():
    deep = "<div>" * 5000 + "deep text" + "</div>" * 5000
    assert html_to_text(deep)[1] == "deep text"
    title, text = html_to_text("<html><head><title>Cut</title></head><body><p>half a sent")
    assert title == "Cut" and text == "half a sent"


def test_htmltext_title_falls_back_to_h1():
    assert html_to_text("<body><h1>Only heading</h1><p>x</p></body>")[0] == "Only heading"

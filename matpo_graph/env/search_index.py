"""BM25 search over the world's pages with an in-memory tantivy index, answered in Serper's shape."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tantivy

if TYPE_CHECKING:
    from matpo_graph.env.pages import Page

__all__ = ["SearchHit", "SearchIndex"]

_WORD = re.compile(r"[A-Za-z0-9]+")
_STOP = frozenset("a an and are as at be by for from in is it of on or the to was were what when where which who "
                  "whom whose why how did does do this that with".split())
_SNIPPET_CHARS = 240


@dataclass(frozen=True)
class SearchHit:
    slug: str
    title: str
    score: float
    snippet: str


def _terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def _snippet(page: "Page", terms: list[str]) -> str:
    """The one or two sentences sharing most words with the query, in page order."""
    wanted = set(terms)
    sentences = [page.hatnote, *page.sentences] if page.hatnote else page.sentences
    scored = []
    for i, sentence in enumerate(sentences):
        words = set(_WORD.findall(sentence.lower()))
        scored.append((len(words & wanted), -i, sentence))
    best = sorted(scored, reverse=True)[:2]
    picked = [s for _, _, s in sorted(best, key=lambda t: -t[1]) if s]
    text = " ".join(picked)
    return text if len(text) <= _SNIPPET_CHARS else text[: _SNIPPET_CHARS - 3].rsplit(" ", 1)[0] + "..."


class SearchIndex:
    """Index built once from pages (single-threaded writer: document order = page order, stable)."""

    def __init__(self, pages: dict[str, "Page"]) -> None:
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("title", stored=False, tokenizer_name="en_stem")
        builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
        builder.add_integer_field("doc", stored=True, fast=True)
        self._index = tantivy.Index(builder.build())
        self._pages = list(pages.values())
        writer = self._index.writer(heap_size=64_000_000, num_threads=1)
        for i, page in enumerate(self._pages):
            writer.add_document(tantivy.Document(title=page.title, body=page.text, doc=i))
        writer.commit()
        writer.wait_merging_threads()
        self._index.reload()
        self._searcher = self._index.searcher()

    def __len__(self) -> int:
        return len(self._pages)

    def search(self, query: str, num: int = 10) -> list[SearchHit]:
        """Top `num` pages for `query`; ties are broken by page order, so results are deterministic."""
        terms = _terms(query)
        if not terms or num <= 0:
            return []
        parsed = self._index.parse_query(" ".join(terms), ["title", "body"], field_boosts={"title": 2.0})
        result = self._searcher.search(parsed, limit=num + 10, count=False)
        ranked = sorted(((round(score, 5), self._searcher.doc(addr)["doc"][0]) for score, addr in result.hits),
                        key=lambda t: (-t[0], t[1]))
        hits = []
        for score, doc in ranked[:num]:
            page = self._pages[doc]
            hits.append(SearchHit(page.slug, page.title, float(score), _snippet(page, terms)))
        return hits

    def page_at(self, i: int) -> "Page":
        return self._pages[i % len(self._pages)]

    @staticmethod
    def organic(hits: list[SearchHit], base_url: str) -> list[dict[str, Any]]:
        """Serper's `organic` list for `hits`, with absolute links under `base_url`."""
        return [{"title": h.title, "link": f"{base_url}/page/{h.slug}", "snippet": h.snippet, "position": i}
                for i, h in enumerate(hits, 1)]

"""One encyclopedia-style page per entity: facts stated in varied sentences, an infobox and links."""

from __future__ import annotations

import random
from collections import defaultdict

from matpo_graph.env.entities import Entity, World
from matpo_graph.env.page import Page, render_html
from matpo_graph.env.relations import INFOBOX_LABELS, RELATIONS

__all__ = ["Page", "build_pages", "render_html"]

# How a page mentions facts pointing AT its entity: {n} is the page's entity, {x} a list of subjects.
_INVERSE = {
    "written_by": "Among the works of {n} is {x}.",
    "published_by": "{n} has published {x}.",
    "born_in": "People born in {n} include {x}.",
    "works_for": "Staff of {n} have included {x}.",
    "founded_by": "{n} is also remembered as the founder of {x}.",
    "headquartered_in": "{n} is home to the headquarters of {x}.",
    "located_in": "Cities of {n} include {x}.",
    "capital": "{n} is the capital of {x}.",
    "mayor": "{n} also serves as mayor of {x}.",
}
_LEADS = {
    "person": ("{n} was {a} {sub}.", "{n} is remembered as {a} {sub}."),
    "work": ("{n} is {a} {sub}.", "{n} is a well-known {sub}."),
    "organisation": ("{n} is {a} {sub}.", "{n} is an established {sub}."),
    "city": ("{n} is a city.", "{n} is a town that grew into a city."),
    "country": ("{n} is a country.", "{n} is a sovereign country."),
}
_FILLER = (
    "Little is recorded about the early history of {n}.",
    "Several archives hold letters and papers concerning {n}.",
    "The reputation of {n} has changed considerably over the decades.",
    "Scholars continue to debate the significance of {n}.",
    "A short description of {n} appears in several regional guides.",
    "Many accounts of {n} were written long after the events they describe.",
    "Some details about {n} remain uncertain.",
)
_SKIP_IN_PROSE = {"person": "occupation", "work": "genre"}  # already stated by the lead sentence


def _article(word: str) -> str:
    """'a' or 'an' by sound, good enough for the vocabulary used here."""
    w = word.lower()
    if w.startswith(("uni", "use", "eu", "one")):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


def _join(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _page(world: "World", e: "Entity", rng: random.Random, inverse: dict[int, dict[str, list[int]]]) -> Page:
    page = Page(e.slug, e.name, e.kind)
    ents = world.entities
    if e.twin_of is not None:
        page.hatnote = f"This page is about {e.name}. For the similarly named {e.kind}, see {ents[e.twin_of].name}."
    sub = e.subkind or e.kind
    lead = rng.choice(_LEADS[e.kind]).format(n=e.name, sub=sub, a=_article(sub))
    facts = []
    for rel_name in sorted(e.facts):
        rel = RELATIONS[rel_name]
        value = world.fact_text(e, rel_name)
        target = ents[int(e.facts[rel_name])].slug if rel.target else None
        page.infobox.append((INFOBOX_LABELS[rel_name], value, target))
        if rel_name != _SKIP_IN_PROSE.get(e.kind):
            facts.append(rng.choice(rel.sentences).format(s=e.name, o=value, a=_article(value)))
        if target:
            page.see_also.append((target, value))
    rng.shuffle(facts)
    mentions = []
    for rel_name, subjects in sorted(inverse.get(e.id, {}).items()):
        names = [ents[i].name for i in sorted(subjects)[:3]]
        mentions.append(_INVERSE[rel_name].format(n=e.name, x=_join(names)))
        page.see_also.extend((ents[i].slug, ents[i].name) for i in sorted(subjects)[:3])
    filler = [f.format(n=e.name) for f in rng.sample(_FILLER, k=2)]
    cut = rng.randint(1, max(1, len(facts)))
    page.paragraphs = [p for p in ([lead, *facts[:cut]], [*facts[cut:], filler[0]], [*mentions, filler[1]]) if p]
    seen: set[str] = set()
    page.see_also = [(s, n) for s, n in page.see_also if not (s in seen or seen.add(s))]
    return page


def build_pages(world: "World", rng: random.Random) -> dict[str, Page]:
    """Pages for every entity, in entity order."""
    inverse: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for e in world.entities:
        for rel_name, value in e.facts.items():
            if RELATIONS[rel_name].target:
                inverse[int(value)][rel_name].append(e.id)
    return {e.slug: _page(world, e, rng, inverse) for e in world.entities}

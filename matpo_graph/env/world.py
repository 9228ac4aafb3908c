"""The embedded world: fictional entities with typed facts, their pages, and multi-hop questions.

Everything is derived from one integer seed through `random.Random` instances seeded with strings
(stable across processes and Python hash seeds); iteration orders are fixed, so the same seed gives
byte-identical pages and question files.
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING

from matpo_graph.env.entities import Entity, World
from matpo_graph.env.names import NameForge
from matpo_graph.env.pages import build_pages
from matpo_graph.env.questions import compose_questions, split_questions

if TYPE_CHECKING:
    pass

__all__ = ["DEFAULT_ENTITIES", "DEFAULT_QUESTIONS", "Entity", "World", "build_world"]

DEFAULT_ENTITIES = 2000
DEFAULT_QUESTIONS = 1200
GENERATOR_VERSION = 1

_OCCUPATIONS = ("cartographer", "chemist", "poet", "architect", "astronomer", "composer", "engineer", "botanist",
                "historian", "painter", "physician", "sculptor", "linguist", "shipwright", "glassblower", "judge")
_GENRES = ("novel", "poetry collection", "opera", "treatise", "travelogue", "play", "chronicle", "atlas",
           "song cycle", "memoir")
_CURRENCY_UNITS = ("crown", "mark", "florin", "shell", "talent", "dram")
_SHARES = {"person": 0.38, "city": 0.20, "country": 0.03, "organisation": 0.19}


def _slugify(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "page"
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def _counts(n_entities: int, twin_rate: float) -> dict[str, int]:
    twins = int(n_entities * twin_rate)
    base = max(5, n_entities - twins)
    counts = {kind: max(1, int(base * share)) for kind, share in _SHARES.items()}
    counts["country"] = max(2, counts["country"])
    counts["city"] = max(counts["country"], counts["city"])
    counts["work"] = max(1, base - sum(counts.values()))
    counts["twins"] = max(0, n_entities - sum(counts.values()))
    return counts


class _Builder:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.names = NameForge(random.Random(f"{seed}:names"))
        self.rng = random.Random(f"{seed}:facts")
        self.entities: list[Entity] = []
        self.slugs: set[str] = set()
        self.by_kind: dict[str, list[int]] = {}

    def add(self, kind: str, name: str, subkind: str = "", twin_of: int | None = None) -> Entity:
        entity = Entity(len(self.entities), kind, name, _slugify(name, self.slugs), subkind, twin_of=twin_of)
        self.entities.append(entity)
        self.by_kind.setdefault(kind, []).append(entity.id)
        return entity

    def pick(self, kind: str, *, avoid: int | str | None = None) -> int:
        pool = self.by_kind[kind]
        choice = self.rng.choice(pool)
        if avoid is not None and len(pool) > 1:
            while choice == avoid:
                choice = self.rng.choice(pool)
        return choice

    def currency(self) -> str:
        return f"{self.names.word(2)} {self.rng.choice(_CURRENCY_UNITS)}"

    def fill_facts(self, e: Entity, like: Entity | None = None) -> None:
        """Draw e's facts; for a twin (`like` given) every related entity differs from the original's."""
        rng = self.rng

        def other(rel: str, kind: str) -> int:
            return self.pick(kind, avoid=like.facts.get(rel) if like else None)

        if e.kind == "person":
            e.facts["born_in"] = other("born_in", "city")
            e.facts["birth_year"] = rng.randint(1650, 1960)
            e.facts["occupation"] = e.subkind
        elif e.kind == "city":
            e.facts["located_in"] = other("located_in", "country")
            e.facts["settled_year"] = rng.randint(700, 1800)
        elif e.kind == "country":
            e.facts["currency"] = self.currency()
        elif e.kind == "organisation":
            founder = other("founded_by", "person")
            e.facts["founded_by"] = founder
            e.facts["headquartered_in"] = other("headquartered_in", "city")
            e.facts["founded_year"] = int(self.entities[founder].facts.get("birth_year", 1700)) + rng.randint(22, 60)
        elif e.kind == "work":
            author = other("written_by", "person")
            e.facts["written_by"] = author
            presses = [i for i in self.by_kind["organisation"] if self.entities[i].subkind == "press"]
            pub = rng.choice(presses) if presses and rng.random() < 0.7 else self.pick("organisation")
            e.facts["published_by"] = pub
            e.facts["publication_year"] = int(self.entities[author].facts.get("birth_year", 1700)) + rng.randint(20, 70)
            e.facts["genre"] = e.subkind

    def spread_countries(self) -> None:
        """Put the i-th city in the i-th country, so that every country has a city to be its capital."""
        for country, city in zip(self.by_kind["country"], self.by_kind["city"]):
            self.entities[city].facts["located_in"] = country

    def fill_late_facts(self, e: Entity, like: Entity | None = None) -> None:
        """Facts that need every kind to exist first (employers, mayors, capitals)."""
        if e.kind == "person":
            e.facts["works_for"] = self.pick("organisation", avoid=like.facts.get("works_for") if like else None)
        elif e.kind == "city":
            e.facts["mayor"] = self.pick("person", avoid=like.facts.get("mayor") if like else None)
        elif e.kind == "country":
            mine = [i for i in self.by_kind["city"] if self.entities[i].facts.get("located_in") == e.id]
            e.facts["capital"] = self.rng.choice(mine)  # never empty: see _Builder.spread_countries


def _aliases(e: Entity) -> list[str]:
    if e.kind == "person":
        given, _, family = e.name.partition(" ")
        return [f"{given[0]}. {family}"] if family else []
    if e.kind == "work" and e.name.startswith("The "):
        return [e.name[4:]]
    return []


def build_world(seed: int = 0, n_entities: int = DEFAULT_ENTITIES, n_questions: int = DEFAULT_QUESTIONS, *,
                twin_rate: float = 0.12, hops: tuple[int, ...] = (1, 2, 3, 4),
                splits: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> World:
    """Build the world of `seed`.

    Args:
        seed: the only source of randomness.
        n_entities: number of entities (= pages), twins (confusable distractors) included.
        n_questions: questions to compose over all splits (fewer if the world is too small).
        twin_rate: share of entities that are similar-named distractors with different facts.
        hops: chain lengths to compose, spread evenly.
        splits: train/dev/test shares.
    """

    if n_entities < 10:
        raise ValueError(f"n_entities must be at least 10, got {n_entities}")
    b = _Builder(seed)
    counts = _counts(n_entities, twin_rate)
    for _ in range(counts["country"]):
        b.add("country", b.names.country())
    for _ in range(counts["city"]):
        b.add("city", b.names.city())
    for _ in range(counts["person"]):
        b.add("person", b.names.person(), subkind=b.rng.choice(_OCCUPATIONS))
    city_names = [b.entities[i].name for i in b.by_kind["city"]]
    for _ in range(counts["organisation"]):
        name, kind = b.names.organisation(b.rng.choice(city_names))
        b.add("organisation", name, subkind=kind)
    for _ in range(counts["work"]):
        b.add("work", b.names.work(), subkind=b.rng.choice(_GENRES))
    originals = list(b.entities)
    for kind in ("country", "city", "person", "organisation", "work"):
        for i in b.by_kind[kind]:
            b.fill_facts(b.entities[i])
    b.spread_countries()
    for kind in ("country", "city", "person", "organisation", "work"):
        for i in b.by_kind[kind]:
            b.fill_late_facts(b.entities[i])
    twin_sources = [e for e in originals if e.kind != "country"]
    made = 0
    for source in b.rng.sample(twin_sources, len(twin_sources)):
        if made >= counts["twins"]:
            break
        name = b.names.twin_of(source.name)
        if name is None:  # e.g. a title made only of English words
            continue
        made += 1
        twin = b.add(source.kind, name, subkind=b.rng.choice(_GENRES if source.kind == "work" else _OCCUPATIONS)
                     if source.kind in ("work", "person") else source.subkind, twin_of=source.id)
        b.fill_facts(twin, like=source)
        b.fill_late_facts(twin, like=source)
    for e in b.entities:
        e.aliases = _aliases(e)
    params = {"n_entities": n_entities, "n_questions": n_questions, "twin_rate": twin_rate, "hops": list(hops),
              "splits": list(splits)}
    world = World(seed, b.entities, {e.slug: e for e in b.entities}, {}, {}, params)
    world.pages = build_pages(world, random.Random(f"{seed}:pages"))
    items = compose_questions(world, random.Random(f"{seed}:questions"), n_questions, hops)
    world.questions = split_questions(items, random.Random(f"{seed}:splits"), splits)
    return world

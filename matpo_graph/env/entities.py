"""The embedded world's data: entities with typed facts, their pages and question splits.

Only types live here, so that the builders of pages and questions can use them without importing the
world's builder (which imports them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from matpo_graph.env.page import Page, render_html
from matpo_graph.env.relations import RELATIONS

if TYPE_CHECKING:
    from matpo_graph.data.qa import QAItem

__all__ = ["Entity", "World"]


@dataclass
class Entity:
    """One thing in the world. `facts` maps relation name -> entity id (relations) or value (attributes)."""

    id: int
    kind: str
    name: str
    slug: str
    subkind: str = ""
    facts: dict[str, int | str] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)
    twin_of: int | None = None


@dataclass
class World:
    """Entities, pages (by slug) and question splits of one seed."""

    seed: int
    entities: list[Entity]
    by_slug: dict[str, Entity]
    pages: dict[str, Page]
    questions: dict[str, list["QAItem"]]
    params: dict[str, Any] = field(default_factory=dict)
    """The build_world arguments (recorded in exports)."""

    def entity(self, ref: int | str) -> Entity:
        return self.entities[ref] if isinstance(ref, int) else self.by_slug[ref]

    def fact_text(self, entity: Entity, relation: str) -> str:
        """The value of a fact as a string (an entity's name for relations)."""
        value = entity.facts[relation]
        return self.entities[value].name if RELATIONS[relation].target else str(value)

    def page_html(self, slug: str) -> str:
        return render_html(self.pages[slug])

    def fingerprint(self) -> str:
        """sha256 over all page texts and questions: equal fingerprints mean equal worlds."""
        digest = hashlib.sha256()
        for slug in sorted(self.pages):
            digest.update(self.page_html(slug).encode("utf-8"))
        for split in sorted(self.questions):
            for item in self.questions[split]:
                digest.update(item.model_dump_json().encode("utf-8"))
        return digest.hexdigest()

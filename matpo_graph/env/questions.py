"""Multi-hop questions composed from relation chains of the embedded world (MuSiQue-style).

A chain e0 -r1-> e1 -r2-> ... -rk-> answer becomes one question by nesting noun phrases
("In which city was the founder of the publisher of X born?") and a decomposition of k sub-questions,
where sub-question i refers to the answer of i-1 as '#(i-1)' (as MuSiQue does) and also comes resolved.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from matpo_graph.data.qa import QAItem
from matpo_graph.env.entities import Entity, World
from matpo_graph.env.relations import INFOBOX_LABELS, RELATIONS, Relation, relations_from

__all__ = ["asked_relation", "asked_page_kind", "compose_questions", "hop_count", "split_questions", "within_hops"]


def _chain(world: "World", rng: random.Random, hops: int) -> tuple[list["Entity"], list[Relation]] | None:
    start = rng.choice(world.entities)
    entities, relations = [start], []
    for i in range(hops):
        current = entities[-1]
        last = i == hops - 1
        options = [r for r in relations_from(current.kind, entity_only=not last)
                   if r.is_attribute or int(current.facts[r.name]) not in {e.id for e in entities}]
        if not options:
            return None
        rel = rng.choice(options)
        relations.append(rel)
        if not rel.is_attribute:
            entities.append(world.entities[int(current.facts[rel.name])])
    return entities, relations


def _item(world: "World", rng: random.Random, entities: list["Entity"], relations: list[Relation], qid: str) -> QAItem:
    phrase = entities[0].name
    for rel in relations[:-1]:
        phrase = rng.choice(rel.phrases).format(s=phrase)
    question = rng.choice(relations[-1].questions).format(s=phrase)
    decomposition = []
    for i, rel in enumerate(relations):
        subject = entities[i]
        reference = subject.name if i == 0 else f"#{i}"
        answer = world.fact_text(subject, rel.name)
        decomposition.append({
            "question": rel.questions[0].format(s=reference),
            "question_resolved": rel.questions[0].format(s=subject.name),
            "answer": answer,
            "relation": rel.name,
            "field": INFOBOX_LABELS[rel.name],
            "support_page": f"/page/{subject.slug}",
        })
    last_rel, last_subject = relations[-1], entities[len(relations) - 1]
    if last_rel.is_attribute:
        answers = [str(last_subject.facts[last_rel.name])]
    else:
        target = world.entities[int(last_subject.facts[last_rel.name])]
        answers = [target.name, *target.aliases]
    metadata = {
        "source": "embedded-web",
        "seed": world.seed,
        "hops": len(relations),
        "relations": [r.name for r in relations],
        "entities": [e.slug for e in entities],
    }
    return QAItem(id=qid, question=question, answers=answers, decomposition=decomposition, metadata=metadata)


def compose_questions(world: "World", rng: random.Random, n: int, hops: tuple[int, ...]) -> list[QAItem]:
    """About `n` distinct questions spread evenly over the hop counts (fewer if the world runs out)."""
    if not hops or any(h < 1 or h > 4 for h in hops):
        raise ValueError(f"hops must be between 1 and 4, got {hops}")
    items: list[QAItem] = []
    seen: set[tuple[int, tuple[str, ...]]] = set()
    texts: set[str] = set()
    per_hop = [n // len(hops) + (1 if i < n % len(hops) else 0) for i in range(len(hops))]
    for h, want in zip(hops, per_hop):
        made, tries = 0, 0
        while made < want and tries < want * 20:
            tries += 1
            chain = _chain(world, rng, h)
            if chain is None:
                continue
            entities, relations = chain
            key = (entities[0].id, tuple(r.name for r in relations))
            if key in seen:
                continue
            item = _item(world, rng, entities, relations, f"ew{world.seed}-{h}h-{made:05d}")
            if item.question in texts:
                continue
            seen.add(key)
            texts.add(item.question)
            items.append(item)
            made += 1
    return items


def split_questions(items: list[QAItem], rng: random.Random,
                    shares: tuple[float, float, float]) -> dict[str, list[QAItem]]:
    """Shuffle deterministically and cut into train/dev/test by `shares`."""
    if len(shares) != 3 or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ValueError(f"splits must be three non-negative shares, got {shares}")
    order = list(items)
    rng.shuffle(order)
    total = sum(shares)
    n_train = round(len(order) * shares[0] / total)
    n_dev = round(len(order) * shares[1] / total)
    return {"train": order[:n_train], "dev": order[n_train:n_train + n_dev], "test": order[n_train + n_dev:]}


def hop_count(item: QAItem) -> int:
    """Length of the question's relation chain; 1 for an item that does not say (other data)."""
    return int(item.metadata.get("hops", 1))


def within_hops(items: Iterable[QAItem], max_hops: int | None) -> list[QAItem]:
    """The items whose relation chain has at most `max_hops` hops (an item without a count has 1); None keeps all."""
    return [q for q in items if max_hops is None or hop_count(q) <= max_hops]


def asked_relation(item: QAItem) -> str:
    """The relation the question finally asks for (its last hop); the item's id when it names none (other data)."""
    relations = item.metadata.get("relations") or []
    return str(relations[-1]) if relations else item.id


def asked_page_kind(item: QAItem) -> str:
    """The kind of page whose row answers the question (the last hop's subject); '' when unknown (other data)."""
    relation = RELATIONS.get(asked_relation(item))
    return relation.source if relation is not None else ""

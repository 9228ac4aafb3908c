"""Write a world to a folder: pages, entity facts, question splits (native QA JSONL) and a manifest.

Output is byte-identical for the same seed and sizes (sorted keys, fixed orders, no timestamps).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from matpo_graph.data.qa import write_qa
from matpo_graph.env.relations import RELATIONS
from matpo_graph.env.world import GENERATOR_VERSION, World

__all__ = ["export_world"]


def _entity_record(world: World, index: int) -> dict[str, Any]:
    e = world.entities[index]
    facts = {}
    for rel_name in sorted(e.facts):
        if RELATIONS[rel_name].target:
            target = world.entities[int(e.facts[rel_name])]
            facts[rel_name] = {"slug": target.slug, "name": target.name}
        else:
            facts[rel_name] = e.facts[rel_name]
    twin = world.entities[e.twin_of].slug if e.twin_of is not None else None
    return {"id": e.id, "slug": e.slug, "kind": e.kind, "name": e.name, "subkind": e.subkind,
            "aliases": e.aliases, "twin_of": twin, "facts": facts}


def export_world(world: World, out_dir: str | os.PathLike[str], *, pages: bool = True) -> dict[str, Any]:
    """Write `world` under `out_dir`; returns the manifest (also written as manifest.json).

    Layout: pages/<slug>.html, entities.jsonl, questions/{train,dev,test}.jsonl, manifest.json.
    """
    out = Path(out_dir)
    (out / "questions").mkdir(parents=True, exist_ok=True)
    if pages:
        page_dir = out / "pages"
        page_dir.mkdir(exist_ok=True)
        for slug in world.pages:
            (page_dir / f"{slug}.html").write_text(world.page_html(slug), encoding="utf-8", newline="\n")
    with (out / "entities.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for i in range(len(world.entities)):
            fh.write(json.dumps(_entity_record(world, i), sort_keys=True, ensure_ascii=False) + "\n")
    counts = {split: write_qa(items, out / "questions" / f"{split}.jsonl")
              for split, items in sorted(world.questions.items())}
    manifest = {
        "generator_version": GENERATOR_VERSION,
        "seed": world.seed,
        "params": world.params,
        "entities": len(world.entities),
        "pages": len(world.pages) if pages else 0,
        "questions": counts,
        "fingerprint": world.fingerprint(),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    return manifest

"""The world generator: deterministic, consistent facts, well-formed multi-hop questions."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

from matpo_graph.cli import main as cli_main
from matpo_graph.data.qa import load_qa
from matpo_graph.env.export import export_world
from matpo_graph.env.relations import RELATIONS
from matpo_graph.env.world import build_world


@pytest.fixture(scope="module")
def world():
    return build_world(7, n_entities=600, n_questions=200)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_world_same_seed_gives_byte_identical_export(tmp_path):
    a = export_world(build_world(11, n_entities=400, n_questions=120), tmp_path / "a")
    b = export_world(build_world(11, n_entities=400, n_questions=120), tmp_path / "b")
    assert a == b
    files_a, files_b = _tree_bytes(tmp_path / "a"), _tree_bytes(tmp_path / "b")
    assert files_a == files_b
    assert len([f for f in files_a if f.startswith("pages/")]) == 400
    assert {"questions/train.jsonl", "questions/dev.jsonl", "questions/test.jsonl", "entities.jsonl",
            "manifest.json"} <= set(files_a)


def test_world_different_seed_differs():
    assert build_world(1, n_entities=200, n_questions=40).fingerprint() != \
        build_world(2, n_entities=200, n_questions=40).fingerprint()


def test_world_cli_export_is_deterministic(tmp_path, capsys):
    for out in ("x", "y"):
        code = cli_main(["env", "export", "--seed", "5", "--entities", "150", "--questions", "40",
                         "-o", str(tmp_path / out)])
        assert code == 0
    assert _tree_bytes(tmp_path / "x") == _tree_bytes(tmp_path / "y")
    assert "wrote 150 pages" in capsys.readouterr().out


def test_world_entity_count_and_unique_names(world):
    assert len(world.entities) == 600 == len(world.pages)
    names = [e.name.lower() for e in world.entities]
    assert len(set(names)) == len(names)
    kinds = collections.Counter(e.kind for e in world.entities)
    assert set(kinds) == {"person", "city", "country", "organisation", "work"}


def test_world_facts_are_typed_and_consistent(world):
    for e in world.entities:
        for rel_name, value in e.facts.items():
            rel = RELATIONS[rel_name]
            assert rel.source == e.kind
            if rel.target:
                assert world.entities[int(value)].kind == rel.target
        if e.kind == "country":
            capital = world.entities[int(e.facts["capital"])]
            assert capital.facts["located_in"] == e.id


def test_world_twins_are_similar_names_with_different_facts(world):
    twins = [e for e in world.entities if e.twin_of is not None]
    assert len(twins) >= 50
    for twin in twins:
        original = world.entities[twin.twin_of]
        assert twin.name != original.name and len(twin.name) == len(original.name)
        assert sum(a != b for a, b in zip(twin.name, original.name)) == 1
        related = [r for r in twin.facts if RELATIONS[r].target and r in original.facts]
        assert all(twin.facts[r] != original.facts[r] for r in related)


def test_world_pages_state_every_fact(world):
    for e in world.entities[:200]:
        text = world.pages[e.slug].text
        for rel_name in e.facts:
            assert world.fact_text(e, rel_name) in text


def test_world_questions_cover_one_to_four_hops(world):
    items = [q for split in world.questions.values() for q in split]
    hops = collections.Counter(q.metadata["hops"] for q in items)
    assert set(hops) == {1, 2, 3, 4}
    assert len({q.id for q in items}) == len(items)
    assert len({q.question for q in items}) == len(items)


def test_world_decomposition_chains_reference_earlier_answers(world):
    for q in world.questions["train"]:
        steps = q.decomposition
        assert steps and len(steps) == q.metadata["hops"]
        assert steps[-1]["answer"] == q.answers[0]
        for i, step in enumerate(steps[1:], 1):
            assert f"#{i}" in step["question"]
            assert steps[i - 1]["answer"] in step["question_resolved"]
            assert step["question"].replace(f"#{i}", steps[i - 1]["answer"]) == step["question_resolved"]
        first_entity = world.by_slug[q.metadata["entities"][0]]
        assert first_entity.name in q.question


def test_world_question_answers_follow_the_facts(world):
    for q in world.questions["dev"]:
        entity = world.by_slug[q.metadata["entities"][0]]
        for rel_name in q.metadata["relations"]:
            value = entity.facts[rel_name]
            if RELATIONS[rel_name].target:
                entity = world.entities[int(value)]
        assert q.answers[0] == (entity.name if RELATIONS[q.metadata["relations"][-1]].target else str(value))


def test_world_splits_disjoint_and_sized(world):
    sizes = {k: len(v) for k, v in world.questions.items()}
    assert sizes == {"train": 160, "dev": 20, "test": 20}
    ids = [q.id for v in world.questions.values() for q in v]
    assert len(ids) == len(set(ids))


def test_world_exported_questions_load_back(tmp_path, world):
    export_world(world, tmp_path, pages=False)
    loaded = load_qa(tmp_path / "questions" / "dev.jsonl")
    assert loaded == world.questions["dev"]


def test_world_supports_ten_thousand_pages():
    big = build_world(0, n_entities=10_000, n_questions=100)
    assert len(big.pages) == 10_000
    assert all(re.fullmatch(r"[a-z0-9-]+", slug) for slug in big.pages)


def test_world_rejects_tiny_or_bad_settings():
    with pytest.raises(ValueError, match="at least 10"):
        build_world(0, n_entities=5)
    with pytest.raises(ValueError, match="hops"):
        build_world(0, n_entities=50, hops=(5,))

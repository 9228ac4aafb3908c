"""Helpers for cold-start tests: compile shipped graphs (or edited copies) and run the expert."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import yaml

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def load(name_or_path):
    from matpo_graph.compilers.local import load_program

    path = Path(name_or_path)
    return load_program(path if path.suffix else GRAPHS / f"{name_or_path}.yaml")


def questions(web, n, *, hops=None, split="train"):
    from matpo_graph.coldstart.demonstrations import pick_questions

    return pick_questions(web.world.questions[split], n, seed=0, max_hops=hops)


def demos(program, plan, items, chat, web, **kw):
    from matpo_graph.coldstart.demonstrations import generate_demos

    return asyncio.run(generate_demos(program, plan, items, tokenizer=chat, embedded_url=web.url, **kw))


def graph_variant(tmp_path, base, edit):
    """A copy of a shipped graph (with its prompts) after `edit(dict)`; returns the new YAML path."""
    data = yaml.safe_load((GRAPHS / f"{base}.yaml").read_text())
    edit(data)
    shutil.copytree(GRAPHS / "prompts", tmp_path / "prompts", dirs_exist_ok=True)
    if (GRAPHS / "examples").is_dir():
        shutil.copytree(GRAPHS / "examples", tmp_path / "examples", dirs_exist_ok=True)
    out = tmp_path / f"{base}_variant.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out

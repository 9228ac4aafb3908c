"""QA files -> veRL parquet, read back by veRL's own RLHFDataset with the SmolLM2 tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl")

from matpo_graph.cli import main  # noqa: E402
from matpo_graph.compilers.verl import AGENT_NAME  # noqa: E402

from verl_helpers import TINY_GRAPH, compose_verl  # noqa: E402

pytestmark = pytest.mark.verl

ITEMS = [
    {"id": "a1", "question": "Who founded Lornwick?", "answers": ["Ada Vell", "A. Vell"],
     "decomposition": [{"question": "Which city is Lornwick in?", "answer": "Brask"}, {"question": "Who founded it?", "answer": "Ada Vell"}],
     "metadata": {"hops": 2}},
    {"id": "a2", "question": "What is the capital of Orrin?", "answers": ["Tesk"]},
]


def _rlhf_dataset(path: Path, tokenizer):  # type: ignore[no-untyped-def]
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = compose_verl(["data.filter_overlong_prompts=true", "data.max_prompt_length=256"]).data
    return RLHFDataset(data_files=str(path), tokenizer=tokenizer, config=cfg)


def test_data_to_parquet_loads_with_verl_rlhf_dataset(tmp_path: Path, hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    out = tmp_path / "train.parquet"
    assert main(["data", "to-parquet", str(qa), "--graph", str(TINY_GRAPH), "-o", str(out)]) == 0

    ds = _rlhf_dataset(out, hf_tokenizer)
    assert len(ds) == 2
    first, second = ds[0], ds[1]
    assert first["raw_prompt"] == [{"role": "user", "content": ITEMS[0]["question"]}]
    assert first["agent_name"] == AGENT_NAME and first["data_source"] == "matpo_graph/tiny_delegate"
    assert list(first["reward_model"]["ground_truth"]) == ["Ada Vell", "A. Vell"]
    assert (first["index"], second["index"]) == (0, 1)
    extra = first["extra_info"]
    assert extra["id"] == "a1" and extra["question"] == ITEMS[0]["question"] and list(extra["answers"]) == ITEMS[0]["answers"]
    assert [dict(d) for d in extra["decomposition"]] == ITEMS[0]["decomposition"]
    assert json.loads(extra["metadata"]) == {"hops": 2}
    assert second["extra_info"]["decomposition"] is None


def test_data_to_parquet_is_deterministic(tmp_path: Path) -> None:
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    for name in ("one", "two"):
        assert main(["data", "to-parquet", str(qa), "--graph", str(TINY_GRAPH), "-o", str(tmp_path / f"{name}.parquet")]) == 0
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()


def test_data_to_parquet_takes_embedded_split(tmp_path: Path, hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from matpo_graph.env.world import build_world

    out = tmp_path / "dev.parquet"
    assert main(["data", "to-parquet", "embedded:dev", "--graph", str(TINY_GRAPH), "-o", str(out), "--limit", "5"]) == 0
    ds = _rlhf_dataset(out, hf_tokenizer)
    gold = build_world(0).questions["dev"][:5]
    assert [ds[i]["extra_info"]["question"] for i in range(len(ds))] == [q.question for q in gold]
    assert [list(ds[i]["reward_model"]["ground_truth"]) for i in range(len(ds))] == [q.answers for q in gold]


def test_data_to_parquet_reports_bad_input(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "x", "answers": ["y"]}) + "\n")
    assert main(["data", "to-parquet", str(qa), "--graph", str(TINY_GRAPH), "-o", str(tmp_path / "o.parquet")]) == 2
    assert "question" in capsys.readouterr().err
    assert main(["data", "to-parquet", "embedded:nope", "--graph", str(TINY_GRAPH), "-o", str(tmp_path / "o.parquet")]) == 2
    assert "embedded:train" in capsys.readouterr().err
    assert not (tmp_path / "o.parquet").exists()

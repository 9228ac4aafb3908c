"""veRL-style ground truths are unwrapped (or refused naming the row); Hugging Face datasets load offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matpo_graph.data.adapters import ground_truth_answers
from matpo_graph.data.hf import HFSource, parse_hf_source
from matpo_graph.data.qa import QADataError, load_qa, parse_columns


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def verl_row(ground_truth: object, question: str = "Who wrote X?") -> dict:
    return {"data_source": "nq", "prompt": [{"role": "user", "content": question}],
            "reward_model": {"style": "rule", "ground_truth": ground_truth}, "extra_info": {"index": 0}}


# ---------------------------------------------------------------- ground truth shapes

@pytest.mark.parametrize("ground_truth, answers", [
    # Search-R1 / veRL: the answers under 'target' (the case that used to load as "target: Alice, A. Smith")
    ({"target": ["Alice", "A. Smith"]}, ["Alice", "A. Smith"]),
    ({"target": "Alice"}, ["Alice"]),
    ({"golden_answers": ["Bob", "Robert"]}, ["Bob", "Robert"]),
    ({"answers": ["x"], "aliases": ["ex"]}, ["x", "ex"]),
    (["Alice", ["A. Smith", "Alice"]], ["Alice", "A. Smith"]),  # nested lists flatten, duplicates go
    ({"ground_truth": {"target": [1999]}}, ["1999"]),  # wrapped twice
    ("42", ["42"]),
    (7, ["7"]),
])
def test_ground_truth_unwraps_common_shapes(tmp_path, ground_truth, answers):
    [item] = load_qa(write_jsonl(tmp_path / "verl.jsonl", [verl_row(ground_truth)]))
    assert item.answers == answers
    assert item.question == "Who wrote X?"


def test_ground_truth_target_never_becomes_one_rendered_answer(tmp_path):
    [item] = load_qa(write_jsonl(tmp_path / "verl.jsonl", [verl_row({"target": ["Alice", "A. Smith"]})]))
    assert all("target" not in a for a in item.answers)


def test_ground_truth_numpy_array_from_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [verl_row({"target": ["Alice", "A. Smith"]}, "Q1?"), verl_row({"target": ["Bob"]}, "Q2?")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    items = load_qa(tmp_path / "train.parquet")
    assert [i.answers for i in items] == [["Alice", "A. Smith"], ["Bob"]]


@pytest.mark.parametrize("ground_truth, message", [
    ({"label_text": "Alice"}, r"verl\.jsonl:2: cannot read answers from reward_model\.ground_truth: a dict without"),
    ({"target": []}, r"verl\.jsonl:2: field 'reward_model\.ground_truth' holds no answer"),
    ([{"text": "a"}], r"verl\.jsonl:2: cannot read answers from reward_model\.ground_truth\[0\]"),
    (None, r"verl\.jsonl:2: field 'reward_model\.ground_truth' holds no answer"),
])
def test_ground_truth_unreadable_is_a_data_error_naming_the_row(tmp_path, ground_truth, message):
    path = write_jsonl(tmp_path / "verl.jsonl", [verl_row("ok"), verl_row(ground_truth)])
    with pytest.raises(QADataError, match=message):
        load_qa(path)


def test_ground_truth_answer_field_wrapped_in_standard_records(tmp_path):
    [item] = load_qa(write_jsonl(tmp_path / "s.jsonl", [{"question": "Q?", "answer": {"target": ["a", "b"]}}]))
    assert item.answers == ["a", "b"]
    with pytest.raises(QADataError, match=r"s2\.jsonl:1: cannot read answers from answer"):
        load_qa(write_jsonl(tmp_path / "s2.jsonl", [{"question": "Q?", "answer": {"who": "a"}}]))


def test_ground_truth_answers_function_direct():
    assert ground_truth_answers({"target": ["A", "B"]}, where="row 0") == ["A", "B"]
    with pytest.raises(QADataError, match="row 5"):
        ground_truth_answers({"x": 1}, where="row 5")


# ---------------------------------------------------------------- hf: sources

@pytest.mark.parametrize("spec, expected", [
    ("hf:org/qa", HFSource("org/qa")),
    ("hf:org/qa:validation", HFSource("org/qa", split="validation")),
    ("hf:org/qa:train[:10]", HFSource("org/qa", split="train[:10]")),
    ("hf:org/qa:distractor", HFSource("org/qa", config="distractor")),
    ("hf:org/qa:distractor:dev", HFSource("org/qa", config="distractor", split="dev")),
    ("hf:org/qa::dev", HFSource("org/qa", split="dev")),
])
def test_hf_spec_parsing(spec, expected):
    assert parse_hf_source(spec) == expected


def test_hf_spec_rejects_empty_and_too_many_parts():
    with pytest.raises(QADataError, match="expected hf:NAME"):
        parse_hf_source("hf:")
    with pytest.raises(QADataError, match="expected hf:NAME"):
        parse_hf_source("hf:a:b:c:d")


@pytest.fixture(scope="module")
def saved_dataset(tmp_path_factory):
    """A DatasetDict with its own column names, written with save_to_disk (no network)."""
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("hfds")
    train = datasets.Dataset.from_dict({
        "qid": ["t1", "t2"], "query": ["Who founded Rook Press?", "Where is Alder based?"],
        "label": [["Ann Lee", "A. Lee"], ["Varo"]], "hops": [1, 1]})
    test = datasets.Dataset.from_dict({"qid": ["d1"], "query": ["Who wrote Y?"], "label": [["Bo"]], "hops": [2]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(root / "dict"))
    train.save_to_disk(str(root / "single"))
    verl = datasets.Dataset.from_list([verl_row({"target": ["Alice", "A. Smith"]}, "Q1?"),
                                       verl_row({"target": ["Bob"]}, "Q2?")])
    (root / "parquet_folder").mkdir()
    verl.to_parquet(str(root / "parquet_folder" / "train.parquet"))
    return root


def test_hf_save_to_disk_with_column_mapping(saved_dataset):
    columns = "question=query,answers=label,id=qid"
    items = load_qa(saved_dataset / "dict", columns=columns)  # the train split by default
    assert [(i.id, i.question, i.answers) for i in items] == [
        ("t1", "Who founded Rook Press?", ["Ann Lee", "A. Lee"]), ("t2", "Where is Alder based?", ["Varo"])]
    assert items[0].metadata["hops"] == 1 and "query" not in items[0].metadata
    [dev] = load_qa(f"hf:{saved_dataset / 'dict'}:test", columns={"question": "query", "answer": "label", "id": "qid"})
    assert (dev.id, dev.answers) == ("d1", ["Bo"])
    single = load_qa(f"hf:{saved_dataset / 'single'}", columns=columns, limit=1)
    assert [i.id for i in single] == ["t1"]


def test_hf_parquet_folder_of_verl_rows(saved_dataset):
    items = load_qa(saved_dataset / "parquet_folder")
    assert [(i.question, i.answers) for i in items] == [("Q1?", ["Alice", "A. Smith"]), ("Q2?", ["Bob"])]


def test_hf_without_mapping_names_the_row_and_field(saved_dataset):
    with pytest.raises(QADataError, match=r"hf:.*dict train row 0: missing field 'answer'"):
        load_qa(saved_dataset / "dict")


def test_hf_mapping_to_missing_column_lists_columns(saved_dataset):
    with pytest.raises(QADataError, match=r"column 'prompt_text' \(mapped to question\) not found; the record has qid, "):
        load_qa(saved_dataset / "dict", columns="question=prompt_text")


def test_hf_unknown_split_lists_splits(saved_dataset):
    with pytest.raises(QADataError, match=r"no split 'validation'; it has train, test"):
        load_qa(f"hf:{saved_dataset / 'dict'}:validation", columns="question=query,answers=label")


def test_hf_hub_id_not_cached_is_a_clear_error_offline(monkeypatch, tmp_path):
    pytest.importorskip("datasets")
    monkeypatch.delenv("MATPO_GRAPH_HUB_ONLINE", raising=False)
    with pytest.raises(QADataError, match=r"hf:no-such-org/no-such-qa: not found in the local Hugging Face cache "
                                          r"and downloads are off \(set MATPO_GRAPH_HUB_ONLINE=1"):
        load_qa("hf:no-such-org/no-such-qa")


def test_hf_offline_scope_leaves_environment_alone(monkeypatch):
    import os

    hub = pytest.importorskip("huggingface_hub")
    from matpo_graph.hub import hub_access

    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)
    before = os.environ.get("HF_HUB_OFFLINE")
    with hub_access(online=False) as allowed:
        assert allowed is False and hub.constants.is_offline_mode()
    assert hub.constants.HF_HUB_OFFLINE is False
    assert os.environ.get("HF_HUB_OFFLINE") == before


def test_columns_parsing_errors():
    assert parse_columns("answer=label") == {"answers": "label"}
    with pytest.raises(QADataError, match="bad column mapping"):
        parse_columns("qustion=query")


def test_train_config_takes_column_mapping_as_text(saved_dataset):
    from matpo_graph.rl.config import TrainConfig

    cfg = TrainConfig(data=str(saved_dataset / "dict"), data_columns="question=query,answer=label,id=qid")
    assert cfg.data_columns == {"question": "query", "answers": "label", "id": "qid"}
    assert [i.id for i in load_qa(cfg.data, columns=cfg.data_columns)] == ["t1", "t2"]

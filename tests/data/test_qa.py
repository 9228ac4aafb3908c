"""QA loading: native, MuSiQue, GAIA-text/WebWalkerQA/FRAMES-style, FanOutQA, parquet, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matpo_graph.data.qa import QADataError, QAItem, fanoutqa_dev_path, load_qa, write_qa


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


MUSIQUE = {
    "id": "2hop__1_2", "question": "Who founded the label that signed X?", "answer": "Jane Roe",
    "answer_aliases": ["J. Roe", "Jane Roe"], "answerable": True,
    "paragraphs": [{"idx": 0, "title": "X", "paragraph_text": "X signed with Y.", "is_supporting": True}],
    "question_decomposition": [
        {"id": 1, "question": "Which label signed X?", "answer": "Y Records", "paragraph_support_idx": 0},
        {"id": 2, "question": "Who founded #1?", "answer": "Jane Roe", "paragraph_support_idx": 3},
    ],
}


def test_qa_native_roundtrip(tmp_path):
    items = [QAItem(id="a", question="Q1?", answers=["x", "y"], decomposition=[{"question": "s?", "answer": "x"}],
                    metadata={"hops": 1}),
             QAItem(id="b", question="Q2?", answers=["z"])]
    write_qa(items, tmp_path / "q.jsonl")
    assert load_qa(tmp_path / "q.jsonl") == items


def test_qa_musique_record(tmp_path):
    [item] = load_qa(write_jsonl(tmp_path / "musique.jsonl", [MUSIQUE]))
    assert item.id == "2hop__1_2"
    assert item.answers == ["Jane Roe", "J. Roe"]
    assert [s["question"] for s in item.decomposition] == ["Which label signed X?", "Who founded #1?"]
    assert item.decomposition[0]["answer"] == "Y Records"
    assert item.metadata["hops"] == 2 and item.metadata["answerable"] is True
    assert "paragraphs" not in item.metadata and item.metadata["n_paragraphs"] == 1


@pytest.mark.parametrize("record, question, answers", [
    ({"task_id": "g1", "Question": "How many?", "Final answer": "17", "Level": 1}, "How many?", ["17"]),
    ({"question": "Where?", "answer": "Paris", "root_url": "https://x.org", "info": {"type": "multi"}},
     "Where?", ["Paris"]),
    ({"Prompt": "Which year?", "Answer": "1999", "wiki_links": ["https://en.wikipedia.org/wiki/A"]},
     "Which year?", ["1999"]),
    ({"id": "f1", "question": "Who?", "golden_answers": ["Ann", "Anne"]}, "Who?", ["Ann", "Anne"]),
    ({"task_question": "What?", "true_answer": "it"}, "What?", ["it"]),
    ({"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "Chat q?"}],
      "reward_model": {"ground_truth": "42"}}, "Chat q?", ["42"]),
])
def test_qa_standard_variants(tmp_path, record, question, answers):
    [item] = load_qa(write_jsonl(tmp_path / "std.jsonl", [record]))
    assert item.question == question and item.answers == answers
    assert item.id


def test_qa_standard_keeps_other_fields_as_metadata(tmp_path):
    [item] = load_qa(write_jsonl(tmp_path / "g.jsonl", [{"task_id": "g1", "Question": "Q", "Final answer": "A",
                                                          "Level": 2}]))
    assert item.id == "g1" and item.metadata["Level"] == 2 and item.metadata["source"] == "standard"


def test_qa_fanoutqa_dev_from_installed_package():
    assert fanoutqa_dev_path().name == "fanout-final-dev.json"
    items = load_qa("fanoutqa:dev")
    assert len(items) == 310
    first = items[0]
    assert first.id == "7dcbbbdc7f1120cd"
    assert first.answers[0].startswith("Pat Burrell: Right;")
    assert first.metadata["answer_raw"]["JD Drew"] == "Left"
    assert first.decomposition[0]["answer"].startswith("Pat Burrell, Mark Mulder")
    assert first.decomposition[1]["depends_on"] == ["bca4ab7d1f4df703"]
    assert all(item.answers and item.decomposition for item in items)


def test_qa_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"id": ["p1", "p2"], "question": ["A?", "B?"], "golden_answers": [["a", "aa"], ["b"]]})
    pq.write_table(table, tmp_path / "q.parquet")
    items = load_qa(tmp_path / "q.parquet")
    assert [(i.id, i.answers) for i in items] == [("p1", ["a", "aa"]), ("p2", ["b"])]


def test_qa_json_list_and_limit(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"question": f"q{i}?", "answer": str(i)} for i in range(5)]), encoding="utf-8")
    assert [i.answers for i in load_qa(path, limit=2)] == [["0"], ["1"]]


def test_qa_error_names_file_line_and_field(tmp_path):
    records = [{"question": "ok?", "answer": "y"}, {"query_text": "no", "answer": "x"}]
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(QADataError, match=r"bad\.jsonl:2: missing field 'question'"):
        load_qa(path)
    path = write_jsonl(tmp_path / "noans.jsonl", [{"question": "where?"}])
    with pytest.raises(QADataError, match=r"noans\.jsonl:1: missing field 'answer'"):
        load_qa(path)


def test_qa_error_invalid_json_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"question": "a", "answer": "b"}\n{"question": \n', encoding="utf-8")
    with pytest.raises(QADataError, match=r"broken\.jsonl:2: invalid JSON"):
        load_qa(path)


def test_qa_error_empty_answer_and_bad_decomposition(tmp_path):
    with pytest.raises(QADataError, match=r":1: field 'answer' is empty"):
        load_qa(write_jsonl(tmp_path / "e.jsonl", [{"question": "q", "answer": ""}]))
    with pytest.raises(QADataError, match=r"decomposition\[0\] needs 'question' and 'answer'"):
        load_qa(write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "a", "decomposition": [{"q": 1}]}]))


def test_qa_error_duplicate_id_missing_file_and_adapter(tmp_path):
    with pytest.raises(QADataError, match="duplicate id 'x'"):
        load_qa(write_jsonl(tmp_path / "dup.jsonl", [{"id": "x", "question": "a", "answer": "b"}] * 2))
    with pytest.raises(QADataError, match="no such file"):
        load_qa(tmp_path / "missing.jsonl")
    with pytest.raises(QADataError, match="unknown adapter"):
        load_qa(tmp_path / "dup.jsonl", adapter="squad")


def test_qa_parquet_error_names_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"question": ["A?", "B?"], "answer": ["a", None]}), tmp_path / "r.parquet")
    with pytest.raises(QADataError, match=r"r\.parquet row 1: missing field 'answer'"):
        load_qa(tmp_path / "r.parquet")

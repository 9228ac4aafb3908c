"""QA items -> veRL's RL parquet: one row per question, read by veRL's RLHFDataset.

Columns: ``prompt`` (chat messages; the agent loop renders the graph's own templates at rollout time,
so this is only the question as a user message), ``data_source``, ``reward_model``
(``{ground_truth: [aliases], style: rule}``), ``extra_info`` (``index``, question ``id``, the question,
gold ``answers``, the ``decomposition`` into sub-questions, JSON ``metadata``) and ``agent_name``
(the registered MATPO agent loop). The schema is explicit, so files are identical run to run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matpo_graph.compilers.verl import AGENT_NAME

__all__ = ["data_source", "load_qa_records", "qa_rows", "write_parquet"]


def data_source(graph_name: str) -> str:
    return f"matpo_graph/{graph_name}"


def _as_record(item: Any, fallback_id: str) -> dict[str, Any]:
    if hasattr(item, "model_dump"):
        item = item.model_dump(mode="json")
    elif not isinstance(item, dict) and hasattr(item, "__dict__"):
        item = dict(vars(item))
    if not isinstance(item, dict):
        raise ValueError(f"not a QA item: {item!r}")
    question = item.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"QA item {item.get('id', fallback_id)!r} has no question")
    answers = item.get("answers")
    if answers is None and "answer" in item:
        answers = [item["answer"]]
    if isinstance(answers, str):
        answers = [answers]
    decomposition = item.get("decomposition") or None
    if decomposition is not None:
        decomposition = [{"question": str(d["question"]), "answer": str(d["answer"])} for d in decomposition]
    return {
        "id": str(item.get("id") or fallback_id),
        "question": question,
        "answers": [str(a) for a in (answers or [])],
        "decomposition": decomposition,
        "metadata": item.get("metadata") or {},
    }


def load_qa_records(path: str | Path) -> list[dict[str, Any]]:
    """QA items of a file the project's loader reads (JSONL, JSON, parquet, ``fanoutqa:dev``) as dicts.

    Raises:
        ValueError: the file or a record does not fit (the message names file, line and field).
    """
    from matpo_graph.data.qa import load_qa

    return [_as_record(item, f"q{i}") for i, item in enumerate(load_qa(path))]


def qa_rows(items: Sequence[Any], *, graph_name: str, agent_name: str = AGENT_NAME) -> list[dict[str, Any]]:
    """veRL rows for QA items (QAItem objects or dicts), in input order."""
    rows = []
    for index, item in enumerate(items):
        rec = _as_record(item, f"q{index}")
        rows.append(
            {
                "prompt": [{"role": "user", "content": rec["question"]}],
                "data_source": data_source(graph_name),
                "reward_model": {"ground_truth": rec["answers"], "style": "rule"},
                "extra_info": {
                    "index": index,
                    "id": rec["id"],
                    "question": rec["question"],
                    "answers": rec["answers"],
                    "decomposition": rec["decomposition"],
                    "metadata": json.dumps(rec["metadata"], sort_keys=True, ensure_ascii=False),
                },
                "agent_name": agent_name,
            }
        )
    return rows


def _schema():  # type: ignore[no-untyped-def]
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    step = pa.struct([("question", pa.string()), ("answer", pa.string())])
    return pa.schema(
        [
            ("prompt", pa.list_(message)),
            ("data_source", pa.string()),
            ("reward_model", pa.struct([("ground_truth", pa.list_(pa.string())), ("style", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [
                        ("index", pa.int64()),
                        ("id", pa.string()),
                        ("question", pa.string()),
                        ("answers", pa.list_(pa.string())),
                        ("decomposition", pa.list_(step)),
                        ("metadata", pa.string()),
                    ]
                ),
            ),
            ("agent_name", pa.string()),
        ]
    )


def write_parquet(items: Sequence[Any], path: str | Path, *, graph_name: str, agent_name: str = AGENT_NAME) -> int:
    """Write QA items as a veRL parquet file; returns the number of rows.

    Raises:
        ValueError: an item has no question, or there are no items.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = qa_rows(items, graph_name=graph_name, agent_name=agent_name)
    if not rows:
        raise ValueError("no QA items to write")
    table = pa.Table.from_pylist(rows, schema=_schema())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return len(rows)

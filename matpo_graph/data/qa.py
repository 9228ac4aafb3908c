"""Question-answer datasets: the QAItem type and loaders for JSONL, JSON and parquet files.

Accepted record shapes (auto-detected per record, or forced with `adapter=`):
  native     {id, question, answers: [..], decomposition: [{question, answer}], metadata}
  standard   GAIA-text / WebWalkerQA / FRAMES style: question|task_question|Prompt|..., answer|true_answer|
             golden_answers|Final answer|...; remaining fields go to metadata
  musique    {id, question, answer, answer_aliases, question_decomposition: [{question, answer, ...}]}
  fanoutqa   {id, question, answer (str, list or dict), decomposition: [{question, answer, depends_on, ...}]}
The FanOutQA dev set shipped in the `fanoutqa` package loads with `load_qa("fanoutqa:dev")`; Hugging Face
datasets load as ``hf:NAME[:CONFIG][:SPLIT]`` or from a local save_to_disk / parquet / arrow folder (see
matpo_graph.data.hf). `columns` maps the fields matpo-graph reads to a dataset's own column names.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from matpo_graph.data.adapters import ADAPTERS, QADataError, adapt

__all__ = ["COLUMN_TARGETS", "QADataError", "QAItem", "apply_columns", "fanoutqa_dev_path", "iter_qa", "load_qa",
           "parse_columns", "write_qa"]

# Fields a column mapping may fill (`answer` is accepted as a synonym of `answers`).
COLUMN_TARGETS = ("question", "answers", "id", "decomposition", "metadata")


class QAItem(BaseModel):
    """One question with its gold answers (first = canonical, rest = aliases)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Stable identifier (from the file, or derived from file and line).")
    question: str = Field(min_length=1, description="The question as the root role receives it.")
    answers: list[str] = Field(min_length=1, description="Accepted answers; the first is the canonical one.")
    decomposition: list[dict[str, Any]] | None = Field(
        default=None,
        description="Sub-questions in order, each with at least 'question' and 'answer'; '#k' refers to answer k.",
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else (hops, relation path, source).")

    @field_validator("decomposition")
    @classmethod
    def _steps_have_question_and_answer(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, step in enumerate(v or []):
            if "question" not in step or "answer" not in step:
                raise ValueError(f"decomposition[{i}] needs 'question' and 'answer'")
        return v

    @property
    def answer(self) -> str:
        """The canonical answer."""
        return self.answers[0]


def fanoutqa_dev_path() -> Path:
    """Where the installed `fanoutqa` package keeps fanout-final-dev.json (found without importing it)."""
    spec = importlib.util.find_spec("fanoutqa")
    if spec is None or not spec.submodule_search_locations:
        raise QADataError("the 'fanoutqa' package is not installed (pip install fanoutqa)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "data" / "fanout-final-dev.json"
        if path.is_file():
            return path
    raise QADataError("the installed 'fanoutqa' package has no data/fanout-final-dev.json")


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, record) pairs; location is 'file:line' for JSONL, 'file item N' or 'file row N' otherwise."""
    suffix = "".join(path.suffixes[-2:]).lower() if path.suffix == ".gz" else path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise QADataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path} row {i}", row
        return
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise QADataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        if isinstance(data, dict):
            data = data.get("data", data.get("questions", [data]))
        if not isinstance(data, list):
            raise QADataError(f"{path}: expected a JSON list of records (or {{'data': [...]}})")
        for i, rec in enumerate(data):
            yield f"{path} item {i}", rec
        return
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise QADataError(f"{path}:{lineno}: invalid JSON: {exc.msg} (column {exc.colno})") from None
            yield f"{path}:{lineno}", rec


def parse_columns(text: str | Mapping[str, str] | None) -> dict[str, str]:
    """A column mapping from ``question=query,answers=label`` (or a mapping), checked.

    Keys are the fields matpo-graph reads (COLUMN_TARGETS); values are the dataset's columns, with dots
    reaching into nested records (``answers=reward_model.ground_truth``).

    Raises:
        QADataError: a malformed item or an unknown field.
    """
    if not text:
        return {}
    items = text.items() if isinstance(text, Mapping) else (
        part.partition("=")[::2] for part in str(text).split(",") if part.strip())
    out: dict[str, str] = {}
    for key, value in items:
        key, value = str(key).strip(), str(value).strip()
        key = "answers" if key == "answer" else key
        if key not in COLUMN_TARGETS or not value:
            raise QADataError(f"bad column mapping {key}={value!r}: expected FIELD=COLUMN with FIELD one of "
                              f"{', '.join(COLUMN_TARGETS)} (e.g. question=query,answers=label)")
        out[key] = value
    return out


def apply_columns(rec: Any, columns: Mapping[str, str], where: str) -> Any:
    """The record with the mapped columns renamed to the fields matpo-graph reads (a new dict).

    Raises:
        QADataError: a mapped column is missing from the record; the message lists the columns it has.
    """
    if not columns or not isinstance(rec, dict):
        return rec
    out = dict(rec)
    for target, source in columns.items():
        value: Any = rec
        for part in source.split("."):
            if not isinstance(value, dict) or part not in value:
                raise QADataError(f"{where}: column {source!r} (mapped to {target}) not found; "
                                  f"the record has {', '.join(map(str, rec))}")
            value = value[part]
        if "." not in source and source != target:
            out.pop(source, None)  # renamed, not duplicated into metadata
        out[target] = value
    return out


def _sources(path: str | os.PathLike[str], adapter: str) -> tuple[str, Iterator[tuple[str, Any]], str]:
    """(name stem for derived ids, (location, record) pairs, adapter) of any supported source."""
    from matpo_graph.data.hf import HF_PREFIX, hf_records, is_dataset_folder

    text = str(path)
    if text == "fanoutqa:dev":
        dev = fanoutqa_dev_path()
        return dev.stem, _records(dev), ("fanoutqa" if adapter == "auto" else adapter)
    if text.startswith(HF_PREFIX):
        stem = text[len(HF_PREFIX):].split(":", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "hf"
        return stem, hf_records(text), adapter
    file = Path(path)
    if file.is_dir():
        if not is_dataset_folder(file):
            raise QADataError(f"{file}: a folder without a dataset (expected a save_to_disk folder or "
                              "parquet/arrow/jsonl files)")
        return file.name, hf_records(str(file)), adapter
    if not file.is_file():
        raise QADataError(f"{file}: no such file")
    return file.stem, _records(file), adapter


def iter_qa(path: str | os.PathLike[str], *, adapter: str = "auto",
            columns: Mapping[str, str] | str | None = None) -> Iterator[QAItem]:
    """Stream QAItems from a file, folder or ``hf:`` source; see :func:`load_qa`."""
    if adapter not in ADAPTERS:
        raise QADataError(f"unknown adapter {adapter!r}; choose one of {', '.join(ADAPTERS)}")
    mapping = parse_columns(columns)
    stem, records, adapter = _sources(path, adapter)
    seen: set[str] = set()
    for where, rec in records:
        rec = apply_columns(rec, mapping, where)
        rid, question, answers, decomposition, metadata = adapt(rec, adapter=adapter, where=where)
        if not rid:
            rid = f"{stem}-{hashlib.sha256(question.encode('utf-8')).hexdigest()[:12]}"
        if rid in seen:
            raise QADataError(f"{where}: duplicate id {rid!r}")
        seen.add(rid)
        try:
            yield QAItem(id=rid, question=question, answers=answers, decomposition=decomposition, metadata=metadata)
        except ValueError as exc:
            raise QADataError(f"{where}: {exc}") from None


def load_qa(path: str | os.PathLike[str], *, adapter: str = "auto", limit: int | None = None,
            columns: Mapping[str, str] | str | None = None) -> list[QAItem]:
    """Load a QA dataset: JSONL, JSON list, parquet, 'fanoutqa:dev', ``hf:NAME[:CONFIG][:SPLIT]`` or a folder.

    Args:
        path: the file, the dataset folder (save_to_disk, or parquet/arrow/jsonl files) or the ``hf:`` source.
        adapter: 'auto' (per record) or one of native, standard, musique, fanoutqa.
        limit: keep only the first `limit` items.
        columns: field -> column mapping (``{"question": "query", "answers": "label"}`` or the same as
            ``question=query,answers=label``) for datasets whose column names the adapters do not know.

    Raises:
        QADataError: the source is missing or a record does not fit; the message names the source, the
            line or row, and the field.
    """
    items: list[QAItem] = []
    for item in iter_qa(path, adapter=adapter, columns=columns):
        if limit is not None and len(items) >= limit:
            break
        items.append(item)
    return items


def write_qa(items: Iterable[QAItem], path: str | os.PathLike[str]) -> int:
    """Write items as native JSONL (sorted keys, one item per line); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for item in items:
            fh.write(json.dumps(item.model_dump(mode="json"), sort_keys=True, ensure_ascii=False) + "\n")
            n += 1
    return n

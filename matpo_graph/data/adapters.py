"""Turn one record of a QA dataset (MuSiQue, FanOutQA, GAIA-text/WebWalkerQA/FRAMES-style, native) into fields.

Each adapter returns (id, question, answers, decomposition, metadata) or raises QADataError naming the
record's location and the missing field.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["ADAPTERS", "AdapterName", "QADataError", "adapt", "detect", "ground_truth_answers", "render_answer"]

AdapterName = Literal["auto", "native", "standard", "musique", "fanoutqa"]
ADAPTERS: tuple[str, ...] = ("auto", "native", "standard", "musique", "fanoutqa")

QUESTION_KEYS = ("question", "Question", "task_question", "query", "Query", "prompt", "Prompt", "problem", "input")
ANSWER_KEYS = ("answers", "golden_answers", "answer", "Answer", "true_answer", "final_answer", "Final answer",
               "gold_answer", "ground_truth", "expected_answer", "target")
ALIAS_KEYS = ("answer_aliases", "aliases", "answer_alias")
ID_KEYS = ("id", "task_id", "qid", "_id", "question_id", "ID", "uid")
DECOMP_KEYS = ("decomposition", "question_decomposition")

Fields = tuple[str, str, list[str], list[dict[str, Any]] | None, dict[str, Any]]


class QADataError(ValueError):
    """A dataset file or record does not fit; the message names the file, the line/row and the field."""


def render_answer(value: Any) -> str:
    """A gold answer as text: dicts as 'k: v; ...', lists comma-joined, scalars as str."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {render_answer(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(render_answer(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value).strip()


# Keys under which datasets wrap their gold answers: veRL / Search-R1 write
# `reward_model.ground_truth = {"target": [...]}`, FlashRAG-style sets `golden_answers`, others `answers`.
WRAPPER_KEYS = ("target", "targets", "golden_answers", "answers", "answer", "ground_truth", "gold", "label")


def ground_truth_answers(value: Any, *, where: str, field: str = "reward_model.ground_truth") -> list[str]:
    """Gold answers out of a ground-truth value in any of the shapes datasets use.

    A string or number is one answer; a list (or array) holds several answers, nested lists are flattened;
    a dict wraps them under one of WRAPPER_KEYS (``{"target": ["Alice", "A. Smith"]}``), possibly several
    times over, and any aliases beside them are added. Anything else cannot be read as answers, and
    guessing would make every rollout score 0 without a word, so it is a data error naming the record.

    Raises:
        QADataError: the value holds no readable answer; the message names `where`, `field` and the value.
    """
    out: list[str] = []

    def walk(v: Any, path: str) -> None:
        if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):  # numpy arrays from parquet/datasets
            v = v.tolist()
        if v is None:
            return
        if isinstance(v, bool):
            out.append("yes" if v else "no")
        elif isinstance(v, (str, int, float)):
            text = str(v).strip()
            if text:
                out.append(text)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(x, f"{path}[{i}]")
        elif isinstance(v, dict):
            keys = [k for k in WRAPPER_KEYS if k in v]
            if not keys:
                raise QADataError(
                    f"{where}: cannot read answers from {path}: a dict without any of the keys "
                    f"{', '.join(WRAPPER_KEYS)} (got keys {sorted(map(str, v))}); map the right column "
                    f"with --columns answers=COLUMN")
            for k in keys:
                walk(v[k], f"{path}.{k}")
            for k in ALIAS_KEYS:
                if k in v:
                    walk(v[k], f"{path}.{k}")
        else:
            raise QADataError(f"{where}: cannot read answers from {path}: unexpected {type(v).__name__} {v!r}")

    walk(value, field)
    seen: dict[str, None] = {}
    for a in out:
        seen.setdefault(a, None)
    if not seen:
        raise QADataError(f"{where}: field {field!r} holds no answer (got {value!r})")
    return list(seen)


def _is_wrapper(value: Any) -> bool:
    """A dict that wraps answers (``{"target": [...]}``), as opposed to FanOutQA's structured answers."""
    return isinstance(value, dict) and any(k in value for k in WRAPPER_KEYS)


def _first(rec: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if key in rec and rec[key] is not None:
            return key, rec[key]
    return None, None


def _question_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):  # chat form, e.g. a veRL 'prompt' column: take the last user message
        for msg in reversed(value):
            if isinstance(msg, dict) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
                return msg["content"].strip()
    return None


def _answers(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        out = [render_answer(v) for v in value]
    else:
        out = [render_answer(value)]
    seen: dict[str, None] = {}
    for a in out:
        if a:
            seen.setdefault(a, None)
    return list(seen)


NATIVE_KEYS = frozenset({"id", "question", "answers", "decomposition", "metadata"})


def detect(rec: dict[str, Any]) -> str:
    """Which adapter fits a record."""
    if isinstance(rec.get("answers"), list) and set(rec) <= NATIVE_KEYS:
        return "native"
    if "question_decomposition" in rec or "answer_aliases" in rec:
        return "musique"
    decomp = rec.get("decomposition")
    if isinstance(decomp, list) and decomp and isinstance(decomp[0], dict) and (
            "depends_on" in decomp[0] or "evidence" in decomp[0]):
        return "fanoutqa"
    if "categories" in rec and not isinstance(rec.get("answer", ""), str):
        return "fanoutqa"
    return "standard"


def _need(rec: dict[str, Any], keys: tuple[str, ...], what: str, where: str) -> tuple[str, Any]:
    key, value = _first(rec, keys)
    if key is None:
        raise QADataError(f"{where}: missing field {what!r} (accepted names: {', '.join(keys)})")
    return key, value


def _standard(rec: dict[str, Any], where: str, source: str) -> Fields:
    q_key, q_value = _need(rec, QUESTION_KEYS, "question", where)
    question = _question_text(q_value)
    if not question:
        raise QADataError(f"{where}: field {q_key!r} must be a non-empty string")
    a_key, a_value = _first(rec, ANSWER_KEYS)
    from_reward_model = False
    if a_key is None and isinstance(rec.get("reward_model"), dict) and "ground_truth" in rec["reward_model"]:
        a_key, a_value, from_reward_model = "reward_model", rec["reward_model"]["ground_truth"], True
    if a_key is None:
        names = ", ".join(ANSWER_KEYS)
        raise QADataError(f"{where}: missing field 'answer' (accepted names: {names}, reward_model.ground_truth)")
    if from_reward_model or _is_wrapper(a_value) or (source == "standard" and isinstance(a_value, dict)):
        # veRL-style ground truths: unwrap, or fail naming the record (never render a dict as one answer).
        field = "reward_model.ground_truth" if from_reward_model else a_key
        answers = ground_truth_answers(a_value, where=where, field=field)
    elif source != "fanoutqa" and isinstance(a_value, (list, tuple)) and any(
            isinstance(v, (dict, list, tuple)) for v in a_value):
        answers = ground_truth_answers(a_value, where=where, field=a_key)
    else:
        answers = _answers(a_value)
    alias_key, aliases = _first(rec, ALIAS_KEYS)
    if aliases is not None:
        answers += [a for a in _answers(aliases) if a not in answers]
    if not answers:
        raise QADataError(f"{where}: field {a_key!r} is empty")
    id_key, rid = _first(rec, ID_KEYS)
    decomposition = None
    d_key, d_value = _first(rec, DECOMP_KEYS)
    if d_value is not None:
        decomposition = _decomposition(d_value, where, d_key or "decomposition")
    used = {q_key, a_key, alias_key, id_key, d_key}
    metadata = dict(rec.get("metadata") or {}) if isinstance(rec.get("metadata"), dict) else {}
    used.add("metadata")
    known = {*QUESTION_KEYS, *ANSWER_KEYS, *ALIAS_KEYS, *ID_KEYS, *DECOMP_KEYS}
    for key, value in rec.items():
        if key not in used and not (value is None and key in known):
            metadata.setdefault(key, value)
    if source != "native":
        metadata.setdefault("source", source)
    if a_key not in ("answers", "golden_answers") and not isinstance(a_value, str):
        metadata.setdefault("answer_raw", a_value)
    return ("" if rid is None else str(rid)), question, answers, decomposition, metadata


def _decomposition(value: Any, where: str, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise QADataError(f"{where}: field {key!r} must be a list of {{question, answer}} objects")
    steps: list[dict[str, Any]] = []

    def add(items: list[Any], path: str) -> None:
        for i, step in enumerate(items):
            if not isinstance(step, dict) or "question" not in step or "answer" not in step:
                raise QADataError(f"{where}: {key}[{path}{i}] needs 'question' and 'answer'")
            entry = {k: v for k, v in step.items() if k not in ("decomposition", "evidence")}
            entry["question"] = str(step["question"]).strip()
            if not isinstance(step["answer"], str):
                entry["answer_raw"] = step["answer"]
            entry["answer"] = render_answer(step["answer"])
            if isinstance(step.get("evidence"), dict) and step["evidence"].get("url"):
                entry["evidence_url"] = step["evidence"]["url"]
            steps.append(entry)
            if isinstance(step.get("decomposition"), list) and step["decomposition"]:
                add(step["decomposition"], f"{path}{i}].decomposition[")
    add(value, "")
    return steps


def adapt(rec: Any, *, adapter: str, where: str) -> Fields:
    """Fields of one record; `where` is 'file:line' (or row) used in errors."""
    if not isinstance(rec, dict):
        raise QADataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    name = detect(rec) if adapter == "auto" else adapter
    if name not in ADAPTERS:
        raise QADataError(f"unknown adapter {adapter!r}; choose one of {', '.join(ADAPTERS)}")
    if name == "musique" and "answer" not in rec:
        raise QADataError(f"{where}: missing field 'answer' (MuSiQue records have question, answer, answer_aliases)")
    if name == "musique" and isinstance(rec.get("paragraphs"), list):  # retrieval contexts: large, not needed
        rec = {k: v for k, v in rec.items() if k != "paragraphs"} | {"n_paragraphs": len(rec["paragraphs"])}
    rid, question, answers, decomposition, metadata = _standard(rec, where, name)
    if name in ("musique", "fanoutqa") and decomposition is not None:
        metadata.setdefault("hops", len(decomposition))
    return rid, question, answers, decomposition, metadata

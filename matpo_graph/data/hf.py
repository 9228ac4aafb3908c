"""Hugging Face datasets as QA sources: ``hf:NAME[:CONFIG][:SPLIT]`` and local dataset folders.

Sources this module reads, all through the ``datasets`` library (imported only here, only when used):

  hf:NAME                 a Hub dataset (read from the local cache unless downloads are allowed, see
                          matpo_graph.hub), its ``train`` split (or its only split)
  hf:NAME:CONFIG          ... of one configuration
  hf:NAME:CONFIG:SPLIT    ... one split; ``hf:NAME::SPLIT`` names a split without a configuration
  hf:NAME:SPLIT           when SPLIT is a split name (train, validation, test, dev, or a slice such as
                          ``train[:100]``) rather than a configuration
  a folder                written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, or holding
                          parquet, arrow or JSON Lines files (also as ``hf:FOLDER[:CONFIG][:SPLIT]``)

Each row comes back as a plain dict with its location (``hf:NAME train row 3``) for error messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matpo_graph.data.adapters import QADataError

__all__ = ["HF_PREFIX", "HFSource", "hf_records", "is_dataset_folder", "parse_hf_source"]

HF_PREFIX = "hf:"
_SPLIT_NAMES = frozenset({"train", "validation", "valid", "val", "test", "dev"})
_SPLIT_RE = re.compile(r"^[A-Za-z0-9_]+\[[^\]]*\]$")  # train[:100], test[10%:]
_DATA_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv")


@dataclass(frozen=True)
class HFSource:
    """Where rows come from: a Hub id or local folder, an optional configuration and split."""

    name: str
    config: str | None = None
    split: str | None = None

    def label(self) -> str:
        """How rows of this source are named in errors: ``hf:NAME[:CONFIG]``."""
        return HF_PREFIX + self.name + (f":{self.config}" if self.config else "")


def _looks_like_split(text: str) -> bool:
    return text.lower() in _SPLIT_NAMES or bool(_SPLIT_RE.match(text))


def parse_hf_source(spec: str) -> HFSource:
    """Parse ``hf:NAME[:CONFIG][:SPLIT]`` (the prefix is optional; see the module docstring for NAME:SPLIT).

    Raises:
        QADataError: empty name or more than three parts.
    """
    body = spec[len(HF_PREFIX):] if spec.startswith(HF_PREFIX) else spec
    parts = re.split(r":(?![^\[]*\])", body)  # colons inside a slice such as train[:10] do not split
    if not parts[0] or len(parts) > 3:
        raise QADataError(f"{spec!r}: expected hf:NAME[:CONFIG][:SPLIT], e.g. hf:org/qa:default:validation")
    name = parts[0]
    config = split = None
    if len(parts) == 2:
        if _looks_like_split(parts[1]):
            split = parts[1]
        else:
            config = parts[1] or None
    elif len(parts) == 3:
        config, split = (parts[1] or None), (parts[2] or None)
    return HFSource(name=name, config=config, split=split)


def is_dataset_folder(path: Path) -> bool:
    """A folder ``datasets`` can read: a save_to_disk folder, or one holding data files."""
    if not path.is_dir():
        return False
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return True
    return any(p.suffix.lower() in _DATA_SUFFIXES for p in path.rglob("*") if p.is_file())


def hf_records(spec: str, *, online: bool | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, row) pairs of a Hugging Face dataset source; see the module docstring.

    Args:
        spec: ``hf:NAME[:CONFIG][:SPLIT]`` or a dataset folder.
        online: allow Hub downloads (default: ``$MATPO_GRAPH_HUB_ONLINE``, i.e. no).

    Raises:
        QADataError: ``datasets`` is missing, the dataset is not found (or not cached while offline),
            or the split is ambiguous or unknown; the message says which and what to do.
    """
    source = parse_hf_source(spec)
    try:
        import datasets
    except ImportError:
        raise QADataError(f"{spec}: reading Hugging Face datasets needs the 'datasets' package "
                          "(pip install 'matpo-graph[train]' or pip install datasets)") from None
    data = _open(datasets, source, online=online)
    split, table = _pick_split(data, source)
    label = f"{source.label()} {split}" if split else source.label()
    for i, row in enumerate(table):
        yield f"{label} row {i}", dict(row)


def _open(datasets: Any, source: HFSource, *, online: bool | None) -> Any:
    from matpo_graph.hub import hub_access

    folder = Path(source.name).expanduser()
    if folder.is_dir():
        if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
            try:
                return datasets.load_from_disk(str(folder))
            except Exception as exc:  # noqa: BLE001 - datasets raises many kinds; say which folder failed
                raise QADataError(f"{folder}: not a readable save_to_disk folder: {exc}") from None
        if not is_dataset_folder(folder):
            raise QADataError(f"{folder}: no dataset here (expected a save_to_disk folder or parquet/arrow/jsonl files)")
        try:
            return datasets.load_dataset(str(folder), source.config)
        except Exception as exc:  # noqa: BLE001
            raise QADataError(f"{folder}: datasets could not read this folder: {exc}") from None
    if source.name.startswith((".", "/", "~")):
        raise QADataError(f"{source.name}: no such dataset folder")
    with hub_access(online=online) as allowed:
        try:
            return datasets.load_dataset(source.name, source.config, split=source.split)
        except Exception as exc:  # noqa: BLE001
            if not allowed:
                raise QADataError(
                    f"{source.label()}: not found in the local Hugging Face cache and downloads are off "
                    f"(set MATPO_GRAPH_HUB_ONLINE=1 to download it, or give a local folder); datasets said: "
                    f"{_first_line(exc)}") from None
            raise QADataError(f"{source.label()}: could not load: {_first_line(exc)}") from None


def _pick_split(data: Any, source: HFSource) -> tuple[str | None, Any]:
    """(split name, rows): the named split, else ``train``, else the only one; a plain Dataset as is."""
    if not hasattr(data, "keys"):  # a Dataset (load_dataset with split=, or a saved Dataset)
        return source.split, data
    splits = list(data.keys())
    if source.split is not None:
        base = source.split.split("[", 1)[0]
        if base not in splits:
            raise QADataError(f"{source.label()}: no split {source.split!r}; it has {', '.join(splits)}")
        if base != source.split:
            raise QADataError(f"{source.label()}: slices like {source.split!r} need a Hub dataset; use --limit "
                              "or select rows before saving the folder")
        return base, data[base]
    if "train" in splits:
        return "train", data["train"]
    if len(splits) == 1:
        return splits[0], data[splits[0]]
    raise QADataError(f"{source.label()}: several splits ({', '.join(splits)}); name one as "
                      f"{source.label()}{'' if source.config else ':'}:SPLIT")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"

"""On-disk response cache, so an evaluation can be re-run with exactly the tool outputs it saw.

Modes:
  off        never read or write.
  record     always call the tool and store every result (errors included: a faithful recording).
  replay     only read; a call that was never recorded returns an error result instead of going out.
  readwrite  read when present, else call and store successful results (errors are retried next time).

Keys are sha256 digests of canonical JSON of (tool, backend, endpoint fingerprint, normalised arguments).
Secrets never enter the key material and callers store redacted texts only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args

__all__ = ["CacheMode", "ResponseCache", "normalise_args"]

CacheMode = Literal["off", "record", "replay", "readwrite"]


def normalise_args(value: Any) -> Any:
    """Canonical form of tool arguments: whitespace collapsed in strings, None values dropped, keys sorted."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {str(k): normalise_args(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0])) if v is not None}
    if isinstance(value, (list, tuple)):
        return [normalise_args(v) for v in value]
    return value


def _canonical(material: dict[str, Any]) -> str:
    return json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class ResponseCache:
    """A folder of JSON files, one per distinct call: `<root>/<tool>/<kk>/<key>.json`."""

    def __init__(self, root: str | os.PathLike[str], mode: CacheMode = "readwrite") -> None:
        if mode not in get_args(CacheMode):
            raise ValueError(f"unknown cache mode {mode!r}; expected one of {', '.join(get_args(CacheMode))}")
        self.root = Path(root)
        self.mode: CacheMode = mode
        if mode != "off":
            self.root.mkdir(parents=True, exist_ok=True)

    @property
    def reads(self) -> bool:
        return self.mode in ("replay", "readwrite")

    @property
    def writes(self) -> bool:
        return self.mode in ("record", "readwrite")

    @property
    def stores_errors(self) -> bool:
        return self.mode == "record"

    @staticmethod
    def key(material: dict[str, Any]) -> str:
        return hashlib.sha256(_canonical(material).encode("utf-8")).hexdigest()

    def _path(self, material: dict[str, Any]) -> Path:
        key = self.key(material)
        tool = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(material.get("tool", "tool")))[:64]
        return self.root / (tool or "tool") / key[:2] / f"{key}.json"

    def get(self, material: dict[str, Any]) -> dict[str, Any] | None:
        """The stored result record {text, ok, error}, or None on a miss (or when reads are off)."""
        if not self.reads:
            return None
        path = self._path(material)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        result = record.get("result")
        return result if isinstance(result, dict) and "text" in result else None

    def put(self, material: dict[str, Any], *, text: str, ok: bool, error: str | None) -> None:
        """Store one result (atomically); a no-op unless the mode writes, and for errors unless recording."""
        if not self.writes or (not ok and not self.stores_errors):
            return
        path = self._path(material)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key_material": material, "result": {"text": text, "ok": ok, "error": error}}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(record, sort_keys=True, ensure_ascii=False, indent=1, default=str))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

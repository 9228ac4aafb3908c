"""Settings from the command line as veRL and Hydra users write them: bare ``key=value`` and ``--config FILE.yaml``.

For the local engine, keys are TrainConfig fields (``lr=1e-6 logger=console,tensorboard``); values are
read as YAML scalars (``1e-6`` a number, ``true`` a boolean, ``[a, b]`` a list, anything else text).
A config file is a YAML mapping of the same fields. For veRL, a config file's nested mapping becomes
dotted Hydra overrides (``trainer: {logger: [console]}`` -> ``trainer.logger=['console']``).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["OverrideError", "config_file_values", "hydra_overrides", "override_values", "parse_command_line"]


class OverrideError(ValueError):
    """A malformed override, an unreadable config file, or an unknown setting (with the closest names)."""


def _scalar(raw: str) -> Any:
    import yaml

    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw
    return raw if value is None and raw.strip() not in ("null", "~") else value


def _check_keys(keys: Iterable[str], known: Iterable[str] | None, where: str) -> None:
    if known is None:
        return
    known = sorted(known)
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; known settings: {', '.join(known)}"
            raise OverrideError(f"{where}: unknown setting {key!r}{hint}")


def override_values(items: Iterable[str], *, known: Iterable[str] | None = None) -> dict[str, Any]:
    """``key=value`` items as a dict (later items win).

    Raises:
        OverrideError: an item without ``=`` or an unknown key (with the closest names).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("+").replace("-", "_")
        if not sep or not key:
            raise OverrideError(f"bad override {item!r}: expected key=value, e.g. lr=1e-6")
        out[key] = _scalar(raw)
    _check_keys(out, known, "override")
    return out


def config_file_values(path: str | Path, *, known: Iterable[str] | None = None) -> dict[str, Any]:
    """The settings of a YAML (or JSON) config file: a mapping of setting -> value.

    Raises:
        OverrideError: the file is missing, not a mapping, or names an unknown setting.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise OverrideError(f"{path}: no such config file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise OverrideError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise OverrideError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    values = {str(k).replace("-", "_"): v for k, v in data.items()}
    _check_keys(values, known, str(path))
    return values


def hydra_overrides(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Nested settings as dotted Hydra overrides (lists and strings in Hydra's syntax)."""
    out: list[str] = []
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.extend(hydra_overrides(value, prefix=name + "."))
        elif isinstance(value, (list, tuple)):
            out.append(f"{name}=[{','.join(_hydra_atom(v) for v in value)}]")
        else:
            out.append(f"{name}={_hydra_atom(value)}")
    return out


def _hydra_atom(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    return "'" + text.replace("'", "\\'") + "'" if any(c in text for c in " ,[]{}=:'\"") or not text else text


def _is_override(token: str) -> bool:
    return "=" in token and not token.startswith("-")


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse `argv`, letting ``key=value`` items stand anywhere on the line for verbs that take overrides.

    argparse only collects positional items that sit together, so ``train g.yaml --steps 2 lr=1e-6`` would
    stop at ``lr=1e-6``; such leftovers join ``args.overrides`` when the verb has them. Anything else left
    over is the usual "unrecognized arguments" error.
    """
    args, extra = parser.parse_known_args(argv)
    if extra:
        if isinstance(getattr(args, "overrides", None), list) and all(_is_override(x) for x in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args

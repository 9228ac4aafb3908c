"""Scoped offline mode for the Hugging Face Hub: nothing is downloaded unless the user asks for it.

matpo-graph reads Hub ids (models, datasets) from the local cache by default. Setting ``HF_HUB_OFFLINE``
in ``os.environ`` would switch the Hub off for the whole process, including the user's own code running
beside it, so instead :func:`hub_access` flips the libraries' offline flags only for the duration of one
load and puts them back afterwards. ``MATPO_GRAPH_HUB_ONLINE=1`` (or ``online=True``) allows downloads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HUB_ONLINE_ENV", "hub_access", "hub_online"]

HUB_ONLINE_ENV = "MATPO_GRAPH_HUB_ONLINE"


def hub_online(online: bool | None = None) -> bool:
    """Whether Hub downloads are allowed: `online` when given, else ``$MATPO_GRAPH_HUB_ONLINE`` (default no)."""
    if online is not None:
        return online
    return os.environ.get(HUB_ONLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def hub_access(*, online: bool | None = None) -> Iterator[bool]:
    """Within the block the Hub libraries are offline unless downloads are allowed; yields that choice.

    Only the flags huggingface_hub and datasets read at call time are touched, and they are restored on
    exit, so the process environment (and code outside the block) sees no change.
    """
    allowed = hub_online(online)
    saved: list[tuple[object, str, object]] = []
    if not allowed:
        for module_name, attr in (("huggingface_hub.constants", "HF_HUB_OFFLINE"),
                                  ("datasets.config", "HF_HUB_OFFLINE"),
                                  ("datasets.config", "HF_DATASETS_OFFLINE")):
            module = _loaded(module_name)
            if module is not None and hasattr(module, attr):
                saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, True)
    try:
        yield allowed
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


def _loaded(name: str) -> object | None:
    try:
        import importlib

        return importlib.import_module(name)
    except ImportError:
        return None

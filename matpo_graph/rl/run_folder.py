"""Reading a run folder back: its settings, the model its RL started from, its checkpoints, its policies.

`export`, `eval` and `--resume` all start from these; none of them trains or writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["ExportError", "checkpoint_base", "pick_checkpoint", "run_policies", "train_config"]


class ExportError(RuntimeError):
    """The run folder has nothing to read back, or its checkpoint does not fit the model it names."""


def train_config(run_dir: Path) -> dict[str, Any]:
    """The run's saved settings (train_config.json)."""
    path = Path(run_dir) / "train_config.json"
    if not path.is_file():
        raise ExportError(f"{run_dir}: not a run folder (no train_config.json)")
    return json.loads(path.read_text())


def checkpoint_base(run_dir: Path) -> Path:
    """The model folder a run's RL started from: its warm-up model, else its base model."""
    from matpo_graph.runtime.models import resolve_model

    sft = Path(run_dir) / "sft" / "model"
    if (sft / "config.json").is_file():
        return sft
    return resolve_model(train_config(run_dir).get("model") or None)


def pick_checkpoint(run_dir: Path, step: int | None) -> Path | None:
    """The checkpoint of `step` (None: the latest; None is returned when the run has none yet)."""
    from matpo_graph.rl.checkpoint import latest_checkpoint

    run_dir = Path(run_dir)
    if step is None:
        return latest_checkpoint(run_dir)
    path = run_dir / "checkpoints" / f"step_{step:06d}"
    if not (path / "model.safetensors").is_file():
        have = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) if (run_dir / "checkpoints").is_dir() else []
        raise ExportError(f"{run_dir}: no checkpoint for step {step} (have: {', '.join(have) or 'none'})")
    return path


def run_policies(run_dir: Path) -> list[str] | None:
    """The policies of a run whose graph binds a role to a lora or separate policy (its checkpoints hold several
    models or adapters, ``<policy>::<key>``), the shared one first; None for a run of the one shared policy."""
    from matpo_graph.compilers.local import load_program
    from matpo_graph.core.policies import bound_policy_names, uses_per_role_policies

    run_dir = Path(run_dir)
    if not (run_dir / "program.json").is_file():
        return None
    program, _ = load_program(run_dir)
    return bound_policy_names(program) if uses_per_role_policies(program) else None

"""`matpo-graph train GRAPH --engine verl`: compile the bundle, prepare data and model, run veRL.

veRL's trainer needs GPUs (it falls back to nccl); on a machine without one this stops with a clear
message after writing the bundle and the data, so the run folder can be copied to a GPU machine and
started there with its ``launch.sh``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["VerlRun", "launch_verl", "prepare_verl_run"]


@dataclass
class VerlRun:
    """A prepared run: the command, its environment additions and the folder it runs in."""

    bundle_dir: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = Path(".")


def _has_override(overrides: list[str], key: str) -> bool:
    return any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)


def _load(graph_path: Path):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import compile_graph, load_program
    from matpo_graph.core.loader import load_graph

    if graph_path.is_dir():
        program, plan = load_program(graph_path)
        copy = graph_path / "graph.yaml"
        graph = load_graph(copy) if copy.is_file() else None
        return graph, program, plan, (copy if copy.is_file() else None)
    graph = load_graph(graph_path)
    program, plan = compile_graph(graph, graph_path.parent)
    return graph, program, plan, graph_path


def prepare_verl_run(graph_path: str | Path, overrides: list[str], out_dir: str | Path, *, env_seed: int = 0) -> VerlRun:
    """Compile the bundle into ``out_dir/bundle`` and fill in data and model when not overridden.

    Without ``data.train_files`` the embedded web's train and dev splits are written as parquet
    (graphs whose tools use ``endpoint: embedded``); without ``actor_rollout_ref.model.path`` (or
    ``MODEL_PATH`` in the environment) the embedded SmolLM2 model folder is used.

    Raises:
        GraphError: the graph is invalid or uses options veRL cannot express.
        ValueError: no training data was given and the graph does not use the embedded web.
    """
    from matpo_graph.compilers.verl import LAUNCH_FILE, compile_verl_bundle, uses_embedded_web
    from matpo_graph.verl_target.dataset import write_parquet

    graph_path, out = Path(graph_path), Path(out_dir).resolve()
    graph, program, plan, source = _load(graph_path)
    bundle = compile_verl_bundle(graph, program, plan, out / "bundle", graph_path=source, env_seed=env_seed)
    env = {"PYTHON": sys.executable, "CHECKPOINT_DIR": str(out / "checkpoints")}
    if not _has_override(overrides, "data.train_files"):
        if not uses_embedded_web(program):
            raise ValueError(
                f"graph {program.graph_name!r} does not use the embedded web: pass data.train_files=... and "
                "data.val_files=... (parquet from `matpo-graph data to-parquet`)"
            )
        from matpo_graph.env.world import build_world

        world = build_world(env_seed)
        for split, name in (("train", "TRAIN_FILES"), ("dev", "VAL_FILES")):
            path = out / "data" / f"{split}.parquet"
            write_parquet(world.questions[split], path, graph_name=program.graph_name)
            env[name] = str(path)
    if not _has_override(overrides, "actor_rollout_ref.model.path") and not os.environ.get("MODEL_PATH"):
        from matpo_graph.runtime.models import resolve_model

        env["MODEL_PATH"] = str(resolve_model(None))
    return VerlRun(bundle.root, ["bash", str(bundle.root / LAUNCH_FILE), *overrides], env, out)


def _gpu_problem() -> str | None:
    try:
        import verl  # noqa: F401
    except ImportError:
        return "veRL is not installed (pip install --no-deps verl==0.9.1 plus its runtime needs, see requirements/)"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "veRL's trainer needs CUDA GPUs and none is visible (torch.cuda.is_available() is False)"
    return None


def launch_verl(graph_path: str | Path, overrides: list[str], out_dir: str | Path) -> int:
    """Compile GRAPH for veRL into `out_dir` and run its launch script; returns the exit status.

    Args:
        graph_path: a graph YAML or a compiled folder.
        overrides: hydra overrides for ``verl.trainer.main_ppo`` (they win over the bundle's).
        out_dir: run folder: ``bundle/``, ``data/``, ``checkpoints/``.
    """
    from matpo_graph.core.errors import GraphError

    try:
        run = prepare_verl_run(graph_path, list(overrides), out_dir)
    except GraphError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problem = _gpu_problem()
    if problem is not None:
        print(
            f"error: {problem}.\nThe bundle is ready in {run.bundle_dir}; on a GPU machine run:\n"
            f"  {' '.join(f'{k}={v}' for k, v in sorted(run.env.items()) if k != 'PYTHON')} {' '.join(run.argv)}",
            file=sys.stderr,
        )
        return 2
    print(f"veRL bundle: {run.bundle_dir}", flush=True)
    return subprocess.call(run.argv, env={**os.environ, **run.env}, cwd=run.cwd)

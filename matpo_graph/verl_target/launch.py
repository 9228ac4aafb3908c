"""`matpo-graph train GRAPH --engine verl`: compile the bundle, prepare data and model, run veRL.

``--device cuda`` (the default where a GPU is visible) is veRL's own path; without a GPU it stops
with a clear message after writing the bundle and the data, so the run folder can be copied to a
GPU machine and started there with its ``launch.sh``. ``--device cpu`` runs veRL's whole trainer on
this machine through :mod:`matpo_graph.verl_target.cpu` (small runs and checks, not speed).

The run starts from the same cold start as the local trainer: with the embedded model and no
``actor_rollout_ref.model.path``, a supervised warm-up on expert demonstrations is trained first
(cached in ``OUT/warmup``), so the planner delegates, workers call tools and groups have signal.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["LOG_FILE", "VerlRun", "Warmstart", "default_device", "device_problem", "prepare_verl_run", "run_logged"]


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


@dataclass(frozen=True)
class Warmstart:
    """The cold start before a veRL run: ``auto`` (warm up the embedded model), ``sft`` or ``none``."""

    mode: str = "auto"
    demos: int | None = None
    drills: int | None = None


def prepare_verl_run(
    graph_path: str | Path,
    overrides: list[str],
    out_dir: str | Path,
    *,
    env_seed: int = 0,
    device: str = "cuda",
    warmstart: Warmstart | None = None,
) -> VerlRun:
    """Compile the bundle into ``out_dir/bundle`` and fill in data and model when not overridden.

    Without ``data.train_files`` the embedded web's train and dev splits are written as parquet
    (graphs whose tools use ``endpoint: embedded``); without ``actor_rollout_ref.model.path`` (or
    ``MODEL_PATH`` in the environment) the embedded SmolLM2 model is used, after the cold start
    (see :class:`Warmstart`; the warm-up is reused when ``out_dir/warmup/model`` exists).

    Raises:
        GraphError: the graph is invalid or uses options veRL cannot express.
        ValueError: no training data was given and the graph does not use the embedded web.
    """
    from matpo_graph.compilers.verl import LAUNCH_FILE, compile_verl_bundle
    from matpo_graph.verl_target.dataset import write_parquet

    graph_path, out = Path(graph_path), Path(out_dir).resolve()
    graph, program, plan, source = _load(graph_path)
    bundle = compile_verl_bundle(graph, program, plan, out / "bundle", graph_path=source, env_seed=env_seed, device=device)
    env = {"PYTHON": sys.executable, "CHECKPOINT_DIR": str(out / "checkpoints")}
    if not _has_override(overrides, "data.train_files"):
        if not program.uses_embedded_web():
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
        env["MODEL_PATH"] = str(_initial_model(program, plan, out, warmstart or Warmstart(), env_seed=env_seed))
    return VerlRun(bundle.root, ["bash", str(bundle.root / LAUNCH_FILE), *overrides], env, out)


def _initial_model(program, plan, out: Path, warmstart: Warmstart, *, env_seed: int) -> Path:  # type: ignore[no-untyped-def]
    """The embedded model, warmed up on expert demonstrations unless ``warmstart.mode == "none"``."""
    from matpo_graph.runtime.models import resolve_model

    base = resolve_model(None)
    warm = out / "warmup" / "model"
    if (warm / "config.json").exists():
        return warm
    if warmstart.mode == "none":
        return base
    from matpo_graph.coldstart.defaults import WARMUP_DEMOS, WARMUP_DRILLS
    from matpo_graph.coldstart.sft import run_sft

    log.info("cold start: supervised warm-up on expert demonstrations before veRL (the embedded model cannot call tools yet)")
    demos = WARMUP_DEMOS if warmstart.demos is None else warmstart.demos
    drills = WARMUP_DRILLS if warmstart.drills is None else warmstart.drills
    return Path(run_sft(program, plan, model_dir=base, out_dir=out / "warmup", demos=demos, drills=drills, env_seed=env_seed))


def default_device() -> str:
    """``cuda`` where torch sees a GPU, else ``cpu``."""
    try:
        import torch
    except ImportError:
        return "cuda"
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_problem(device: str) -> str | None:
    """Why veRL cannot run on `device` here (None when it can)."""
    try:
        from importlib.metadata import version

        found = version("verl")
    except Exception:
        return "veRL is not installed (pip install --no-deps verl==0.9.1 plus its runtime needs, see requirements/)"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if device == "cpu":
        from matpo_graph.verl_target.cpu import SUPPORTED_VERL

        if found != SUPPORTED_VERL:
            return f"the CPU support patches veRL {SUPPORTED_VERL}; found veRL {found}"
        return None
    if not torch.cuda.is_available():
        return ("veRL's trainer needs CUDA GPUs and none is visible (torch.cuda.is_available() is False); "
                "--device cpu runs it on this machine's CPU")
    return None


LOG_FILE = "verl.log"
"""veRL's console output, appended by every launch (a resumed run adds to it); `matpo-graph report` reads it."""


def run_logged(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> int:
    """Run `argv`, echoing its output and appending it to `log`; returns the exit status."""
    with open(log, "ab") as sink:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            sink.write(line)
            sink.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
        return proc.wait()

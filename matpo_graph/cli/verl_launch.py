"""`matpo-graph train --engine verl`: compile the graph for veRL, then run its launch script here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from matpo_graph.cli.output import EXIT_USAGE
from matpo_graph.verl_target.launch import (
    LOG_FILE,
    Warmstart,
    default_device,
    device_problem,
    prepare_verl_run,
    run_logged,
)

__all__ = ["launch_verl"]


def launch_verl(
    graph_path: str | Path,
    overrides: list[str],
    out_dir: str | Path,
    *,
    device: str | None = None,
    warmstart: Warmstart | None = None,
) -> int:
    """Compile GRAPH for veRL into `out_dir` and run its launch script; returns the exit status.

    Args:
        graph_path: a graph YAML or a compiled folder.
        overrides: hydra overrides for ``verl.trainer.main_ppo`` (they win over the bundle's).
        out_dir: run folder: ``bundle/``, ``data/``, ``warmup/``, ``checkpoints/``.
        device: ``cuda`` or ``cpu`` (default: cuda where a GPU is visible, else cpu).
        warmstart: the cold start when the embedded model is used (default: auto).
    """
    from matpo_graph.core.errors import GraphError

    device = device or default_device()
    problem = device_problem(device)
    if problem is not None and device == "cpu":  # nothing to hand over to another machine
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        run = prepare_verl_run(graph_path, list(overrides), out_dir, device=device, warmstart=warmstart)
    except GraphError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = device_problem(device)
    if problem is not None:
        print(
            f"error: {problem}.\nThe bundle is ready in {run.bundle_dir}; on a GPU machine run:\n"
            f"  {' '.join(f'{k}={v}' for k, v in sorted(run.env.items()) if k != 'PYTHON')} {' '.join(run.argv)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(f"veRL bundle: {run.bundle_dir} (device {device}); log: {run.cwd / LOG_FILE}", flush=True)
    return run_logged(run.argv, {**os.environ, **run.env}, run.cwd, run.cwd / LOG_FILE)

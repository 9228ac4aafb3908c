"""Where a run's metrics go: the `logger` option, as veRL's ``trainer.logger`` (several sinks at once).

=============  ================================================================================
``console``    one line per record, ``step:N - key:value - ...`` as veRL's console logger prints it
``jsonl``      RUN_DIR/metrics.jsonl, one flat record per line (what ``report`` and ``show`` read)
``tensorboard``  event files under RUN_DIR/tensorboard (``tensorboard --logdir RUN_DIR/tensorboard``)
``wandb``      Weights & Biases, when the ``wandb`` package is installed; offline (files under
               RUN_DIR/wandb, no network) unless ``WANDB_MODE`` says otherwise
=============  ================================================================================

Records are written in the shared vocabulary (matpo_graph.tracking.metric_names), so a local run and a
veRL run log the same quantities under the same names.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

__all__ = ["DEFAULT_LOGGERS", "LoggerName", "Tracker", "TrackingError", "parse_loggers"]

LoggerName = Literal["console", "jsonl", "tensorboard", "wandb"]
LOGGER_NAMES: tuple[str, ...] = get_args(LoggerName)
DEFAULT_LOGGERS: tuple[str, ...] = ("console", "jsonl", "tensorboard")


class TrackingError(RuntimeError):
    """A requested logger cannot run (its package is missing); the message says what to install."""


def parse_loggers(value: str | Iterable[str]) -> list[str]:
    """Logger names from ``console,tensorboard``, veRL's ``['console','wandb']`` or a list; checked.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if isinstance(value, str):
        text = value.strip().strip("[]")
        items = [part.strip().strip("'\"") for part in text.split(",")]
    else:
        items = [str(v).strip() for v in value]
    names: list[str] = []
    for name in items:
        if not name:
            continue
        if name == "file":  # veRL's name for its jsonl logger
            name = "jsonl"
        if name not in LOGGER_NAMES:
            raise ValueError(f"unknown logger {name!r}; choose from {', '.join(LOGGER_NAMES)} (several at once: "
                             "logger=console,jsonl,tensorboard)")
        if name not in names:
            names.append(name)
    return names


def _scalars(row: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


class Tracker:
    """Fans each metrics record out to the chosen sinks; build once per run, close at the end.

    Args:
        loggers: names from LOGGER_NAMES.
        run_dir: the run folder (metrics.jsonl, tensorboard/, wandb/ go there).
        project: project name (W&B), as veRL's ``trainer.project_name``.
        experiment: experiment name (W&B run name), as veRL's ``trainer.experiment_name``.
        config: the run's settings, recorded by W&B.
        echo: how console lines are printed (default ``print``; the progress display passes its own).
        required: loggers the user asked for by name; a missing package is then an error, not a warning.

    Raises:
        TrackingError: a required logger's package is not installed.
    """

    def __init__(self, loggers: Sequence[str], *, run_dir: Path, project: str = "matpo-graph",
                 experiment: str | None = None, config: Mapping[str, Any] | None = None,
                 echo: Callable[[str], None] | None = None, required: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.loggers = parse_loggers(loggers)
        self.echo = echo or print
        self._tb: Any = None
        self._wandb: Any = None
        self.active: list[str] = []
        for name in self.loggers:
            try:
                self._open(name, project=project, experiment=experiment or self.run_dir.name, config=config)
            except TrackingError:
                if required:
                    raise
                warnings.warn(f"logger {name!r} is off: its package is not installed", UserWarning, stacklevel=2)
                continue
            self.active.append(name)

    def _open(self, name: str, *, project: str, experiment: str, config: Mapping[str, Any] | None) -> None:
        if name == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter  # type: ignore[attr-defined]
            except ImportError as exc:
                raise TrackingError(f"logger 'tensorboard' needs torch and tensorboard "
                                    f"(pip install 'matpo-graph[train]'): {exc}") from None
            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        elif name == "wandb":
            try:
                import wandb  # type: ignore[import-not-found]
            except ImportError:
                raise TrackingError("logger 'wandb' needs the wandb package (pip install wandb)") from None
            mode = os.environ.get("WANDB_MODE") or "offline"
            self._wandb = wandb.init(project=project, name=experiment, dir=str(self.run_dir), mode=mode,
                                     config=dict(config or {}), reinit="finish_previous")
        elif name == "jsonl":
            self.run_dir.mkdir(parents=True, exist_ok=True)

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    def log(self, row: Mapping[str, Any]) -> None:
        """Write one record (a dict with ``step``) to every active sink."""
        step = int(row.get("step", 0))
        if "jsonl" in self.active:
            with open(self.metrics_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(dict(row), sort_keys=True, default=float) + "\n")
        scalars = _scalars(row)
        if "console" in self.active:
            self.echo(" - ".join([f"step:{step}", *(f"{k}:{v:.6g}" for k, v in sorted(scalars.items()))]))
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        """Flush and close every sink (idempotent)."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

"""Ray worker setup hook: makes the MATPO trainer mode known in every process of a veRL job.

veRL resolves ``trainer.v1.trainer_mode`` in its TaskRunner actor, a separate process, from a registry
filled at import time. The compiled launch script sets
``ray_kwargs.ray_init.runtime_env.worker_process_setup_hook`` to :func:`setup_worker`, which Ray calls
when each worker process starts.
"""

from __future__ import annotations

__all__ = ["setup_worker"]


def setup_worker() -> None:
    """Register the MATPO trainer (importing its module does it). Safe to call more than once."""
    import matpo_graph.verl_target.trainer  # noqa: F401

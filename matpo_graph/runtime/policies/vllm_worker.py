"""Code that runs inside vLLM's model worker: a fingerprint of the weights it serves.

vLLM mixes this class into its worker (``worker_extension_cls``) and calls its methods by name through
``collective_rpc``; only names and plain data cross the process boundary, so nothing is pickled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["WORKER_EXTENSION", "MatpoWorkerExtension", "weight_fingerprint"]

WORKER_EXTENSION = "matpo_graph.runtime.policies.vllm_worker.MatpoWorkerExtension"


def weight_fingerprint(tensors: Mapping[str, Any], dtype: Any | None = None) -> dict[str, tuple[float, float]]:
    """name -> (sum, sum of squares) in float64, after a cast to `dtype` (what the engine stores).

    Exact enough to tell two versions of a layer apart after one small RL step: a change below the
    storage precision moves no element, but over a whole matrix some elements cross a rounding boundary.
    """
    out: dict[str, tuple[float, float]] = {}
    for name, t in tensors.items():
        x = (t.detach().to(dtype) if dtype is not None else t.detach()).double()
        out[name] = (float(x.sum()), float((x * x).sum()))
    return out


class MatpoWorkerExtension:
    """Methods vLLM adds to its worker."""

    def matpo_weight_fingerprint(self, names: list[str]) -> dict[str, tuple[float, float]]:
        """The fingerprint of the named parameters this worker's model holds. Unknown names are left out, and so
        are weights the CPU backend repacked for its GEMM kernels (it leaves an empty tensor in their place)."""
        runner = self.model_runner  # type: ignore[attr-defined]
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        params = dict(model.named_parameters())
        return weight_fingerprint({n: params[n] for n in names if n in params and params[n].numel() > 0})

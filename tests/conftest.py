"""Suite-wide settings."""

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Imported up front: importing hypothesis for the first time after the vLLM engine has run can trip
# CPython 3.11's AST recursion check inside pytest's assertion rewriter.
import hypothesis  # noqa: F401

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def _pin_xdist_worker() -> None:
    """Under pytest-xdist, give each worker one core of its own: one torch thread, and its vLLM engines bound to
    that core. Two workers of two threads each on two cores contend (OpenMP threads spin while they wait); one
    thread each keeps both cores busy with no contention, and the serial parts of the tests (imports, engine
    start-up, Python) overlap. Set before torch or vLLM is imported; spawned processes inherit it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    core = cores[int(worker[2:]) % len(cores)]
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    if "torch" in sys.modules:  # imported already by a plugin: its thread pool did not read the variables
        sys.modules["torch"].set_num_threads(1)


_pin_xdist_worker()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Tests that start heavy subprocesses of their own (veRL's Ray cluster, FSDP actor and vLLM server need ~16 GB
# on this 24 GB machine) run first, while this process is still small: the in-process engine tests grow it by
# several GB, and the two together can push the kernel into killing an engine process mid-run.
RUN_FIRST = ("tests/verl/test_verl_cpu_run.py",)


# The longest modules (docs/testing.md, "Results"), handed to pytest-xdist workers first.
LONGEST = ("tests/model/test_forward_engine_real.py", "tests/rl/test_policy_engine_lora.py", "tests/rl/test_lora_engine.py",
           "tests/rl/test_train_engine.py", "tests/rl/test_policy_engine_separate.py", "tests/runtime/test_engine_vllm.py",
           "tests/rl/test_policy_engine_shared.py", "tests/bench/test_learning_bench_run.py")


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201 - pytest hook signature
    # Then the longest modules and the other modules with engine tests (minutes each), so that pytest-xdist
    # (--dist loadfile --no-loadscope-reorder) hands them out first and the quick modules fill in at the end,
    # instead of one worker finishing a long module alone.
    def module(item) -> str:  # noqa: ANN001
        return item.nodeid.split("::")[0]

    heavy = {module(item) for item in items if item.get_closest_marker("engine")}
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: (not item.nodeid.startswith(RUN_FIRST), rank.get(module(item), len(rank)),
                                 module(item) not in heavy))


@pytest.fixture(scope="module")
def module_tmp(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for one module's shared runs, deleted when the module ends without a new failure.

    Checkpoints of the embedded model weigh GBs (a veRL run leaves ~4 GB); kept until the session ends, they
    filled a CI disk. A failing module keeps its folder for a look.
    """
    failed_before = request.session.testsfailed
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    yield path
    if request.session.testsfailed == failed_before:
        shutil.rmtree(path, ignore_errors=True)

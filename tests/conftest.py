"""Suite-wide settings."""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

# Imported up front: importing hypothesis for the first time after the vLLM engine has run can trip
# CPython 3.11's AST recursion check inside pytest's assertion rewriter.
import hypothesis  # noqa: F401

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Tests that start heavy subprocesses of their own (veRL's Ray cluster, FSDP actor and vLLM server need ~16 GB
# on this 24 GB machine) run first, while this process is still small: the in-process engine tests grow it by
# several GB, and the two together can push the kernel into killing an engine process mid-run.
RUN_FIRST = ("tests/verl/test_verl_cpu_run.py",)


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201 - pytest hook signature
    items.sort(key=lambda item: not item.nodeid.startswith(RUN_FIRST))  # stable: order within each part kept


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

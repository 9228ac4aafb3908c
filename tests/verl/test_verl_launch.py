"""`matpo-graph train GRAPH --engine verl`: bundle, data and model prepared; a clear stop without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")

from matpo_graph.cli import main  # noqa: E402
from matpo_graph.cli.verl_launch import launch_verl  # noqa: E402
from matpo_graph.verl_target.launch import Warmstart, prepare_verl_run  # noqa: E402

from verl_helpers import TINY_GRAPH  # noqa: E402

pytestmark = pytest.mark.verl


def test_prepare_verl_run_writes_bundle_data_and_picks_the_embedded_model(tmp_path: Path, model_dir: Path) -> None:
    import pyarrow.parquet as pq

    from matpo_graph.env.world import build_world

    run = prepare_verl_run(TINY_GRAPH, ["trainer.total_training_steps=2"], tmp_path / "run", env_seed=0,
                           warmstart=Warmstart("none"))
    assert run.argv == ["bash", str(run.bundle_dir / "launch.sh"), "trainer.total_training_steps=2"]
    assert (run.bundle_dir / "agent_loop.yaml").is_file() and run.cwd == (tmp_path / "run").resolve()
    assert Path(run.env["MODEL_PATH"]) == model_dir
    train = pq.read_table(run.env["TRAIN_FILES"]).to_pylist()
    assert [r["extra_info"]["question"] for r in train] == [q.question for q in build_world(0).questions["train"]]
    assert Path(run.env["VAL_FILES"]).name == "dev.parquet"
    assert run.env["CHECKPOINT_DIR"] == str((tmp_path / "run" / "checkpoints").resolve())


def test_prepare_verl_run_starts_from_an_existing_warm_up(tmp_path: Path) -> None:
    warm = tmp_path / "run" / "warmup" / "model"
    warm.mkdir(parents=True)
    (warm / "config.json").write_text("{}")
    run = prepare_verl_run(TINY_GRAPH, [], tmp_path / "run")  # auto: the cached warm-up, not a new one
    assert Path(run.env["MODEL_PATH"]) == warm.resolve()


def test_cpu_bundle_exports_the_cpu_platform_and_its_overrides_compose(tmp_path: Path) -> None:
    from matpo_graph.compilers.verl import CPU_ENVIRONMENT, CPU_OVERRIDES

    from verl_helpers import compose_verl

    run = prepare_verl_run(TINY_GRAPH, ["data.train_files=/d/t.parquet", "actor_rollout_ref.model.path=/m"],
                           tmp_path / "run", device="cpu")
    script = (run.bundle_dir / "launch.sh").read_text()
    assert "unset CUDA_VISIBLE_DEVICES" in script
    for key, value in CPU_ENVIRONMENT:
        assert f"export {key}=${{{key}:-{value}}}" in script
    assert script.rstrip().endswith('"${graph_args[@]}" "${run_args[@]}" "${cpu_args[@]}" "$@"')  # the user's overrides win
    cfg = compose_verl(list(CPU_OVERRIDES))
    assert cfg.trainer.device == "cpu" and cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.rollout.enable_sleep_mode is False and cfg.ray_kwargs.ray_init.num_gpus == 1
    assert main(["compile", str(TINY_GRAPH), "--target", "verl", "--device", "cpu", "-o", str(tmp_path / "compiled")]) == 0
    assert (tmp_path / "compiled" / "launch.sh").read_text() == script  # the CLI writes the same CPU launch script
    cuda = prepare_verl_run(TINY_GRAPH, ["data.train_files=/d/t.parquet", "actor_rollout_ref.model.path=/m"], tmp_path / "gpu")
    assert "cpu_args" not in (cuda.bundle_dir / "launch.sh").read_text() and "VERL_PLATFORM" not in (cuda.bundle_dir / "launch.sh").read_text()


def test_prepare_verl_run_leaves_given_data_and_model_alone(tmp_path: Path) -> None:
    overrides = ["data.train_files=/d/t.parquet", "data.val_files=/d/v.parquet", "actor_rollout_ref.model.path=/m"]
    run = prepare_verl_run(TINY_GRAPH, overrides, tmp_path / "run")
    assert "TRAIN_FILES" not in run.env and "MODEL_PATH" not in run.env
    assert not (tmp_path / "run" / "data").exists()


def test_prepare_verl_run_accepts_a_compiled_folder(tmp_path: Path) -> None:
    assert main(["compile", str(TINY_GRAPH), "--target", "verl", "-o", str(tmp_path / "compiled")]) == 0
    run = prepare_verl_run(tmp_path / "compiled", ["data.train_files=/d/t.parquet", "actor_rollout_ref.model.path=/m"], tmp_path / "run")
    assert (run.bundle_dir / "program.json").read_text() == (tmp_path / "compiled" / "program.json").read_text()


def test_prepare_verl_run_asks_for_data_when_the_graph_has_no_embedded_web(tmp_path: Path) -> None:
    data = yaml.safe_load(TINY_GRAPH.read_text())
    data["tools"]["web_search"]["config"] = {"endpoint": "https://google.serper.dev/search"}  # a remote search, not the embedded web
    graph = tmp_path / "remote.yaml"
    graph.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ValueError, match="data.train_files"):
        prepare_verl_run(graph, [], tmp_path / "run")


def test_train_engine_verl_stops_clearly_without_a_gpu(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the run would start")
    code = main(["train", str(TINY_GRAPH), "data.train_files=/d/t.parquet", "actor_rollout_ref.model.path=/m",
                 "--engine", "verl", "--device", "cuda", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert "GPU" in err and "launch.sh" in err and str((tmp_path / "run" / "bundle").resolve()) in err
    assert "--device cpu" in err
    assert launch_verl(tmp_path / "missing.yaml", [], tmp_path / "run2", device="cuda") == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_cpu_device_refuses_another_verl_version_before_any_work(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.9.2" if name == "verl" else real(name))
    assert launch_verl(TINY_GRAPH, [], tmp_path / "run", device="cpu") == 2
    assert "patches veRL 0.9.1; found veRL 0.9.2" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()

"""Shared helpers of the veRL target tests: veRL's own hydra config and a compiled test bundle."""

from __future__ import annotations

import os
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
TINY_GRAPH = FIXTURES / "tiny_delegate.yaml"
REPO = Path(__file__).resolve().parents[2]


def verl_config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def compose_verl(overrides: list[str]):  # type: ignore[no-untyped-def]
    """veRL's ppo_trainer config with `overrides`, composed by hydra as `verl.trainer.main_ppo` does."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def compile_tiny(out: Path, graph_path: Path = TINY_GRAPH):  # type: ignore[no-untyped-def]
    from matpo_graph.compilers.local import compile_graph
    from matpo_graph.compilers.verl import compile_verl_bundle
    from matpo_graph.core.loader import load_graph

    graph = load_graph(graph_path)
    program, plan = compile_graph(graph, graph_path.parent)
    bundle = compile_verl_bundle(graph, program, plan, out, graph_path=graph_path)
    return program, plan, bundle


class MemoryKV:
    """An in-memory stand-in for the transfer queue's key-value calls, for running veRL's V1 code on CPU.

    veRL's V1 agent-loop worker and trainer talk to TransferQueue (Ray actors) only through
    ``async_kv_batch_put``, ``kv_batch_get`` and ``kv_batch_put``. This keeps rows per key and hands
    back variable-length tensors as jagged nested tensors, as the queue does.
    """

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self.tags: dict[str, dict] = {}
        self.order: list[str] = []

    async def async_kv_batch_put(self, keys, fields, tags=None, partition_id="train"):  # type: ignore[no-untyped-def]
        self.kv_batch_put(keys=keys, partition_id=partition_id, fields=fields)
        for key, tag in zip(keys, tags or [{}] * len(keys), strict=True):
            self.tags[key] = dict(tag)

    def kv_batch_put(self, keys, partition_id, fields):  # type: ignore[no-untyped-def]
        for i, key in enumerate(keys):
            if key not in self.rows:
                self.rows[key] = {}
                self.order.append(key)
            for name in fields.keys():
                value = fields[name]
                self.rows[key][name] = value[i] if hasattr(value, "__getitem__") else value
        from transfer_queue import KVBatchMeta

        persisted = sorted(set().union(*(self.rows[k] for k in keys)))
        return KVBatchMeta(keys=list(keys), tags=[self.tags.get(k, {}) for k in keys], partition_id=partition_id, fields=persisted)

    def kv_batch_get(self, keys, partition_id, select_fields=None):  # type: ignore[no-untyped-def]
        import torch
        from tensordict import NonTensorStack, TensorDict

        names = select_fields or list(self.rows[keys[0]])
        names = [n for n in names if all(n in self.rows[k] for k in keys)]
        out = {}
        for name in names:
            values = [self.rows[k][name] for k in keys]
            if all(isinstance(v, torch.Tensor) for v in values):
                if all(v.dim() == 1 for v in values):
                    out[name] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
                else:
                    out[name] = torch.stack(values)
            else:
                out[name] = NonTensorStack(*[getattr(v, "data", v) for v in values])
        return TensorDict(out, batch_size=len(keys))


def verl_postprocess(outputs_by_session, uid: str, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Run veRL's V1 ``AgentLoopWorkerTQ._agent_loop_postprocess`` on each session's outputs.

    The worker is built without Ray (its constructor starts services); the transfer queue's calls
    must already point at a :class:`MemoryKV`.
    """
    import asyncio

    from verl.trainer.ppo.v1 import agent_loop_tq

    worker = object.__new__(agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__)
    worker.processor, worker.tokenizer, worker.mm_processor_kwargs = None, tokenizer, {}
    worker.reward_loop_worker_handles, worker.distillation_enabled = None, False

    async def run():  # type: ignore[no-untyped-def]
        for session, outputs in enumerate(outputs_by_session):
            kwargs = {"uid": uid, "session_id": session, "global_steps": 1, "index": 0,
                      "raw_prompt": [{"role": "user", "content": "Q?"}], "data_source": "matpo_graph/test"}
            await worker._agent_loop_postprocess(outputs, False, **kwargs)

    asyncio.run(run())


def verl_advantages(cfg, store: MemoryKV, loss_agg: str = "tree_token_mean") -> list[str]:  # type: ignore[no-untyped-def]
    """veRL's V1 advantage step plus MATPO's weights (MatpoTrainer._compute_advantage) over the store."""
    from transfer_queue import KVBatchMeta

    from matpo_graph.verl_target.trainer import MatpoTrainer

    keys = list(store.order)
    for key in keys:  # the actor's recomputed log-probs (veRL's step 4); equal to the sampling ones here
        store.rows[key]["old_log_probs"] = store.rows[key]["rollout_log_probs"].clone()
    trainer = object.__new__(MatpoTrainer)  # no Ray, no GPU: only the advantage step runs
    trainer.config, trainer.matpo_loss_agg, trainer.matpo_steps = cfg, loss_agg, 1
    trainer._compute_advantage(KVBatchMeta(keys=keys, tags=[store.tags[k] for k in keys], partition_id="train"), {})
    return keys


def patch_transfer_queue(monkeypatch, store: MemoryKV) -> None:  # type: ignore[no-untyped-def]
    import transfer_queue

    for name in ("async_kv_batch_put", "kv_batch_put", "kv_batch_get"):
        monkeypatch.setattr(transfer_queue, name, getattr(store, name))

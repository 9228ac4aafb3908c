"""The rollout half of training: engine, tools, embedded web and executor, driven from sync trainer code.

A RolloutSession owns one asyncio loop; the vLLM engine, the tools' HTTP clients and the executor all
live on it, so sync code (the trainer) calls into it with `_run`.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.reward import score_tree, with_reward
from matpo_graph.core.rollout import RolloutTree
from matpo_graph.rl.config import TrainConfig
from matpo_graph.runtime.policy import SamplingParams
from matpo_graph.tracking.eval_records import write_eval_record
from matpo_graph.tracking.rollout_metrics import rollout_metrics

__all__ = ["RolloutSession", "engine_dtype"]


def engine_dtype(cfg: Any, cpuinfo: str | None = None) -> str:
    """The rollout engine's dtype for `cfg.engine_dtype` (see TrainConfig): `auto` serves bf16 only when the
    CPU has native bf16 and the PPO ratio's old logprobs come from the trainer."""
    from matpo_graph.model.precision import cpu_has_native_bf16

    if cfg.engine_dtype != "auto":
        return str(cfg.engine_dtype)
    return "bfloat16" if cfg.old_logprobs == "trainer" and cpu_has_native_bf16(cpuinfo) else "float32"


class RolloutSession:
    """Context manager: starts the embedded web (when needed), the policy engine and the tools."""

    def __init__(self, program: Program, cfg: TrainConfig, *, model_dir: Path, plan: CreditPlan | None = None,
                 run_dir: Path | None = None, first_step: int = 0) -> None:
        self.program = program
        self.first_step = first_step  # steps a resumed run already has (the progress display counts on from it)
        self.cfg = cfg
        self.model_dir = Path(model_dir)
        self.plan = plan
        self.run_dir = run_dir
        self.loop = asyncio.new_event_loop()
        self.web: Any = None
        self.policy: Any = None
        self.tools: Any = None
        self.executor: Any = None
        self.board: Any = None  # RunProgress: steps, rollouts, updates and evaluation with time left
        self.tracker: Any = None  # Tracker: the `logger` sinks (training runs only)
        self.per_role: Any = None  # PerRoleEngines, for graphs with lora or separate policies

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "RolloutSession":
        from matpo_graph.runtime.chat import ChatTokenizer
        from matpo_graph.runtime.executor import Executor
        from matpo_graph.tools.registry import build_tools
        from matpo_graph.tracking.progress import CountingPolicy, RunProgress

        self.board = RunProgress(total_steps=self.cfg.steps if self.run_dir is not None else 0, first_step=self.first_step)
        self.board.begin("starting engine and tools", total=None, unit="")
        need_web = self.program.uses_embedded_web() or self.cfg.data is None or self.cfg.eval_data is None
        if need_web:
            from matpo_graph.env.server import serve_in_thread

            self.web = serve_in_thread(seed=self.cfg.env_seed, n_entities=self.cfg.env_entities, noise=self.cfg.noise)
        cache = None
        if self.cfg.tool_cache != "off":
            from matpo_graph.tools.cache import ResponseCache

            cache = ResponseCache(Path(self.cfg.tool_cache_dir), mode=self.cfg.tool_cache)
        self.tools = build_tools(self.program.tools, embedded_url=self.web.url if self.web else None, cache=cache)
        self.tokenizer = ChatTokenizer.from_pretrained(self.model_dir)
        self.policy = CountingPolicy(self._run(self._make_policy()))
        sampling = SamplingParams(temperature=self.cfg.temperature, max_tokens=512)
        self.executor = Executor(self.program, self.policy, self.tokenizer, self.tools, sampling=sampling)
        self._open_tracker()
        self.board.end()
        return self

    async def _make_policy(self) -> Any:
        from matpo_graph.core.policies import uses_per_role_policies

        if uses_per_role_policies(self.program):
            if self.cfg.policy != "vllm":
                raise ValueError(f"per-role policies (lora, separate) are served by vLLM; --policy {self.cfg.policy} "
                                 "would play every role with one model")
            from matpo_graph.runtime.policies.per_role import PerRoleEngines

            self.per_role = PerRoleEngines(
                self.program, self.model_dir, kv_cache_gib=self.cfg.kv_cache_gib, seed=self.cfg.seed,
                max_model_len=self.program.context_tokens + 1024, dtype=engine_dtype(self.cfg),
            )
            return self.per_role.router
        if self.cfg.policy == "vllm":
            from matpo_graph.runtime.policies.vllm import VLLMPolicy

            return VLLMPolicy(
                self.model_dir, kv_cache_gib=self.cfg.kv_cache_gib, seed=self.cfg.seed,
                max_model_len=self.program.context_tokens + 1024, dtype=engine_dtype(self.cfg),
            )
        from matpo_graph.runtime.policies import make_policy

        return make_policy(self.cfg.policy, self.model_dir)

    def __exit__(self, *exc: object) -> None:
        if self.board is not None:
            self.board.stop()
        if self.tracker is not None:
            self.tracker.close()
        try:
            if self.tools is not None and hasattr(self.tools, "aclose"):
                self._run(self.tools.aclose())
        finally:
            if self.per_role is not None:
                self.per_role.shutdown()
            elif self.policy is not None and hasattr(self.policy, "shutdown"):
                self.policy.shutdown()
            if self.web is not None:
                self.web.stop()
            # Cancel what the engine left running on this loop (its output handler) before closing it.
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    # ------------------------------------------------------------------ data

    def train_questions(self) -> list[Any]:
        return self._questions(self.cfg.data, "train")

    def eval_questions(self) -> list[Any]:
        return self._questions(self.cfg.eval_data, "dev")

    def _questions(self, path: str | None, split: str) -> list[Any]:
        if path is not None:
            from matpo_graph.data.qa import load_qa

            return load_qa(path, columns=self.cfg.data_columns)
        items = list(self.web.world.questions[split])
        from matpo_graph.env.questions import within_hops

        short = within_hops(items, self.cfg.max_hops)
        return short or items

    # ------------------------------------------------------------------ rollouts

    def rollout_groups(self, items: list[Any], *, group_size: int, step: int, temperature: float | None = None,
                       tag: str = "s", label: str = "rollouts", paired: bool = False) -> list[RolloutTree]:
        """`group_size` root rollouts for each question, all concurrently through the shared engine.

        Trees are started exactly as ``Executor.run_group`` starts a group (tree ids ``<group>/<i>``, seeds
        ``seed + i``), one task per tree, so the progress display counts trees as they finish. Training
        trees get fresh seeds every step; ``paired`` trees (evaluations) get the same tree ids and seeds at
        every step, so an engine that honours request seeds draws the k-th sample of a question from the
        same random numbers before and after training, and a step-0 versus step-N difference is paired.
        """
        key = tag if paired else f"{tag}{step}"
        seed = random.Random(f"{self.cfg.seed}:{tag}" if paired else f"{self.cfg.seed}:{tag}:{step}").randrange(2**31)
        executor = self.executor
        if temperature is not None:
            from matpo_graph.runtime.executor import Executor

            executor = Executor(self.program, self.policy, self.tokenizer, self.tools,
                                sampling=SamplingParams(temperature=temperature, max_tokens=512))

        if group_size < 1:
            raise ValueError(f"group size must be >= 1, got {group_size}")
        board, counter = self.board, self.policy

        def tokens() -> int | None:
            return getattr(counter, "generated_tokens", None)

        async def one(item: Any, i: int, k: int) -> RolloutTree:
            tree = await executor.run(
                item.question, tree_id=f"{key}-{item.id}/{k}", group_id=f"{key}-{item.id}",
                answers=item.answers, seed=seed + 1000 * i + k, metadata={"question_id": item.id, **item.metadata})
            if board is not None:
                board.advance(1, tokens=tokens())
            return tree

        async def all_trees() -> list[RolloutTree]:
            return list(await asyncio.gather(
                *(one(item, i, k) for i, item in enumerate(items) for k in range(group_size))))

        if board is not None:
            board.begin(label, total=len(items) * group_size, unit="trees", tokens=tokens() or 0)
        try:
            return self._run(all_trees())
        finally:
            if board is not None:
                board.end()

    def score(self, trees: list[RolloutTree], plan: CreditPlan) -> list[RolloutTree]:
        """Rewards for every tree (the LLM judge when the plan asks for it, degrading to a local scorer)."""
        if plan.accuracy_scorer == "judge" and plan.judge:
            from matpo_graph.judge import score_trees_with_judge

            return self._run(score_trees_with_judge(trees, plan))
        return [with_reward(t, score_tree(t, plan)) for t in trees]

    def load_weights(self, state_dict: dict[str, Any]) -> float:
        if hasattr(self.policy, "load_weights"):
            return float(self._run(self.policy.load_weights(state_dict)))
        return 0.0

    # ------------------------------------------------------------------ per-role policies

    def load_policy_weights(self, policy: str, state_dict: dict[str, Any]) -> float:
        """New full weights for the engine of the shared policy or of a separate policy."""
        return float(self._run(self.per_role.load_weights(policy, state_dict)))

    def load_adapter(self, policy: str, folder: Path) -> float:
        """Serve a new version of a lora policy's adapter (no engine restart)."""
        return float(self._run(self.per_role.load_adapter(policy, folder)))

    def adapter_folder(self, policy: str, step: int) -> Path:
        """Where version `step` of an adapter is written; older versions of it are removed (the engine has
        replaced them)."""
        import shutil
        import tempfile

        if self.run_dir is None:
            if getattr(self, "_scratch", None) is None:
                self._scratch = Path(tempfile.mkdtemp(prefix="matpo-adapters-"))
            root = self._scratch / policy
        else:
            root = Path(self.run_dir) / "adapters" / policy
        if root.exists():
            for old in root.iterdir():
                shutil.rmtree(old, ignore_errors=True)
        return root / f"step_{step:06d}"

    def policy_logprobs(self, policy: str, token_ids: list[int]) -> list[float] | None:
        """The serving engine's logprobs of a fixed sequence under `policy` (token 1 onwards)."""
        if self.per_role is None:
            return None
        return self._run(self.per_role.score(policy, list(token_ids)))[1:]

    def engine_fingerprint(self, names: list[str]) -> dict[str, tuple[float, float]] | None:
        """The fingerprint of the named weights the engine serves (vLLM only; None for other backends)."""
        if not hasattr(self.policy, "weight_fingerprint"):
            return None
        return dict(self._run(self.policy.weight_fingerprint(names)))

    def engine_weight_dtype(self) -> str:
        """The dtype the engine stores weights in (``float32``, ``bfloat16``)."""
        return engine_dtype(self.cfg)

    def engine_logprobs(self, token_ids: list[int]) -> list[float] | None:
        """The engine's logprobs of a fixed sequence (token 1 onwards), to check that weight sync took.

        Only for the vLLM policy (prompt logprobs); None for other backends.
        """
        engine = getattr(self.policy, "engine", None)
        if engine is None:
            return None

        async def ask() -> list[float]:
            import uuid

            from vllm import SamplingParams as VSampling
            from vllm.sampling_params import RequestOutputKind

            params = VSampling(max_tokens=1, temperature=0.0, prompt_logprobs=0, output_kind=RequestOutputKind.FINAL_ONLY)
            final = None
            async for out in engine.generate({"prompt_token_ids": list(token_ids)}, params, request_id=uuid.uuid4().hex):
                final = out
            if final is None or final.prompt_logprobs is None:
                raise RuntimeError("the engine returned no prompt logprobs")
            return [float(d[tid].logprob) for d, tid in zip(final.prompt_logprobs[1:], token_ids[1:], strict=True)]

        return self._run(ask())

    def tool_error_count(self) -> int:
        metrics = getattr(self.tools, "metrics", None)
        if metrics is None:
            return 0
        return int(sum(metrics.errors_by_kind().values()))

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, *, n: int, step: int, plan: CreditPlan | None = None, samples: int = 1) -> dict[str, float]:
        """Greedy and sampled accuracy on the first `n` held-out questions."""
        plan = plan or self.plan
        items = self.eval_questions()[:n]
        if not items or plan is None:
            return {}
        greedy = self.score(self.rollout_groups(items, group_size=1, step=step, temperature=0.0, tag="eg",
                                                label="eval greedy", paired=True), plan)
        sampled = self.score(self.rollout_groups(items, group_size=samples, step=step, tag="es",
                                                 label="eval sampled", paired=True), plan)
        out: dict[str, float] = {}
        for name, trees in (("greedy", greedy), ("sampled", sampled)):
            m = rollout_metrics(trees)
            for key in ("accuracy", "reward_mean", "format_score", "answered", "valid_calls", "invalid_call_rate"):
                out[f"eval/{name}/{key}"] = m[key]
        if self.run_dir is not None:
            write_eval_record(Path(self.run_dir) / "evals" / f"step_{step:06d}.json", step, greedy, sampled)
        return out

    # ------------------------------------------------------------------ reporting

    def _open_tracker(self) -> None:
        """The `logger` sinks of a training run; a sink left on by default whose package is missing only warns."""
        if self.run_dir is None:
            return
        from matpo_graph.tracking.sinks import Tracker

        explicit = "logger" in self.cfg.model_fields_set
        self.tracker = Tracker(
            self.cfg.logger, run_dir=Path(self.run_dir), project=self.cfg.project_name,
            experiment=self.cfg.experiment_name or Path(self.run_dir).name,
            config=self.cfg.model_dump(mode="json"), echo=self.board.print if self.board else None,
            required=explicit)

    def log_metrics(self, row: dict[str, Any]) -> None:
        """One metrics record (already in the shared vocabulary) to every `logger` sink."""
        if self.tracker is not None:
            self.tracker.log(row)

    def phase(self, name: str) -> Any:
        """A context manager showing a phase without counts (the actor update) with its time left."""
        from contextlib import contextmanager

        @contextmanager
        def shown() -> Any:
            if self.board is not None:
                self.board.begin(name, total=None, unit="")
            try:
                yield
            finally:
                if self.board is not None:
                    self.board.end()

        return shown()

    def progress(self, row: dict[str, Any]) -> None:
        """Move the RL steps bar after a step, with its key numbers (legacy or shared names)."""
        if self.board is None:
            return
        from matpo_graph.tracking.metric_names import canonical_row

        r = canonical_row(row)
        info = (
            f"reward {r.get('matpo/reward/mean', 0):.3f} acc {r.get('matpo/reward/accuracy', 0):.2f} "
            f"fmt {r.get('matpo/reward/format', 0):.2f} pg_loss {r.get('actor/pg_loss', r.get('matpo/loss/total', 0)):+.4f} "
            f"trajs {int(r.get('matpo/trajectories_root', 0))}+{int(r.get('matpo/trajectories_descendant', 0))}"
        )
        self.board.step_done(int(row["step"]), info)

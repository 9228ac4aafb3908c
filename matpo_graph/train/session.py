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
from matpo_graph.runtime.policy import SamplingParams
from matpo_graph.train.config import TrainConfig
from matpo_graph.train.rollout_metrics import rollout_metrics

__all__ = ["RolloutSession", "uses_embedded_web"]


def uses_embedded_web(program: Program) -> bool:
    return any(str(spec.get("config", {}).get("endpoint", "")) == "embedded" for spec in program.tools.values())


class RolloutSession:
    """Context manager: starts the embedded web (when needed), the policy engine and the tools."""

    def __init__(self, program: Program, cfg: TrainConfig, *, model_dir: Path, plan: CreditPlan | None = None,
                 run_dir: Path | None = None) -> None:
        self.program = program
        self.cfg = cfg
        self.model_dir = Path(model_dir)
        self.plan = plan
        self.run_dir = run_dir
        self.loop = asyncio.new_event_loop()
        self.web: Any = None
        self.policy: Any = None
        self.tools: Any = None
        self.executor: Any = None
        self._progress: Any = None
        self._tb: Any = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "RolloutSession":
        from matpo_graph.runtime.chat import ChatTokenizer
        from matpo_graph.runtime.executor import Executor
        from matpo_graph.tools.registry import build_tools

        need_web = uses_embedded_web(self.program) or self.cfg.data is None or self.cfg.eval_data is None
        if need_web:
            from matpo_graph.env.server import serve_in_thread

            self.web = serve_in_thread(seed=self.cfg.env_seed, n_entities=self.cfg.env_entities, noise=self.cfg.noise)
        cache = None
        if self.cfg.tool_cache != "off":
            from matpo_graph.tools.cache import ResponseCache

            cache = ResponseCache(Path(self.cfg.tool_cache_dir), mode=self.cfg.tool_cache)
        self.tools = build_tools(self.program.tools, embedded_url=self.web.url if self.web else None, cache=cache)
        self.tokenizer = ChatTokenizer.from_pretrained(self.model_dir)
        self.policy = self._run(self._make_policy())
        sampling = SamplingParams(temperature=self.cfg.temperature, max_tokens=512)
        self.executor = Executor(self.program, self.policy, self.tokenizer, self.tools, sampling=sampling)
        self._open_tensorboard()
        return self

    async def _make_policy(self) -> Any:
        if self.cfg.policy == "vllm":
            from matpo_graph.runtime.policies.vllm import VLLMPolicy

            return VLLMPolicy(
                self.model_dir, kv_cache_gib=self.cfg.kv_cache_gib, seed=self.cfg.seed,
                max_model_len=self.program.context_tokens + 1024,
            )
        from matpo_graph.runtime.policies import make_policy

        return make_policy(self.cfg.policy, self.model_dir)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._tb is not None:
            self._tb.close()
        try:
            if self.tools is not None and hasattr(self.tools, "aclose"):
                self._run(self.tools.aclose())
        finally:
            if self.policy is not None and hasattr(self.policy, "shutdown"):
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
        short = [q for q in items if int(q.metadata.get("hops", 1)) <= self.cfg.max_hops]
        return short or items

    # ------------------------------------------------------------------ rollouts

    def rollout_groups(self, items: list[Any], *, group_size: int, step: int, temperature: float | None = None,
                       tag: str = "s") -> list[RolloutTree]:
        """`group_size` root rollouts for each question, all concurrently through the shared engine."""
        seed = random.Random(f"{self.cfg.seed}:{tag}:{step}").randrange(2**31)
        executor = self.executor
        if temperature is not None:
            from matpo_graph.runtime.executor import Executor

            executor = Executor(self.program, self.policy, self.tokenizer, self.tools,
                                sampling=SamplingParams(temperature=temperature, max_tokens=512))

        async def all_groups() -> list[list[RolloutTree]]:
            return await asyncio.gather(
                *(
                    executor.run_group(item.question, group_size, group_id=f"{tag}{step}-{item.id}", answers=item.answers,
                                       seed=seed + 1000 * i, metadata={"question_id": item.id, **item.metadata})
                    for i, item in enumerate(items)
                )
            )

        groups = self._run(all_groups())
        return [t for g in groups for t in g]

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
        greedy = self.score(self.rollout_groups(items, group_size=1, step=step, temperature=0.0, tag="eg"), plan)
        sampled = self.score(self.rollout_groups(items, group_size=samples, step=step, tag="es"), plan)
        out: dict[str, float] = {}
        for name, trees in (("greedy", greedy), ("sampled", sampled)):
            m = rollout_metrics(trees)
            for key in ("accuracy", "reward_mean", "format_score", "answered", "valid_calls", "invalid_call_rate"):
                out[f"eval/{name}/{key}"] = m[key]
        return out

    # ------------------------------------------------------------------ reporting

    def _open_tensorboard(self) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - tensorboard is optional
            return
        if self.run_dir is not None:
            self._tb = SummaryWriter(str(Path(self.run_dir) / "tensorboard"))

    def log_scalars(self, row: dict[str, Any]) -> None:
        if self._tb is None:
            return
        step = int(row.get("step", 0))
        for k, v in row.items():
            if isinstance(v, (int, float)) and k != "step":
                self._tb.add_scalar(k, v, step)

    def progress(self, row: dict[str, Any]) -> None:
        """A rich progress bar with the key numbers of the latest step."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self._progress is None:
            self._progress = Progress(
                TextColumn("[bold]MATPO"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
            )
            self._task = self._progress.add_task("train", total=self.cfg.steps, info="")
            self._progress.start()
        info = (
            f"reward {row.get('reward_mean', 0):.3f} acc {row.get('accuracy', 0):.2f} fmt {row.get('format_score', 0):.2f} "
            f"loss {row.get('loss', 0):+.4f} trajs {int(row.get('trajectories_root', 0))}+{int(row.get('trajectories_descendant', 0))}"
        )
        self._progress.update(self._task, completed=int(row["step"]), info=info)

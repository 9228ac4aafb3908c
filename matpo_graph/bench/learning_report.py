"""The learning benchmark's outputs: markdown table, learning-curve plot and status, from whatever is finished.

Everything here reads the benchmark's files (see :mod:`matpo_graph.bench.learning_bench`) and renders partial
results too, labelled as partial: a configuration whose last evaluation is not at the final step shows the
latest one it has, and says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matpo_graph.bench.learning_bench import (
    BenchConfig,
    BenchLayout,
    BenchSettings,
    ConfigState,
    EvalPoint,
    read_log,
    warmup_summary,
)
from matpo_graph.tracking.stats import Interval, mean_interval, paired_difference

__all__ = ["estimate_seconds_left", "plot_curves", "render_table", "status_text", "training_summary"]

# Used only until this folder has measured its own pieces; the status says when it falls back on them.
_GUESS = {"step": 180.0, "eval_tree": 6.0, "warmup": 600.0}


def training_summary(run_dir: Path) -> dict[str, float]:
    """Means over the RL steps run so far: groups with signal, tool errors, seconds; the largest context; truncations;
    and over the steps that trained (had signal): the trained tokens' entropy and the PPO clip fraction, which say
    whether the policy can still move."""
    from matpo_graph.tracking.report import read_metrics

    try:
        rows = [r for r in read_metrics(run_dir) if "matpo/reward/mean" in r]
    except FileNotFoundError:
        rows = []

    trained = [r for r in rows if "actor/entropy" in r]  # only steps with a trained token of non-zero advantage log it

    def avg(key: str, among: list[dict] | None = None) -> float:
        vals = [float(r[key]) for r in (rows if among is None else among) if isinstance(r.get(key), (int, float))]
        return statistics.fmean(vals) if vals else math.nan

    largest = max((float(v) for r in rows for k, v in r.items() if k.startswith("matpo/max_context/")), default=math.nan)
    return {
        "steps": float(len(rows)),
        "signal": avg("matpo/group_variance_share"),
        "tool_error_rate": avg("matpo/tool_error_rate"),
        "largest_context": largest,
        "step_seconds": avg("timing_s/step"),
        "truncated": float(sum(float(r.get("matpo/truncated", 0.0)) for r in rows)),
        "entropy": avg("actor/entropy", trained),
        "clip_fraction": avg("actor/pg_clipfrac", trained),
    }


def _acc(point: EvalPoint, kind: str) -> Interval:
    values = point.sampled if kind == "sampled" else point.greedy
    return mean_interval([values[q] for q in point.questions])


def _fmt(iv: Interval | None, *, se: bool = True) -> str:
    if iv is None or math.isnan(iv.estimate):
        return "-"
    if se:
        return f"{iv.estimate:.3f} ± {iv.se:.3f}" if not math.isnan(iv.se) else f"{iv.estimate:.3f}"
    if math.isnan(iv.low):
        return f"{iv.estimate:+.3f}"
    return f"{iv.estimate:+.3f} [{iv.low:+.3f}, {iv.high:+.3f}]"


def _num(x: float, digits: int = 3) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.{digits}f}"


def render_table(layout: BenchLayout, settings: BenchSettings, configs: Sequence[BenchConfig],
                 states: dict[str, ConfigState]) -> str:
    """The markdown report: one row per configuration, partial ones labelled."""
    complete = all(states[c.name].finished for c in configs)
    tokens_cap = f"{settings.tree_tokens:,} generated tokens" if settings.tree_tokens else "the graphs' own tokens"
    tree_budget = f"{tokens_cap}, {f'{settings.tree_seconds:g} s' if settings.tree_seconds else 'no wall clock'}"
    lines = [f"# Learning benchmark{'' if complete else ' (PARTIAL: not every run and evaluation is finished)'}", ""]
    lines += [
        f"RL steps {settings.steps}, {settings.questions_per_step} questions x G per step, seed {settings.seed}"
        f"{f' (RL seed {settings.rl_seed})' if settings.rl_seed is not None else ''}, "
        f"lr {f'{settings.lr:g}' if settings.lr else 'the trainer default'}, "
        f"rollout temperature {f'{settings.temperature:g}' if settings.temperature is not None else 'the trainer default'}; "
        f"{'further train settings ' + ', '.join(settings.train_settings) + '; ' if settings.train_settings else ''}"
        f"{'credit ' + ', '.join(settings.credit_settings) + '; ' if settings.credit_settings else ''}"
        f"{'roles not trained by RL: ' + ', '.join(settings.frozen_roles) + '; ' if settings.frozen_roles else ''}"
        f"warm-up budget {settings.warmup_tokens:,} trained tokens"
        f"{f', expert variety {settings.warmup_variety:g}' if settings.warmup_variety else ''}; per-tree budget {tree_budget}.",
        f"Held-out: the same {settings.eval_questions} embedded-web {settings.heldout_split} questions "
        f"({'1 hop' if settings.heldout_max_hops == 1 else f'1-{settings.heldout_max_hops} hops'}) at every point, "
        f"greedy and {settings.samples} samples at temperature 0.7, evaluated at steps "
        f"{', '.join(map(str, settings.eval_steps()))} under each configuration's own tool setting. "
        "Accuracy ± its standard error over questions; differences are final minus warm-up, paired by question, "
        "with a 95% t interval.",
        "",
        "| configuration | warm-up trained tokens | warm-up acc. (G samples) | warm-up greedy | final step | final acc. "
        "(G samples) | final greedy | difference (samples) | difference (greedy) | groups with signal | "
        "tool error rate | largest context | s / step | truncated trees | entropy (nats / trained token) | "
        "clip fraction |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in configs:
        st = states[c.name]
        warm = warmup_summary(layout.warmup(c.variant))
        tokens = f"{int(warm['trained_tokens']):,}" if warm else "-"
        base = st.evals.get(0)
        last_step = max((s for s in st.evals if s > 0), default=None)
        last = st.evals.get(last_step) if last_step is not None else None
        partial = last_step != settings.steps
        step_txt = "-" if last_step is None else (f"{last_step} (partial, of {settings.steps})" if partial else str(last_step))
        diffs = ["-", "-"]
        if base is not None and last is not None:
            for i, kind in enumerate(("sampled", "greedy")):
                after = last.sampled if kind == "sampled" else last.greedy
                before = base.sampled if kind == "sampled" else base.greedy
                try:
                    diffs[i] = _fmt(paired_difference(after, before), se=False)
                except ValueError:  # no common question: not the same held-out set, nothing to pair
                    diffs[i] = "not paired"
        train = training_summary(layout.run(c.name))
        lines.append("| " + " | ".join([
            c.label, tokens,
            _fmt(_acc(base, "sampled")) if base else "-", _fmt(_acc(base, "greedy")) if base else "-",
            step_txt,
            _fmt(_acc(last, "sampled")) if last else "-", _fmt(_acc(last, "greedy")) if last else "-",
            diffs[0], diffs[1], _num(train["signal"]), _num(train["tool_error_rate"]), _num(train["largest_context"]),
            _num(train["step_seconds"], 0), _num(train["truncated"], 0), _num(train["entropy"], 4),
            _num(train["clip_fraction"], 4),
        ]) + " |")
    lines += ["", "Training columns (signal, tool errors, context, seconds, truncated trees) cover the RL steps run so "
              "far; entropy (under the rollout temperature) and clip fraction are means over the steps that had "
              "signal; the held-out columns come from `runs/<configuration>/evals/step_N.json`."]
    return "\n".join(lines) + "\n"


def plot_curves(path: Path, settings: BenchSettings, configs: Sequence[BenchConfig], states: dict[str, ConfigState]) -> Path:
    """Held-out accuracy vs RL step per configuration (sampled and greedy), bands of ±1 standard error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), dpi=110, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    variants = list(dict.fromkeys(c.variant for c in configs))
    partial = False
    for ax, kind in zip(axes, ("sampled", "greedy"), strict=True):
        for c in configs:
            st = states[c.name]
            steps = sorted(st.evals)
            partial = partial or not st.finished
            if not steps:
                continue
            ivs = [_acc(st.evals[s], kind) for s in steps]
            y = [iv.estimate for iv in ivs]
            se = [0.0 if math.isnan(iv.se) else iv.se for iv in ivs]
            colour = colours[variants.index(c.variant) % len(colours)]
            style = "-" if c.setting == "clean" else "--"
            ax.plot(steps, y, style, marker="o", ms=3, color=colour, label=c.label)
            ax.fill_between(steps, [a - b for a, b in zip(y, se)], [a + b for a, b in zip(y, se)], color=colour, alpha=0.15)
        ax.set_title(f"held-out accuracy, {'G=%d samples' % settings.samples if kind == 'sampled' else 'greedy'}")
        ax.set_xlabel("RL step (0 = warm-up model)")
        ax.set_xlim(0, settings.steps)
        ax.set_ylim(-0.02, 1.02)  # accuracies; bands may reach past 0 or 1 and are clipped here
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"accuracy on {settings.eval_questions} questions (±1 SE)")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7)
    if partial:
        fig.suptitle("PARTIAL: some runs or evaluations are not finished", color="firebrick")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _measured(layout: BenchLayout) -> dict[str, float | None]:
    """Mean wall seconds per RL step, per evaluated tree and per warm-up, from this folder's log."""
    log = read_log(layout)
    steps = [(r["seconds"], r["to"] - r["from"]) for r in log if r.get("action") == "train" and r.get("to", 0) > r.get("from", 0)]
    evals = [(r["seconds"], r["trees"]) for r in log if r.get("action") == "eval" and r.get("trees")]
    warm = [r["seconds"] for r in log if r.get("action") == "warmup"]
    return {
        "step": sum(s for s, _ in steps) / sum(n for _, n in steps) if steps else None,
        "eval_tree": sum(s for s, _ in evals) / sum(n for _, n in evals) if evals else None,
        "warmup": statistics.fmean(warm) if warm else None,
    }


def estimate_seconds_left(layout: BenchLayout, settings: BenchSettings, configs: Sequence[BenchConfig],
                          states: dict[str, ConfigState]) -> tuple[float, list[str]]:
    """(seconds of work left, which rates are guesses rather than measured here)."""
    rates = _measured(layout)
    guessed = [k for k, v in rates.items() if v is None]
    rate = {k: (v if v is not None else _GUESS[k]) for k, v in rates.items()}
    trees_per_eval = settings.eval_questions * (1 + settings.samples)
    variants_left = {c.variant for c in configs if not states[c.name].warmed_up}
    total = len(variants_left) * rate["warmup"]
    for c in configs:
        st = states[c.name]
        todo = [s for s in st.missing_evals if s not in st.lost_evals]
        target = max(todo, default=0)
        total += max(0, target - st.trained) * rate["step"] + len(todo) * trees_per_eval * rate["eval_tree"]
    return total, guessed


def status_text(layout: BenchLayout, settings: BenchSettings, configs: Sequence[BenchConfig],
                states: dict[str, ConfigState]) -> str:
    """What is done and what remains, per configuration, with an estimate of the time left."""
    out = [f"benchmark folder {layout.root}: {settings.steps} steps, evaluations at "
           f"{', '.join(map(str, settings.eval_steps()))} on {settings.eval_questions} questions x (greedy + {settings.samples})"]
    for c in configs:
        st = states[c.name]
        done = sorted(st.evals)
        parts = [f"warm-up {'done' if st.warmed_up else 'to do'}", f"trained {st.trained}/{settings.steps} steps",
                 f"evaluations done {done or 'none'}", f"to do {st.missing_evals or 'none'}"]
        if st.lost_evals:
            parts.append(f"cannot be done (checkpoint gone) {st.lost_evals}")
        out.append(f"  {c.name:32s} {'FINISHED' if st.finished else ''} " + "; ".join(parts))
    left, guessed = estimate_seconds_left(layout, settings, configs, states)
    rates = _measured(layout)
    shown = ", ".join(f"{k} {v:.0f} s" for k, v in rates.items() if v is not None) or "nothing measured yet"
    note = f" (guessed rates for {', '.join(guessed)}: not measured in this folder yet)" if guessed else ""
    out.append(f"time left: about {left / 3600:.1f} h{note}; measured here: {shown} "
               "(per RL step, per evaluated tree, per warm-up)")
    return "\n".join(out)


def as_dict(state: ConfigState) -> dict[str, Any]:
    """A JSON-friendly view of a state (tests and tools)."""
    return {"config": state.config, "warmed_up": state.warmed_up, "trained": state.trained,
            "evals": sorted(state.evals), "missing": state.missing_evals, "lost": state.lost_evals}

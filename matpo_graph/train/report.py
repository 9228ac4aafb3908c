"""`matpo-graph report`: PNG curves and a markdown summary from a run's metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_metrics", "write_report"]

_CURVES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("reward.png", ("reward_mean", "accuracy", "format_score"), "Reward, accuracy and format score"),
    ("loss.png", ("loss", "grad_norm", "clip_fraction", "kl"), "Loss and optimisation"),
    ("tool_errors.png", ("tool_error_rate", "invalid_call_rate"), "Tool errors and malformed calls"),
)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics yet (has the run done a step?)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # A step has a training record and maybe an evaluation record: they are merged. A resumed run may
    # redo a step; its new training record then replaces everything recorded for that step before.
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        if "step" not in row:
            continue
        step = int(row["step"])
        if "reward_mean" in row or step not in by_step:
            by_step[step] = dict(row)
        else:
            by_step[step].update(row)
    return [by_step[k] for k in sorted(by_step)]


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)):
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def _plot(rows: list[dict[str, Any]], keys: list[str], title: str, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    drawn = False
    for key in keys:
        xs, ys = _series(rows, key)
        if xs:
            ax.plot(xs, ys, marker="o", ms=3, label=key)
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_title(title)
    ax.set_xlabel("RL step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_report(run_dir: Path) -> Path:
    """Write RUN_DIR/plots/*.png and RUN_DIR/report.md; returns the markdown path."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    plots = run_dir / "plots"
    plots.mkdir(exist_ok=True)
    made: list[tuple[str, str]] = []
    for name, keys, title in _CURVES:
        if _plot(rows, list(keys), title, plots / name):
            made.append((name, title))
    role_keys = sorted({k for r in rows for k in r if k.startswith(("tokens/", "max_context/"))})
    tok = [k for k in role_keys if k.startswith("tokens/")]
    ctx = [k for k in role_keys if k.startswith("max_context/")]
    if tok and _plot(rows, tok, "Tokens per role", plots / "tokens_per_role.png"):
        made.append(("tokens_per_role.png", "Tokens per role"))
    if ctx and _plot(rows, ctx, "Largest context per role", plots / "context_per_role.png"):
        made.append(("context_per_role.png", "Largest context per role"))
    eval_keys = sorted({k for r in rows for k in r if k.startswith("eval/") and k.endswith(("accuracy", "reward_mean"))})
    if eval_keys and _plot(rows, eval_keys, "Held-out evaluation", plots / "eval.png"):
        made.append(("eval.png", "Held-out evaluation"))

    lines = [f"# Training report: {run_dir.name}", ""]
    lines.append(f"Steps recorded: {len(rows)} (last step {rows[-1].get('step', '-') if rows else '-'}).")
    lines.append("")
    lines.append("| metric | first recorded | last recorded |")
    lines.append("|---|---|---|")
    for key in (
        "reward_mean", "accuracy", "format_score", "loss", "grad_norm", "clip_fraction", "kl",
        "trajectories_root", "trajectories_descendant", "subtasks_per_root", "tool_error_rate",
        "group_variance_share", "rollout_seconds", "train_seconds", "step_seconds",
        "eval/greedy/accuracy", "eval/sampled/accuracy",
    ):
        having = [r for r in rows if key in r]
        if having:
            lines.append(f"| {key} | {_fmt(having[0][key])} (step {having[0]['step']}) | "
                         f"{_fmt(having[-1][key])} (step {having[-1]['step']}) |")
    lines.append("")
    for name, title in made:
        lines.append(f"## {title}\n\n![{title}](plots/{name})\n")
    out = run_dir / "report.md"
    out.write_text("\n".join(lines))
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)

"""`matpo-graph report`: PNG curves and a markdown summary of one or more runs, local or veRL.

Reads, in the shared vocabulary (matpo_graph.tracking.metric_names):

- a local run folder's ``metrics.jsonl`` (old names of runs written before the vocabulary are renamed);
- a veRL run's jsonl (``trainer.logger=['console','file']``: veRL's FileLogger writes one
  ``{"step": N, "data": {...}}`` per line), given as the file or a folder holding it;
- a veRL console log (lines ``step:N - key:value - ...``), e.g. the captured stdout of a launch.

Several runs plot into the same figures, one curve per run and metric, so a local run and a veRL run
of the same graph overlay.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matpo_graph.tracking.eval_records import compare_heldout, read_eval_records
from matpo_graph.tracking.metric_names import canonical_row

__all__ = ["SUMMARY_KEYS", "read_metrics", "read_rows", "write_report"]

_CURVES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("reward.png", ("critic/score/mean", "matpo/reward/mean", "matpo/reward/accuracy", "matpo/reward/format"),
     "Reward, accuracy and format score"),
    ("loss.png", ("actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy"),
     "Policy loss and optimisation"),
    ("lengths.png", ("response_length/mean", "prompt_length/mean"), "Response and prompt lengths (tokens)"),
    ("timing.png", ("timing_s/gen", "timing_s/update_actor", "timing_s/step"), "Seconds per step"),
    ("tool_errors.png", ("matpo/tool_error_rate", "matpo/invalid_call_rate"), "Tool errors and malformed calls"),
)

SUMMARY_KEYS: tuple[str, ...] = (
    "critic/score/mean", "matpo/reward/mean", "matpo/reward/accuracy", "matpo/reward/format", "actor/pg_loss",
    "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "critic/advantages/mean",
    "response_length/mean", "matpo/trajectories_root", "matpo/trajectories_descendant", "matpo/subtasks_per_root",
    "matpo/tool_error_rate", "matpo/group_variance_share", "timing_s/gen", "timing_s/update_actor", "timing_s/step",
    "matpo/eval/greedy/accuracy", "matpo/eval/sampled/accuracy",
)

_CONSOLE_STEP = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")
_NUMBER = re.compile(r"^(?:np\.\w+\()?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)\s*\)?$")
_TRAIN_MARKERS = ("matpo/reward/mean", "critic/score/mean")


def _metrics_file(path: Path) -> Path:
    """The metrics file of a run folder (metrics.jsonl, else the one veRL jsonl or log in it), or the file."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run folder or metrics file")
    local = path / "metrics.jsonl"
    if local.exists():
        return local
    candidates = sorted(p for p in path.glob("*.jsonl") if p.is_file()) or sorted(path.glob("*.log"))
    if len(candidates) == 1:
        return candidates[0]
    raise FileNotFoundError(f"{local}: no metrics yet (has the run done a step?)")


def _number(text: str) -> float | None:
    m = _NUMBER.match(text.strip())
    return float(m.group(1)) if m else None


def _parse_console(line: str) -> dict[str, Any] | None:
    m = _CONSOLE_STEP.search(line)
    if not m:
        return None
    row: dict[str, Any] = {"step": int(m.group(1))}
    for part in m.group(2).split(" - "):
        key, sep, value = part.partition(":")
        number = _number(value) if sep else None
        if number is not None and key.strip():
            row[key.strip()] = number
    return row


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics file, in order, in the shared vocabulary (not merged by step)."""
    path = _metrics_file(Path(path))
    rows: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        text = line.strip()
        if not text:
            continue
        row: dict[str, Any] | None = None
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                if isinstance(obj.get("data"), dict) and "step" in obj:  # veRL's FileLogger
                    row = {"step": obj["step"], **obj["data"]}
                else:
                    row = obj
        else:
            row = _parse_console(text)
        if row is not None and "step" in row:
            rows.append(canonical_row(row))
    return rows


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """One merged record per step of a run (folder or metrics file), in the shared vocabulary.

    A step has a training record and maybe an evaluation record: they are merged. A resumed run may redo
    a step; its new training record then replaces everything recorded for that step before.

    Raises:
        FileNotFoundError: no metrics file.
    """
    by_step: dict[int, dict[str, Any]] = {}
    for row in read_rows(Path(run)):
        step = int(row["step"])
        if any(k in row for k in _TRAIN_MARKERS) or step not in by_step:
            by_step[step] = dict(row)
        else:
            by_step[step].update(row)
    return [by_step[k] for k in sorted(by_step)]


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def _plot(runs: dict[str, list[dict[str, Any]]], keys: Sequence[str], title: str, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    drawn = False
    for name, rows in runs.items():
        for key in keys:
            xs, ys = _series(rows, key)
            if xs:
                ax.plot(xs, ys, marker="o", ms=3, label=key if len(runs) == 1 else f"{name}: {key}")
                drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_title(title)
    ax.set_xlabel("RL step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _run_name(path: Path, taken: set[str]) -> str:
    name = path.name if path.is_dir() else path.stem
    base, k = name or "run", 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    taken.add(name)
    return name


def write_report(run_dir: Path, *, compare: Sequence[Path] = (), out_dir: Path | None = None) -> Path:
    """Write OUT/plots/*.png and OUT/report.md; returns the markdown path.

    Args:
        run_dir: a local run folder, a veRL metrics jsonl or console log (or a folder holding one).
        compare: more runs of the same kinds, drawn into the same plots.
        out_dir: where to write (default: the run folder, or beside a metrics file as ``<name>-report``).

    Raises:
        FileNotFoundError: a run has no metrics file.
    """
    run_dir = Path(run_dir)
    taken: set[str] = set()
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in (run_dir, *map(Path, compare)):
        runs[_run_name(path, taken)] = read_metrics(path)
    out = Path(out_dir) if out_dir is not None else (run_dir if run_dir.is_dir() else run_dir.with_name(run_dir.stem + "-report"))
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, str]] = []
    for name, keys, title in _CURVES:
        if _plot(runs, keys, title, plots / name):
            made.append((name, title))
    all_keys = sorted({k for rows in runs.values() for r in rows for k in r})
    extra = (
        ("tokens_per_role.png", [k for k in all_keys if k.startswith("matpo/tokens/")], "Tokens per role"),
        ("context_per_role.png", [k for k in all_keys if k.startswith("matpo/max_context/")], "Largest context per role"),
        ("eval.png", [k for k in all_keys if (k.startswith("matpo/eval/") and k.endswith(("accuracy", "reward_mean")))
                      or k.startswith("val-core/")], "Held-out evaluation"),
    )
    for name, keys, title in extra:
        if keys and _plot(runs, keys, title, plots / name):
            made.append((name, title))

    first_name = next(iter(runs))
    lines = [f"# Training report: {first_name}" + (f" vs {', '.join(list(runs)[1:])}" if len(runs) > 1 else ""), ""]
    if run_dir.is_dir():
        lines += _heldout_section(run_dir) + _training_accuracy_section(runs[first_name])
    for name, rows in runs.items():
        if len(runs) > 1:
            lines += [f"## {name}", ""]
        lines.append(f"Steps recorded: {len(rows)} (last step {rows[-1].get('step', '-') if rows else '-'}).")
        lines.append("")
        lines.append("| metric | first recorded | last recorded |")
        lines.append("|---|---|---|")
        for key in SUMMARY_KEYS:
            having = [r for r in rows if key in r]
            if having:
                lines.append(f"| {key} | {_fmt(having[0][key])} (step {having[0]['step']}) | "
                             f"{_fmt(having[-1][key])} (step {having[-1]['step']}) |")
        lines.append("")
    for name, title in made:
        lines.append(f"## {title}\n\n![{title}](plots/{name})\n")
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _interval(iv: Any, *, signed: bool = False) -> str:
    """'0.500 [0.300, 0.700]' (a sign on each number for a difference); the mean alone below two questions."""
    f = "{:+.3f}" if signed else "{:.3f}"
    if iv.n < 2 or iv.low != iv.low:  # NaN bounds
        return f"{f.format(iv.estimate)} (n={iv.n})"
    return f"{f.format(iv.estimate)} [{f.format(iv.low)}, {f.format(iv.high)}]"


def _heldout_section(run_dir: Path) -> list[str]:
    """Held-out accuracy of the starting model and of the last evaluation on the same questions, paired."""
    records = read_eval_records(run_dir)
    rows = []
    for kind, label in (("greedy", "greedy"), ("sampled", "sampled"), ("all", "greedy and samples")):
        cmp = compare_heldout(records, kind=kind)
        if cmp is not None:
            rows.append(f"| {label} | {cmp.questions} | {_interval(cmp.before)} | {_interval(cmp.after)} | "
                        f"{_interval(cmp.difference, signed=True)} | {cmp.won} / {cmp.lost} |")
    if not rows:
        return []
    steps = sorted(records)
    return ["## Held-out accuracy: the starting model vs the last evaluation", "",
            f"Step {steps[0]} (before RL) against step {steps[-1]}, on the same questions; 95% t intervals, the "
            "difference paired by question. A handful of questions gives wide intervals: read them before the means.", "",
            "| answers | questions | start | end | end - start | questions won / lost |", "|---|---|---|---|---|---|",
            *rows, ""]


def _training_accuracy_section(rows: list[dict[str, Any]]) -> list[str]:
    """Training accuracy per step with its running mean (each step sees other questions, so one step is noisy)."""
    steps = [(int(r["step"]), float(r["matpo/reward/accuracy"])) for r in rows
             if "matpo/reward/accuracy" in r and "timing_s/step" in r]
    if not steps:
        return []
    out = ["## Training accuracy per step", "", "| step | accuracy | running mean |", "|---|---|---|"]
    total = 0.0
    for i, (step, acc) in enumerate(steps, start=1):
        total += acc
        out.append(f"| {step} | {acc:.3f} | {total / i:.3f} |")
    return out + [""]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)

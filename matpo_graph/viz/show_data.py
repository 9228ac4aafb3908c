"""Gather what the rollout browser shows: trees of one step, credit, group statistics, metrics and plots.

The result is plain JSON-ready data: a small summary (groups and one row per tree) and one body per
tree, which the page parses only when that tree is opened.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matpo_graph.core.rollout import CallRecord, RolloutTree, Trajectory, read_trees

if TYPE_CHECKING:
    from matpo_graph.core.program import CreditPlan

__all__ = ["ShowData", "ShowInputError", "collect_show_data", "find_credit_plan", "list_steps", "pack_tree"]

_STEP_RE = re.compile(r"^step_(\d+)\.jsonl$")


class ShowInputError(ValueError):
    """The run folder or rollout file cannot be shown (missing, empty, unknown step)."""


@dataclass
class ShowData:
    summary: dict[str, Any]
    bodies: list[dict[str, Any]] = field(default_factory=list)


def list_steps(run_dir: Path) -> dict[int, Path]:
    """Rollout files of a run folder by step number (RUN_DIR/rollouts/step_XXXXXX.jsonl)."""
    folder = Path(run_dir) / "rollouts"
    out: dict[int, Path] = {}
    if folder.is_dir():
        for p in folder.iterdir():
            m = _STEP_RE.match(p.name)
            if m:
                out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def find_credit_plan(run_dir: Path | None, graph: Path | None) -> "CreditPlan | None":
    """The credit plan from ``graph`` (YAML or compiled folder), else a credit_plan.json in the run folder."""
    if graph is not None:
        from matpo_graph.compilers.local import load_program

        return load_program(graph)[1]
    if run_dir is None:
        return None
    from matpo_graph.core.program import CreditPlan

    for pattern in ("credit_plan.json", "*/credit_plan.json"):
        for p in sorted(Path(run_dir).glob(pattern)):
            return CreditPlan.model_validate_json(p.read_text(encoding="utf-8"))
    return None


def _runs(mask: list[int]) -> list[list[int]]:
    """Run-length encoding [[value, count], ...] of a 0/1 loss mask."""
    out: list[list[int]] = []
    for m in mask:
        if out and out[-1][0] == m:
            out[-1][1] += 1
        else:
            out.append([m, 1])
    return out


def _num(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def _pack_call(c: CallRecord) -> dict[str, Any]:
    return {
        "name": c.name,
        "kind": c.kind,
        "valid": c.valid,
        "error": c.error,
        "args": c.arguments,
        "raw": c.raw,
        "result": c.result,
        "child": c.child_id,
        "sec": round(c.seconds, 3),
    }


def _pack_messages(t: Trajectory) -> list[list[Any]]:
    """[role, kind, trained, text, ref]: a message repeating a turn's text or a call's result stores
    text None and ref [turn] or [turn, call] instead, which roughly halves the page of a long run."""
    known: dict[str, list[int]] = {}
    for k, u in enumerate(t.turns):
        known.setdefault(u.text, [k])
        for j, c in enumerate(u.calls):
            known.setdefault(c.result, [k, j])
    out: list[list[Any]] = []
    for m in t.messages:
        ref = known.get(m.content) if len(m.content) > 40 else None
        out.append([m.role, m.kind, int(m.trained), None if ref else m.content, ref])
    return out


def _pack_traj(t: Trajectory) -> dict[str, Any]:
    return {
        "id": t.traj_id,
        "parent": t.parent_id,
        "role": t.role,
        "depth": t.depth,
        "adv": _num(t.advantage),
        "fmt": _num(t.format_score),
        "term": t.termination,
        "final": t.final_text,
        "task": t.task,
        "sec": round(t.seconds, 3),
        "error": getattr(t, "error", None),
        "tokens": len(t.token_ids),
        "trained": t.num_trained_tokens,
        "prompt": t.prompt_length,
        "mask": _runs(t.loss_mask),
        "msgs": _pack_messages(t),
        "turns": [
            {
                "i": u.index,
                "text": u.text,
                "n": u.num_tokens,
                "finish": u.finish_reason,
                "purpose": u.purpose,
                "calls": [_pack_call(c) for c in u.calls],
            }
            for u in t.turns
        ],
    }


def pack_tree(tree: RolloutTree) -> dict[str, Any]:
    """The body of one tree as the page renders it (no token ids or logprobs: counts and mask runs)."""
    r = tree.reward
    return {
        "id": tree.tree_id,
        "group": tree.group_id,
        "question": tree.question,
        "answers": tree.answers,
        "reward": None if r is None else {"total": r.total, "accuracy": r.accuracy, "format": r.format,
                                          "answer": r.answer, "judge_fallback": r.judge_fallback},
        "sec": round(tree.seconds, 3),
        "trajs": [_pack_traj(t) for t in tree.trajectories],
    }


def _tree_row(index: int, tree: RolloutTree) -> dict[str, Any]:
    calls = [c for t in tree.trajectories for c in t.calls]
    roles: dict[str, int] = {}
    for t in tree.trajectories:
        roles[t.role] = roles.get(t.role, 0) + 1
    root = tree.root if tree.trajectories else None
    return {
        "i": index,
        "id": tree.tree_id,
        "group": tree.group_id,
        "reward": None if tree.reward is None else _num(tree.reward.total),
        "answer": None if tree.reward is None else tree.reward.answer,
        "adv": None if root is None else _num(root.advantage),
        "n_traj": len(tree.trajectories),
        "depth": max((t.depth for t in tree.trajectories), default=0),
        "roles": roles,
        "tokens": sum(len(t.token_ids) for t in tree.trajectories),
        "trained": sum(t.num_trained_tokens for t in tree.trajectories),
        "calls": len(calls),
        "invalid": sum(1 for c in calls if not c.valid or c.kind == "invalid"),
        "errors": sum(1 for c in calls if c.valid and c.kind != "invalid" and c.error),
        "term": None if root is None else root.termination,
    }


def _group_stats(rewards: list[float]) -> dict[str, Any]:
    n = len(rewards)
    mean = sum(rewards) / n if n else None
    std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / (n - 1)) if n > 1 and mean is not None else None
    return {"n": n, "mean": mean, "std": std}


def _metrics_for(run_dir: Path, step: int | None) -> dict[str, Any] | None:
    path = run_dir / "metrics.jsonl"
    if step is None or not path.exists():
        return None
    found = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("step") == step:
            found = row  # a resumed run may repeat a step: the last record wins
    return found


def _plots(run_dir: Path) -> list[dict[str, str]]:
    folder = run_dir / "plots"
    if not folder.is_dir():
        return []
    return [
        {"name": p.name, "src": "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode("ascii")}
        for p in sorted(folder.glob("*.png"))
    ]


def _credit(trees: list[RolloutTree], plan: "CreditPlan | None") -> tuple[list[RolloutTree], dict[str, str]]:
    """Advantages from the file; if none are there, computed with the project's credit function when possible."""
    if any(t.advantage is not None for tree in trees for t in tree.trajectories):
        return trees, {"status": "file", "note": "advantages as recorded in the rollout file"}
    from matpo_graph.core.credit import CreditError, assign_credit

    if plan is None:
        note = "no advantages in the file; pass --graph (or keep credit_plan.json in the run folder) to compute them"
        return trees, {"status": "missing", "note": note}
    try:
        credited, _metrics = assign_credit(trees, plan, warn=False)
    except CreditError as exc:  # e.g. trees without rewards: show the page anyway
        return trees, {"status": "missing", "note": f"no advantages in the file, and computing them failed: {exc}"}
    note = f"advantages computed when this page was built ({plan.strategy}/{plan.normalization})"
    return list(credited), {"status": "computed", "note": note}


def collect_show_data(source: str | Path, *, step: int | None = None, graph: str | Path | None = None) -> ShowData:
    """Read a run folder (one step of RUN_DIR/rollouts) or a rollout JSONL file and pack it for the page.

    Raises:
        ShowInputError: the source is missing, holds no rollout files, or ``step`` is not among them.
    """
    source = Path(source)
    run_dir: Path | None = None
    steps: list[int] = []
    if source.is_dir():
        run_dir = source
        by_step = list_steps(source)
        if not by_step:
            raise ShowInputError(f"{source}: no rollouts/step_XXXXXX.jsonl files in this run folder")
        steps = list(by_step)
        if step is None:
            step = steps[-1]
        elif step not in by_step:
            raise ShowInputError(f"{source}: no rollouts for step {step}; steps with rollouts: {', '.join(map(str, steps))}")
        path = by_step[step]
    elif source.is_file():
        if step is not None:
            raise ShowInputError("--step selects a step of a run folder; pass the folder, not a JSONL file")
        path = source
        m = _STEP_RE.match(source.name)
        step = int(m.group(1)) if m else None
        if source.parent.name == "rollouts":
            run_dir = source.parent.parent
    else:
        raise ShowInputError(f"{source}: no such run folder or rollout file")
    trees = read_trees(path)
    plan = find_credit_plan(run_dir, Path(graph) if graph else None)
    trees, credit = _credit(trees, plan)
    rows = [_tree_row(i, t) for i, t in enumerate(trees)]
    groups: dict[str, dict[str, Any]] = {}
    for row, tree in zip(rows, trees):
        g = groups.setdefault(
            tree.group_id, {"id": tree.group_id, "question": tree.question, "answers": tree.answers, "trees": []}
        )
        g["trees"].append(row["i"])
    for g in groups.values():
        g.update(_group_stats([rows[i]["reward"] for i in g["trees"] if rows[i]["reward"] is not None]))
    roles = sorted({t.role for tree in trees for t in tree.trajectories})
    summary = {
        "source": str(path),
        "run_dir": None if run_dir is None else str(run_dir),
        "step": step,
        "steps": steps,
        "credit": credit,
        "epsilon": None if plan is None else plan.epsilon,
        "normalization": None if plan is None else plan.normalization,
        "strategy": None if plan is None else plan.strategy,
        "metrics": None if run_dir is None else _metrics_for(run_dir, step),
        "plots": [] if run_dir is None else _plots(run_dir),
        "roles": roles,
        "max_depth": max((r["depth"] for r in rows), default=0),
        "groups": list(groups.values()),
        "trees": rows,
    }
    return ShowData(summary=summary, bodies=[pack_tree(t) for t in trees])

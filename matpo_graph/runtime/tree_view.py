"""A readable drawing of one rollout tree for the terminal (rich): roles, calls, terminations, tokens."""

from __future__ import annotations

from rich.markup import escape
from rich.tree import Tree

from matpo_graph.core.rollout import CallRecord, RolloutTree, Trajectory

__all__ = ["rollout_tree_view"]


def _preview(text: str, limit: int) -> str:
    one_line = " ".join(text.split())
    return escape(one_line if len(one_line) <= limit else one_line[: limit - 1] + "…")


def _traj_label(t: Trajectory) -> str:
    generated = sum(t.loss_mask)
    colour = {"answer": "green", "summary": "green", "policy_error": "red"}.get(t.termination, "yellow")
    label = (
        f"[bold]{escape(t.role)}[/bold] [dim]\\[{t.traj_id}][/dim] [{colour}]{t.termination}[/{colour}] · "
        f"{len(t.turns)} turns · {len(t.token_ids)} tokens ({generated} generated) · {t.seconds:.1f}s"
    )
    if t.format_score is not None:
        label += f" · fmt {t.format_score:.2f}"
    if t.error:
        label += f" · [red]{_preview(t.error, 80)}[/red]"
    return label


def _call_label(c: CallRecord) -> str:
    mark = "[green]✓[/green]" if c.valid else "[red]✗[/red]"
    args = _preview(str(c.arguments) if c.arguments is not None else c.raw, 60)
    label = f"{mark} [cyan]{escape(c.name or '?')}[/cyan]({args}) [dim]{c.kind}, {c.seconds:.2f}s[/dim]"
    if c.error:
        label += f" [red]{_preview(c.error, 60)}[/red]"
    return label


def _add_trajectory(node: Tree, tree: RolloutTree, t: Trajectory, preview_chars: int) -> None:
    branch = node.add(_traj_label(t))
    children = {c.traj_id: c for c in tree.children_of(t.traj_id)}
    for turn in t.turns:
        head = f"turn {turn.index} [dim]{turn.purpose}, {turn.num_tokens} tok, {turn.finish_reason}[/dim]: {_preview(turn.text, preview_chars)}"
        turn_node = branch.add(head)
        for call in turn.calls:
            call_node = turn_node.add(_call_label(call))
            child = children.pop(call.child_id, None) if call.child_id else None
            if child is not None:
                _add_trajectory(call_node, tree, child, preview_chars)
            elif call.result:
                call_node.add(f"[dim]→ {_preview(call.result, preview_chars)}[/dim]")
    for orphan in children.values():  # children whose call record was dropped (should not happen)
        _add_trajectory(branch, tree, orphan, preview_chars)
    if t.final_text:
        branch.add(f"[bold]final:[/bold] {_preview(t.final_text, preview_chars * 2)}")


def rollout_tree_view(tree: RolloutTree, *, preview_chars: int = 90) -> Tree:
    """A rich Tree of `tree`: each trajectory under the call that started it."""
    title = f"[bold]rollout {escape(tree.tree_id)}[/bold] · {escape(tree.graph)} · {tree.seconds:.1f}s · {_preview(tree.question, 80)}"
    if tree.reward is not None:
        r = tree.reward
        title += (
            f" · reward {r.total:.3f} (acc {r.accuracy:.2f}, fmt {r.format:.2f}, answer {_preview(str(r.answer), 40)})"
        )
    root = Tree(title)
    if tree.trajectories:
        _add_trajectory(root, tree, tree.root, preview_chars)
    return root

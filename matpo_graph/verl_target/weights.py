"""MATPO's loss aggregation expressed in veRL: per-token weights under veRL's token-mean.

veRL aggregates the clipped PPO terms of a mini-batch as ``sum(l * w) / T`` (``loss_agg_mode=token-mean``,
``w`` = ``rollout_is_weights``, ``T`` = trained tokens of the mini-batch). Giving every trained token of
a row the weight ``T / (trees * T_tree)`` turns that into the paper's ``tree_token_mean``: per tree,
the token mean over all its trajectories, then the mean over trees. The tree of a row comes from its
transfer-queue key ``{uid}_{session}_{index}``: one session is one root rollout and its descendants.
The per-row factor is the local trainer's (:func:`matpo_graph.rl.batch.row_weights`), so both
trainers optimise the same objective.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["session_of", "tree_token_weights"]


def session_of(key: str) -> str:
    """``'{uid}_{session}_{index}'`` -> ``'{uid}_{session}'`` (the uid may itself hold underscores).

    Raises:
        ValueError: for a key without the two trailing fields.
    """
    head, sep, index = key.rpartition("_")
    if not sep or not head or "_" not in head or not index.isdigit():
        raise ValueError(f"not a veRL trajectory key {{uid}}_{{session}}_{{index}}: {key!r}")
    return head


def tree_token_weights(keys: Sequence[str], row_tokens: Sequence[int]) -> list[float]:
    """Weight of each trained token of each row, for ``tree_token_mean`` under veRL's token-mean.

    Args:
        keys: transfer-queue keys of the rows, in batch order.
        row_tokens: trained tokens (sum of the response mask) of each row.

    Returns:
        ``T_all / (trees * T_tree)`` per row, 0.0 for rows without trained tokens; trees without
        trained tokens (failed rollouts, veRL's padding rows) do not count.
    """
    from matpo_graph.rl.batch import row_weights

    if len(keys) != len(row_tokens):
        raise ValueError(f"keys and row_tokens differ in length: {len(keys)} vs {len(row_tokens)}")
    sessions: dict[str, int] = {}
    tree_index = [sessions.setdefault(session_of(k), len(sessions)) for k in keys]
    total = sum(row_tokens)
    if total == 0:
        return [0.0] * len(keys)
    local = row_weights(list(row_tokens), tree_index, "tree_token_mean")
    return [w * total for w in local]

"""The expert's variety: varied demonstrations still earn the full reward, differ where a policy could choose
(wording, first query, page read, lookup order), are reproducible from their seed, and variety 0 is the
canonical expert token for token."""

from __future__ import annotations

import pytest

from matpo_graph.coldstart.expert import ExpertPolicy, _Draw
from matpo_graph.core.toolcalls import parse_tool_calls

from cs_helpers import demos, load, questions


def _texts(batch) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return [[turn.text for traj in tree.trajectories for turn in traj.turns] for tree in batch.trees]


def _calls(batch, program, kind: str) -> list[list[dict]]:  # type: ignore[no-untyped-def]
    """Per trajectory, the arguments of its calls to the graph's search (or scrape) tool."""
    from matpo_graph.coldstart.expert_plan import plan_expert

    names = {getattr(s, kind) for s in plan_expert(program).values()} - {None}
    out = []
    for tree in batch.trees:
        for traj in tree.trajectories:
            out.append([c.arguments or {} for turn in traj.turns
                        for c in parse_tool_calls(turn.text, program.tool_call_format) if c.name in names])
    return out


def test_variety_zero_is_the_canonical_expert(chat, web):
    program, plan = load("deep_search")
    items = questions(web, 4, hops=2)
    default = demos(program, plan, items, chat, web, keep_all=True)
    zero = demos(program, plan, items, chat, web, keep_all=True, variety=0.0, seed=7)
    def tokens(batch):  # type: ignore[no-untyped-def]
        return [[(t.token_ids, t.loss_mask) for t in tree.trajectories] for tree in batch.trees]

    assert tokens(default) == tokens(zero) and _texts(default) == _texts(zero)


@pytest.mark.parametrize("graph", ["deep_search", "single_agent"])
def test_varied_demos_keep_the_full_reward_and_differ_where_a_policy_could_choose(graph, chat, web):
    program, plan = load(graph)
    items = questions(web, 12, hops=2)
    canonical = demos(program, plan, items, chat, web, keep_all=True)
    varied = demos(program, plan, items, chat, web, keep_all=True, variety=1.0, seed=1)
    best = plan.accuracy_weight + plan.format_weight
    full = [t for t in varied.trees if t.reward is not None and t.reward.total >= best - 1e-9]
    assert len(full) >= 9  # a detour to a page without the fact costs a turn, not the answer
    assert sum(a != b for a, b in zip(_texts(canonical), _texts(varied), strict=True)) >= 6
    queries = {str(c.get("query")) for calls in _calls(varied, program, "search") for c in calls}
    asked = {str(c.get("query")) for calls in _calls(canonical, program, "search") for c in calls}
    assert queries - asked  # some first queries are the lookup's names only
    reads = [len(calls) for calls in _calls(varied, program, "scrape")]
    assert max(reads) > max(len(c) for c in _calls(canonical, program, "scrape")) or sum(reads) > sum(
        len(c) for c in _calls(canonical, program, "scrape"))  # some detours read a second page


def test_varied_demos_are_reproducible_from_their_seed(chat, web):
    program, plan = load("deep_search")
    items = questions(web, 6, hops=2)
    one = demos(program, plan, items, chat, web, keep_all=True, variety=0.7, seed=3)
    again = demos(program, plan, items, chat, web, keep_all=True, variety=0.7, seed=3)
    other = demos(program, plan, items, chat, web, keep_all=True, variety=0.7, seed=4)
    assert _texts(one) == _texts(again)
    assert _texts(one) != _texts(other)


def test_variety_outside_zero_to_one_is_refused(chat):
    program, _ = load("deep_search")
    with pytest.raises(ValueError, match="variety"):
        ExpertPolicy(program, chat, [], variety=1.5)


def test_draw_without_variety_always_takes_the_canonical_choice():
    draw = _Draw(0.0, "key")
    assert not any(draw.depart() for _ in range(100))
    assert draw.pick(("a", "b", "c")) == "a" and draw.shuffled([1, 2, 3]) == [1, 2, 3]
    full = _Draw(1.0, "key")
    assert all(full.depart() for _ in range(100)) and full.pick(("a", "b", "c")) in {"b", "c"}

from matpo_graph.rl.data_order import questions_for_step


def test_questions_for_step_is_a_function_of_seed_and_step() -> None:
    items = list(range(10))
    a, pos_a = questions_for_step(items, step=3, per_step=4, seed=7)
    b, pos_b = questions_for_step(items, step=3, per_step=4, seed=7)
    assert a == b and pos_a == pos_b == 16


def test_questions_for_step_covers_each_epoch_exactly_once() -> None:
    items = list(range(12))
    seen = [q for step in range(3) for q in questions_for_step(items, step=step, per_step=4, seed=1)[0]]
    assert sorted(seen) == items


def test_questions_for_step_reshuffles_between_epochs() -> None:
    items = list(range(20))
    first = [q for s in range(5) for q in questions_for_step(items, step=s, per_step=4, seed=3)[0]]
    second = [q for s in range(5, 10) for q in questions_for_step(items, step=s, per_step=4, seed=3)[0]]
    assert sorted(second) == items and first != second


# ---------------------------------------------------------------- contrast batches

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from matpo_graph.rl.data_order import contrast_questions_for_step  # noqa: E402

Item = tuple[str, str, int]  # (family, member, number)
_items = st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("wxyz"), st.integers(0, 9)),
                  min_size=1, max_size=40, unique=True)


def _contrast(items: list[Item], step: int, per_step: int = 4, seed: int = 0) -> list[Item]:
    return contrast_questions_for_step(items, step=step, per_step=per_step, seed=seed,
                                       family=lambda q: q[0], member=lambda q: q[1])[0]


@settings(max_examples=60, deadline=None)
@given(items=_items, step=st.integers(0, 30), per_step=st.integers(1, 6))
def test_a_contrast_batch_is_one_family_over_distinct_members_without_repeats(items: list[Item], step: int, per_step: int) -> None:
    batch = _contrast(items, step, per_step)
    assert batch and len(set(batch)) == len(batch) <= per_step
    assert len({q[0] for q in batch}) == 1
    family = batch[0][0]
    members = {q[1] for q in items if q[0] == family}
    # as many distinct members as the family has, up to the batch size
    assert len({q[1] for q in batch}) == min(len(members), per_step)
    assert batch == _contrast(list(items), step, per_step)  # a function of (seed, step): resumption sees the same


def test_contrast_batches_visit_families_as_often_as_their_size_and_every_question_in_time() -> None:
    # family a: 3 members x 4 questions (3 batches of 4), b: 2 x 2 (one batch), c: one question (one batch)
    items = ([("a", m, n) for m in "wxy" for n in range(4)] + [("b", m, n) for m in "wx" for n in range(2)]
             + [("c", "z", 0)])
    for rnd in range(3):  # a round is 5 tickets: a a a b c
        families = [_contrast(items, s)[0][0] for s in range(rnd * 5, rnd * 5 + 5)]
        assert sorted(families) == ["a", "a", "a", "b", "c"]
    seen = {q for s in range(5 * 4) for q in _contrast(items, s)}
    assert seen == set(items)


def test_contrast_batches_depend_on_the_seed() -> None:
    items = [(f, m, n) for f in "ab" for m in "wxyz" for n in range(5)]
    assert [_contrast(items, s, seed=0) for s in range(6)] != [_contrast(items, s, seed=1) for s in range(6)]


# ---------------------------------------------------------------- batches stratified by hops

from matpo_graph.rl.data_order import stratified_questions_for_step  # noqa: E402

_hopped = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 30)), min_size=1, max_size=40, unique=True)


def _by_hops(items: list[tuple[int, int]], step: int, per_step: int, seed: int = 0) -> list[tuple[int, int]]:
    return stratified_questions_for_step(items, step=step, per_step=per_step, seed=seed, stratum=lambda q: q[0])[0]


@settings(max_examples=80, deadline=None)
@given(items=_hopped, step=st.integers(0, 30), per_step=st.integers(1, 8))
def test_a_stratified_batch_holds_every_stratum_as_evenly_as_its_size_allows(items, step, per_step) -> None:
    batch = _by_hops(items, step, per_step)
    assert len(batch) == per_step and all(q in items for q in batch)
    strata = sorted({q[0] for q in items})
    counts = [sum(q[0] == h for q in batch) for h in strata]
    assert max(counts) - min(counts) <= 1  # every stratum within one of the others in every step
    if per_step >= len(strata):
        assert min(counts) >= 1
    assert batch == _by_hops(list(items), step, per_step)  # a function of (seed, step): resumption sees the same
    _, position = stratified_questions_for_step(items, step=step, per_step=per_step, seed=0, stratum=lambda q: q[0])
    assert position == step * per_step + per_step


@settings(max_examples=60, deadline=None)
@given(items=_hopped, per_step=st.integers(1, 8))
def test_each_stratum_gives_all_its_questions_before_repeating_one(items, per_step) -> None:
    strata = sorted({q[0] for q in items})
    taken: dict[int, list[tuple[int, int]]] = {h: [] for h in strata}
    for step in range(12):
        for q in _by_hops(items, step, per_step):
            taken[q[0]].append(q)
    for h, got in taken.items():
        size = sum(q[0] == h for q in items)
        first = got[:size]
        assert len(set(first)) == len(first)  # no repeat within the stratum's first pass
        if len(got) >= size:
            assert set(first) == {q for q in items if q[0] == h}


def test_stratified_batches_pair_one_and_two_hop_questions_and_depend_on_the_seed() -> None:
    items = [(1, n) for n in range(30)] + [(2, n) for n in range(10)]  # three times as many one-hop questions
    for step in range(15):
        assert sorted(q[0] for q in _by_hops(items, step, 2)) == [1, 2]
    assert [_by_hops(items, s, 2, seed=0) for s in range(5)] != [_by_hops(items, s, 2, seed=1) for s in range(5)]
    # an odd batch size takes the extra slot from each stratum in turn
    assert [sorted(q[0] for q in _by_hops(items, s, 3)) for s in range(2)] == [[1, 1, 2], [1, 2, 2]]

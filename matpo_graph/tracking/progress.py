"""Progress of a run from its first second: RL steps, rollouts (trees done / total, tokens/s), updates
and evaluation, each with the time remaining.

On a terminal this is a live rich display; elsewhere (a log file, CI) it prints a plain line when a
phase starts, at most every `every_s` seconds while it runs, and when it ends, so a log shows the same.
The policy is wrapped by :class:`CountingPolicy` to count generated tokens as they come.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["CountingPolicy", "RunProgress"]


class CountingPolicy:
    """Delegates to a policy and counts the tokens it generates (for tokens/s); everything else passes through."""

    def __init__(self, policy: Any) -> None:
        self._policy = policy
        self.generated_tokens = 0

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        out = await self._policy.generate(prompt_ids, sampling)
        self.generated_tokens += len(getattr(out, "token_ids", ()) or ())
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds}s"


class RunProgress:
    """A run's progress display.

    Args:
        total_steps: RL steps the run will take (the steps bar), or 0 for no steps bar (evaluation).
        first_step: steps already done (a resumed run).
        console: a rich Console (default: stdout); live bars only when it is a terminal.
        every_s: least seconds between two plain lines of a running phase.
        clock: time source (tests).
    """

    def __init__(self, *, total_steps: int = 0, first_step: int = 0, console: Any = None, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from rich.console import Console

        self.console = console or Console()
        self.live = bool(self.console.is_terminal)
        self.every_s = every_s
        self.clock = clock
        self.total_steps = total_steps
        self.step = first_step
        self._progress: Any = None
        self._steps_task: Any = None
        self._phase: dict[str, Any] | None = None
        self._history: dict[str, list[float]] = {}
        self._started = clock()
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"), console=self.console,
            )
            self._progress.start()
            if total_steps:
                self._steps_task = self._progress.add_task("RL steps", total=total_steps, completed=first_step,
                                                           info="starting")
        elif total_steps:
            self.print(f"RL steps {first_step}/{total_steps}: starting")

    # ---------------------------------------------------------------- output

    def print(self, text: str) -> None:
        """A line above the live bars (or a plain line)."""
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    # ---------------------------------------------------------------- phases

    def begin(self, name: str, *, total: int | None = None, unit: str = "trees", tokens: int = 0) -> None:
        """Start a phase (rollouts, update, eval greedy, ...); `total` None for one without counts."""
        self.end()
        now = self.clock()
        self._phase = {"name": name, "total": total, "done": 0, "unit": unit, "t0": now, "tokens0": tokens,
                       "tokens": tokens, "last_print": now}
        info = self._info()
        if self._progress is not None:
            self._phase["task"] = self._progress.add_task(name, total=total if total else 1, info=info)
        else:
            self.print(f"{self._prefix()}{name}: {info}")

    def advance(self, n: int = 1, *, tokens: int | None = None) -> None:
        """`n` more items of the current phase done; `tokens` is the running count of generated tokens."""
        phase = self._phase
        if phase is None:
            return
        phase["done"] += n
        if tokens is not None:
            phase["tokens"] = tokens
        info = self._info()
        if self._progress is not None:
            self._progress.update(phase["task"], completed=phase["done"], info=info)
        elif self.clock() - phase["last_print"] >= self.every_s:
            phase["last_print"] = self.clock()
            self.print(f"{self._prefix()}{phase['name']}: {info}")

    def tokens(self, tokens: int) -> None:
        """Refresh the token count of the current phase (tokens/s) without finishing an item."""
        if self._phase is not None:
            self._phase["tokens"] = tokens
            if self._progress is not None:
                self._progress.update(self._phase["task"], info=self._info())

    def end(self) -> None:
        """Finish the current phase (if any); its duration feeds the next estimate of the same phase."""
        phase = self._phase
        if phase is None:
            return
        self._phase = None
        elapsed = self.clock() - phase["t0"]
        self._history.setdefault(phase["name"].split(" ")[0], []).append(elapsed)
        done_info = self._summary(phase, elapsed)
        if self._progress is not None:
            self._progress.update(phase["task"], completed=phase["total"] or 1, info=done_info)
            self._progress.remove_task(phase["task"])
        self.print(f"{self._prefix()}{phase['name']} done: {done_info}")

    def step_done(self, step: int, info: str = "") -> None:
        """An RL step finished; the steps bar moves and estimates the rest from the steps so far."""
        self.end()
        self.step = step
        self._history.setdefault("_step", []).append(self.clock())
        left = self._steps_left()
        text = f"{info}  ~{_duration(left)} left" if left is not None else info
        if self._progress is not None and self._steps_task is not None:
            self._progress.update(self._steps_task, completed=step, info=text)
        else:
            self.print(f"RL steps {step}/{self.total_steps}: {text}")

    def stop(self) -> None:
        self.end()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # ---------------------------------------------------------------- estimates

    def _prefix(self) -> str:
        return f"[step {self.step + 1}/{self.total_steps}] " if self.total_steps and self.step < self.total_steps else ""

    def _steps_left(self) -> float | None:
        stamps = self._history.get("_step", [])
        done_here = len(stamps)
        if not done_here or not self.total_steps:
            return None
        per_step = (stamps[-1] - self._started) / done_here
        return per_step * max(0, self.total_steps - self.step)

    def _info(self) -> str:
        phase = self._phase
        if phase is None:
            return ""
        elapsed = self.clock() - phase["t0"]
        parts: list[str] = []
        if phase["total"]:
            parts.append(f"{phase['done']}/{phase['total']} {phase['unit']}")
        produced = phase["tokens"] - phase["tokens0"]
        if produced and elapsed > 0:
            parts.append(f"{produced / elapsed:.0f} tok/s")
        left = self._phase_left(phase, elapsed)
        parts.append(f"~{_duration(left)} left" if left is not None else "estimating time left")
        return ", ".join(parts)

    def _phase_left(self, phase: dict[str, Any], elapsed: float) -> float | None:
        total, done = phase["total"], phase["done"]
        if total and done:
            return elapsed / done * (total - done)
        past = self._history.get(phase["name"].split(" ")[0])
        if past:
            return max(0.0, past[-1] - elapsed)
        return None

    def _summary(self, phase: dict[str, Any], elapsed: float) -> str:
        parts = [f"{_duration(elapsed)}"]
        if phase["total"]:
            parts.insert(0, f"{phase['done']}/{phase['total']} {phase['unit']}")
        produced = phase["tokens"] - phase["tokens0"]
        if produced and elapsed > 0:
            parts.append(f"{produced} tokens, {produced / elapsed:.0f} tok/s")
        return ", ".join(parts)

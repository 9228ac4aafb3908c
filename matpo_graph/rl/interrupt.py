"""Turn SIGINT/SIGTERM into a flag the training loop checks, so it can checkpoint and exit cleanly."""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["StopFlag"]


class StopFlag:
    """Set by the first SIGINT/SIGTERM; a second signal restores the default handler's behaviour."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None
        self._previous: dict[int, object] = {}

    def __bool__(self) -> bool:
        return self._event.is_set()

    def install(self) -> "StopFlag":
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._event.is_set():
            self.uninstall()
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        self._event.set()

"""SIGINT/SIGTERM handling shared by the worker, the scheduler and their commands."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["defaults_in_place", "on_stop_signals"]


def on_stop_signals(handler: Callable[[signal.Signals], None]) -> Callable[[], None]:
    """Call ``handler`` on each SIGINT and SIGTERM; answers an undo function that puts the previous
    handlers back. Off the main thread (where Python cannot take signals) it installs nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        handler(signal.Signals(signum))

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def defaults_in_place() -> bool:
    """Whether SIGINT and SIGTERM still have Python's default handlers (nobody installed their own)."""
    return signal.getsignal(signal.SIGINT) is signal.default_int_handler and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL, None,
    )

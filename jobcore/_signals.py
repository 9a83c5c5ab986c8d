"""SIGINT/SIGTERM handling shared by the worker, the scheduler and their commands."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

__all__ = ["STOP_SIGNALS", "at_default", "on_stop_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a worker or a scheduler: the first drains, the second abandons."""


def on_stop_signals(
    handler: Callable[[signal.Signals], None], signals: Iterable[signal.Signals] = STOP_SIGNALS,
) -> Callable[[], None]:
    """Call ``handler`` on each of ``signals`` (default SIGINT and SIGTERM); answers an undo
    function that puts the previous handlers back. Off the main thread (where Python cannot
    take signals) it installs nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        handler(signal.Signals(signum))

    previous = {sig: signal.signal(sig, on_signal) for sig in signals}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def at_default() -> tuple[signal.Signals, ...]:
    """The stop signals whose handling nobody changed: SIGINT with Python's own handler (or the
    system default), SIGTERM with the system default.

    A signal the program handles itself is its own, and one that is ignored stays ignored: a
    shell script starts a background job (``python -m app.worker &``) with SIGINT ignored,
    and that must not cost the worker its SIGTERM drain.
    """
    defaults: dict[signal.Signals, tuple[object, ...]] = {
        signal.SIGINT: (signal.default_int_handler, signal.SIG_DFL),
        signal.SIGTERM: (signal.SIG_DFL, None),
    }
    return tuple(sig for sig in STOP_SIGNALS if signal.getsignal(sig) in defaults[sig])

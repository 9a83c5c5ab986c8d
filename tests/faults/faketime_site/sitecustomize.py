"""Start-up shim for the processes the clock-skew scenario runs under ``faketime`` (on their PYTHONPATH).

libfaketime 0.9.10, even with ``FAKETIME_DONT_FAKE_MONOTONIC=1``, shifts the absolute
deadline of ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...)`` by the fake offset.
Python 3.11+ sleeps that way in ``time.sleep``, so under ``faketime -f +1h`` every sleep
fails with EINVAL (a deadline before boot) or returns at once, and under ``-1h`` it lasts
an hour too long. ``select()`` with a relative timeout is left alone, so ``time.sleep``
sleeps through it here. Nothing else changes: the wall clock stays skewed (the fault under
test) and monotonic time stays real.
"""

import os
import select
import time

if os.environ.get("FAKETIME"):
    _monotonic = time.monotonic

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        deadline = _monotonic() + seconds
        while True:
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return
            select.select([], [], [], remaining)

    time.sleep = _sleep

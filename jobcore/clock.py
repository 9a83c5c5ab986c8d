"""Time as an input: the clock protocol, the store's clock, and a clock tests move by hand.

Every time-dependent decision is made on the store's clock (rule F01): a client's wall
clock is never trusted. A driver given no clock decides on its store's own clock
(PostgreSQL reads ``now()`` inside each statement; MongoDB reads the server's time and
carries it forward as a :class:`StoreClock`; the in-memory driver *is* its store, so
its :class:`SystemClock` is the store's). A test injects a :class:`ManualClock`, which
then stands in for the store's clock, and moves time without sleeping.

Beside ``now()``, a clock may offer ``monotonic()``: seconds on a clock that never
jumps, for a worker's own deadlines (rule F02). A ``ManualClock`` answers its own
elapsed time there, so moving it moves a worker's local deadlines with the store's
leases, as real time moves both.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "StoreClock", "SystemClock", "local_monotonic", "monotonic_of", "to_millis", "utc"]

utc = timezone.utc


def to_millis(value: datetime) -> datetime:
    """``value`` in UTC, truncated to the millisecond (the precision every backend keeps)."""
    value = value.astimezone(utc)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now()`` answering an aware UTC datetime."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


local_monotonic: Callable[[], float] = (
    functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic
)
"""Seconds on this host's clock that never jumps and keeps counting while the machine
sleeps (``CLOCK_BOOTTIME`` on Linux, else ``time.monotonic``)."""


def monotonic_of(clock: object) -> Callable[[], float]:
    """``clock.monotonic`` when the clock offers one (a :class:`ManualClock` in tests),
    else :data:`local_monotonic`: what a worker times its local deadlines with."""
    if isinstance(clock, StoreClock):
        return clock._mono  # the same reading, one call fewer (a worker reads it per job)
    if isinstance(clock, SystemClock):
        return local_monotonic
    method = getattr(clock, "monotonic", None)
    return method if callable(method) else local_monotonic


class SystemClock:
    """This process's UTC wall time: the in-memory driver's clock (that store lives here)."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(utc)

    def monotonic(self) -> float:
        """Seconds on this host's monotonic clock (:data:`local_monotonic`)."""
        return local_monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


class StoreClock:
    """The store's clock as this process sees it, without trusting the local wall clock.

    ``read()`` answers the store's current time (a round trip); the answer is anchored
    at the midpoint of that round trip on :data:`local_monotonic` and carried forward
    from there, so ``now()`` is the store's time to within half a round trip (plus
    the store's own precision), whatever this host's wall clock says. The reading is
    renewed every ``refresh`` seconds; a read whose round trip is longer than
    ``max_rtt`` is tried again (up to 3 times, keeping the shortest).

    Drivers that decide on the store itself (PostgreSQL's ``now()`` in SQL) use it
    only for what callers compute ahead of a call (a worker's retry time, a scheduler's
    next occurrence); MongoDB's driver decides with it.
    """

    def __init__(
        self, read: Callable[[], datetime], *, refresh: float = 30.0, max_rtt: float = 0.05,
        monotonic: Callable[[], float] = local_monotonic,
    ) -> None:
        self._read = read
        self._refresh = refresh
        self._max_rtt = max_rtt
        self._mono = monotonic
        self._anchor: tuple[datetime, float] | None = None  # (store time, local monotonic at that instant)
        self._lock = threading.Lock()
        self.rtt: float | None = None
        """Round trip of the reading in use (seconds): twice the bound on ``now()``'s error."""

    def sync(self) -> None:
        """Read the store's time now (raises what ``read`` raises, keeping the old reading)."""
        best: tuple[datetime, float, float] | None = None
        for _ in range(3):
            sent = self._mono()
            store = self._read()
            back = self._mono()
            if best is None or back - sent < best[2]:
                best = (store.astimezone(utc), (sent + back) / 2, back - sent)
            if back - sent <= self._max_rtt:
                break
        assert best is not None
        with self._lock:
            self._anchor = (best[0], best[1])
            self.rtt = best[2]

    def now(self) -> datetime:
        """The store's current time (read again when the last reading is ``refresh`` old).

        A failed re-read keeps the last reading; with no reading at all the error is raised.
        """
        anchor = self._anchor
        if anchor is None or self._mono() - anchor[1] >= self._refresh:
            try:
                self.sync()
            except Exception:
                if anchor is None:
                    raise
            anchor = self._anchor
            assert anchor is not None
        return anchor[0] + timedelta(seconds=self._mono() - anchor[1])

    def monotonic(self) -> float:
        """Seconds on this host's monotonic clock."""
        return self._mono()

    def __repr__(self) -> str:
        return "StoreClock()" if self.rtt is None else f"StoreClock(rtt={self.rtt * 1000:.1f}ms)"


class ManualClock:
    """A clock that moves only when told to. Thread-safe.

    >>> clock = ManualClock(datetime(2030, 1, 1, tzinfo=utc))
    >>> clock.advance(seconds=90).isoformat()
    '2030-01-01T00:01:30+00:00'
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime(2030, 1, 1, tzinfo=utc)
        if start.tzinfo is None or start.utcoffset() is None:
            raise ValueError("ManualClock needs a timezone-aware start time")
        self._now = start.astimezone(utc)
        self._elapsed = 0.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The time the clock was last set or advanced to."""
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float | None = None, **parts: float) -> datetime:
        """Move forward by ``delta`` (a timedelta or seconds) or ``timedelta(**parts)``."""
        step = timedelta(**parts) if delta is None else delta
        if not isinstance(step, timedelta):
            step = timedelta(seconds=step)
        if step < timedelta(0):
            raise ValueError("ManualClock only moves forward; use set() to jump back")
        with self._lock:
            self._now += step
            self._elapsed += step.total_seconds()
            return self._now

    def monotonic(self) -> float:
        """Seconds this clock has moved since it was made: a worker's local time in tests.

        Moving the clock moves it; :meth:`set` to an earlier time does not move it back
        (a monotonic clock never runs backwards).
        """
        with self._lock:
            return self._elapsed

    def set(self, when: datetime) -> datetime:
        """Jump to ``when`` (aware)."""
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("ManualClock.set needs a timezone-aware datetime")
        with self._lock:
            moved = (when.astimezone(utc) - self._now).total_seconds()
            self._elapsed += max(0.0, moved)
            self._now = when.astimezone(utc)
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now.isoformat()})"

"""Time as an input: the clock protocol, the wall clock, and a clock tests move by hand.

Every driver reads time only from the clock it was given, so a test (or an
application's own test suite) controls time without sleeping.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock", "to_millis", "utc"]

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


class SystemClock:
    """UTC wall time; the default clock of every driver."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(utc)

    def __repr__(self) -> str:
        return "SystemClock()"


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
            return self._now

    def set(self, when: datetime) -> datetime:
        """Jump to ``when`` (aware)."""
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("ManualClock.set needs a timezone-aware datetime")
        with self._lock:
            self._now = when.astimezone(utc)
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now.isoformat()})"

"""The in-memory driver: the whole JobDriver contract in one process, for tests and demos.

It keeps every rule the database drivers keep (the same front door,
:class:`~jobcore.door.FrontDoor`, checks every argument; payloads are stored as their
JSON text; time comes only from its clock) and is fast enough that application test
suites do not notice it. The store itself, its jobs backend, is
:class:`._jobs.MemoryJobs`: one lock guards all state.
"""

from __future__ import annotations

from typing import Any

from jobcore import validate as v
from jobcore.clock import Clock, SystemClock
from jobcore.door import FrontDoor, IntrospectDoor, LeasesDoor, SchedulesDoor
from jobcore.errors import UrlInvalid, redact

from ._async_driver import AsyncMemoryDriver
from ._introspect import MemoryIntrospect
from ._jobs import MemoryJobs
from ._leases import MemoryLeases
from ._schedules import MemorySchedules

__all__ = ["AsyncMemoryDriver", "MemoryDriver"]


class MemoryDriver(FrontDoor):
    """The in-memory :class:`~jobcore.driver.JobDriver`.

    Args:
        clock: Source of "now" (default: UTC wall time).
        default_max_attempts: ``max_attempts`` for jobs enqueued without one.
    """

    def __init__(self, *, clock: Clock | None = None, default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS) -> None:
        v.check_clock(clock)
        store = MemoryJobs(clock if clock is not None else SystemClock())
        super().__init__(store, default_max_attempts=default_max_attempts)
        # The store and its steps, which the introspector, leases and schedules share.
        self._store = store
        self._lock, self._rows, self._live_keys = store._lock, store._rows, store._live_keys
        self._leases, self._subscribers = store._leases, store._subscribers
        self._now, self._schedule, self._insert = store._now, store._schedule, store._insert
        self._finish, self._error, self._lapsed = store._finish, store._error, store._lapsed
        self._bury, self._release_lapsed, self._wake = store._bury, store._release_lapsed, store._wake
        self._forget_parent, self._wake_released = store._forget_parent, store._wake_released
        self.leases = LeasesDoor(MemoryLeases(self))
        self.introspect = IntrospectDoor(MemoryIntrospect(self))
        self.schedules = SchedulesDoor(MemorySchedules(self), default_max_attempts=self._default_max_attempts)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryDriver:
        """Build from ``memory://`` (the URL carries nothing else)."""
        if url.rstrip("/") != "memory:":
            raise UrlInvalid(f"{redact(url)!r} carries options the memory driver does not take", "use memory://")
        return cls(**options)

    def __repr__(self) -> str:
        return f"MemoryDriver(jobs={len(self._rows)}, clock={self.clock!r})"



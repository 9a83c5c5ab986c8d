"""The in-memory driver's async flavour: :class:`AsyncMemoryDriver`."""

from __future__ import annotations

from typing import Any, cast

from jobcore import validate as v
from jobcore.clock import Clock
from jobcore.door import (
    AsyncFrontDoor,
    AsyncIntrospectBackend,
    AsyncIntrospectDoor,
    AsyncJobsBackend,
    AsyncLeasesBackend,
    AsyncLeasesDoor,
    AsyncSchedulesBackend,
    AsyncSchedulesDoor,
)
from jobcore.door._awaiting import Awaiting
from jobcore.errors import OptionInvalid, UrlInvalid, redact

__all__ = ["AsyncMemoryDriver"]


class AsyncMemoryDriver(AsyncFrontDoor):
    """The in-memory :class:`~jobcore.driver.AsyncJobDriver`: every verb awaited, none blocking the loop.

    The store is a :class:`~jobcore.drivers.memory.MemoryDriver`'s, so every rule is
    kept by the same code; its steps take microseconds under one lock, so they run on
    the loop directly (no thread). Give ``twin=`` a :class:`MemoryDriver` to share its
    jobs (an async producer beside a sync worker, in one test); :attr:`twin` is the
    sync driver over this store either way.

    Args:
        clock: Source of "now" (default: UTC wall time). Not with ``twin`` (it has its clock).
        default_max_attempts: ``max_attempts`` for jobs enqueued without one.
        twin: A sync memory driver whose store this one shares.
    """

    def __init__(
        self, *, clock: Clock | None = None, default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS,
        twin: Any = None,
    ) -> None:
        from . import MemoryDriver  # noqa: PLC0415 - the package imports this module

        if twin is None:
            twin = MemoryDriver(clock=clock, default_max_attempts=default_max_attempts)
        elif not isinstance(twin, MemoryDriver):
            raise OptionInvalid(
                f"twin must be a MemoryDriver, got {type(twin).__name__}", "pass the MemoryDriver to share jobs with",
            )
        elif clock is not None:
            raise OptionInvalid("clock= and twin= were both given", "leave clock out: the twin's clock is used")
        self.twin: MemoryDriver = twin
        super().__init__(cast(AsyncJobsBackend, Awaiting(twin._backend)), default_max_attempts=default_max_attempts)
        self.leases = AsyncLeasesDoor(cast(AsyncLeasesBackend, Awaiting(twin.leases._backend)))
        self.introspect = AsyncIntrospectDoor(cast(AsyncIntrospectBackend, Awaiting(twin.introspect.backend)))
        self.schedules = AsyncSchedulesDoor(
            cast(AsyncSchedulesBackend, Awaiting(twin.schedules._backend)), default_max_attempts=default_max_attempts,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMemoryDriver:
        """Build from ``memory://`` (the URL carries nothing else)."""
        if url.rstrip("/") != "memory:":
            raise UrlInvalid(f"{redact(url)!r} carries options the memory driver does not take", "use memory://")
        return cls(**options)

    def __repr__(self) -> str:
        return f"AsyncMemoryDriver(jobs={len(self.twin._rows)}, clock={self.clock!r})"

"""jobcore: durable background jobs with one driver protocol and three backends that agree.

Start with :func:`connect` and :func:`set_job_driver`; declare handlers with ``@job``
and run them with :class:`Worker`; ``@job(schedule=cron(...))`` or ``every(...)`` makes them
periodic (a :class:`Scheduler` runs inside every worker). The contract every driver keeps is in
:mod:`jobcore.driver`; the records it answers with are in :mod:`jobcore.records`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jobcore.backoff import Backoff
from jobcore.clock import Clock, ManualClock, SystemClock
from jobcore.current import (
    cancel_job,
    cancel_job_async,
    connect,
    connect_async,
    get_async_job_driver,
    get_job_driver,
    set_async_job_driver,
    set_job_driver,
    use_async_job_driver,
    use_job_driver,
    wait_for_job,
    wait_for_job_async,
)
from jobcore.driver import AsyncJobDriver, Introspector, JobDriver, LeaseStore, ScheduleStore
from jobcore.errors import JobcoreError
from jobcore.rates import RateLimit
from jobcore.records import (
    FINISHED_STATES,
    LIVE_STATES,
    BulkResult,
    Claimed,
    ClaimResult,
    ClaimToken,
    FinishedCount,
    Job,
    JobError,
    JobFilter,
    JobSpec,
    JobState,
    LeaseSlot,
    Migration,
    Page,
    Progress,
    PruneResult,
    RescueResult,
    RetentionPolicy,
    Schedule,
    ScheduleOutcome,
    Stats,
)

if TYPE_CHECKING:  # loaded on first use (see __getattr__); listed here for type checkers and IDEs
    from jobcore.registry import JobContext, JobHandle, Registry, job
    from jobcore.scheduler import Scheduler
    from jobcore.schedules import cron, every
    from jobcore.worker import AsyncWorker, Worker

_LAZY = {
    "JobContext": "jobcore.registry",
    "JobHandle": "jobcore.registry",
    "Registry": "jobcore.registry",
    "job": "jobcore.registry",
    "Scheduler": "jobcore.scheduler",
    "cron": "jobcore.schedules",
    "every": "jobcore.schedules",
    "Worker": "jobcore.worker",
    "AsyncWorker": "jobcore.worker._aworker",
}
"""Public names whose modules load on first use, so ``import jobcore.drivers.memory`` (which
imports this package first) does not load the worker, the scheduler, the cron library and
what they pull in (asyncio, inspect, sockets). ``from jobcore import Worker`` works as ever."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0.dev0"

__all__ = [
    "FINISHED_STATES",
    "LIVE_STATES",
    "AsyncJobDriver",
    "AsyncWorker",
    "Backoff",
    "BulkResult",
    "ClaimResult",
    "ClaimToken",
    "Claimed",
    "Clock",
    "FinishedCount",
    "Introspector",
    "Job",
    "JobContext",
    "JobDriver",
    "JobError",
    "JobFilter",
    "JobHandle",
    "JobSpec",
    "JobState",
    "JobcoreError",
    "LeaseSlot",
    "LeaseStore",
    "ManualClock",
    "Migration",
    "Page",
    "Progress",
    "PruneResult",
    "RateLimit",
    "Registry",
    "RescueResult",
    "RetentionPolicy",
    "Schedule",
    "ScheduleOutcome",
    "ScheduleStore",
    "Scheduler",
    "Stats",
    "SystemClock",
    "Worker",
    "cancel_job",
    "cancel_job_async",
    "connect",
    "connect_async",
    "cron",
    "every",
    "get_async_job_driver",
    "get_job_driver",
    "job",
    "set_async_job_driver",
    "set_job_driver",
    "use_async_job_driver",
    "use_job_driver",
    "wait_for_job",
    "wait_for_job_async",
]

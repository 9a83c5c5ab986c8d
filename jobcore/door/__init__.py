"""The front door: what users call, checked once, over the narrow interfaces drivers implement.

Every driver object (``MemoryDriver``, ``PostgresDriver``, ``MongoDriver``, a third-party
one) is a :class:`FrontDoor`: the public :class:`~jobcore.driver.JobDriver` verbs run
their argument checks, defaults, refusals and capability decisions here, once, and then
call the driver's backend with checked values. A driver implements only the backends
(:class:`JobsBackend` for jobs, :class:`IntrospectBackend`, :class:`LeasesBackend` and
:class:`SchedulesBackend`), each taking already-checked parameters and keeping the rules
that need its store's atomicity; ``driver.introspect``, ``driver.leases`` and
``driver.schedules`` are the doors over the last three.

Every door and backend protocol comes in two flavours with the same names and checks:
the async one (``AsyncFrontDoor`` over ``AsyncJobsBackend``..., every store verb awaited)
is the source, in ``*_async.py``; the sync one is generated from it by
``tools/unasync.py``, so a check, a default or a refusal is written once for both.
"""

from jobcore.door._awaiting import Awaiting
from jobcore.door._common import FinishedRow, Refused, Spacing, chart_since, job_seq, prune_cutoffs
from jobcore.door._introspect import IntrospectBackend, IntrospectDoor
from jobcore.door._introspect_async import AsyncIntrospectBackend, AsyncIntrospectDoor
from jobcore.door._jobs import FrontDoor, JobsBackend
from jobcore.door._jobs_async import AsyncFrontDoor, AsyncJobsBackend
from jobcore.door._leases import LeasesBackend, LeasesDoor
from jobcore.door._leases_async import AsyncLeasesBackend, AsyncLeasesDoor
from jobcore.door._schedules import SchedulesBackend, SchedulesDoor
from jobcore.door._schedules_async import AsyncSchedulesBackend, AsyncSchedulesDoor

__all__ = [
    "AsyncFrontDoor",
    "AsyncIntrospectBackend",
    "AsyncIntrospectDoor",
    "AsyncJobsBackend",
    "AsyncLeasesBackend",
    "AsyncLeasesDoor",
    "AsyncSchedulesBackend",
    "AsyncSchedulesDoor",
    "Awaiting",
    "FinishedRow",
    "FrontDoor",
    "IntrospectBackend",
    "IntrospectDoor",
    "JobsBackend",
    "LeasesBackend",
    "LeasesDoor",
    "Refused",
    "SchedulesBackend",
    "SchedulesDoor",
    "Spacing",
    "chart_since",
    "job_seq",
    "prune_cutoffs",
]

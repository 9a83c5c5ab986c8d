"""The front door: what users call, checked once, over the narrow interfaces drivers implement.

Every driver object (``MemoryDriver``, ``PostgresDriver``, ``MongoDriver``, a third-party
one) is a :class:`FrontDoor`: the public :class:`~jobcore.driver.JobDriver` verbs run
their argument checks, defaults, refusals and capability decisions here, once, and then
call the driver's backend with checked values. A driver implements only the backends
(:class:`JobsBackend` for jobs, :class:`IntrospectBackend`, :class:`LeasesBackend` and
:class:`SchedulesBackend`), each taking already-checked parameters and keeping the rules
that need its store's atomicity; ``driver.introspect``, ``driver.leases`` and
``driver.schedules`` are the doors over the last three.
"""

from jobcore.door._introspect import (
    FinishedRow,
    IntrospectBackend,
    IntrospectDoor,
    Refused,
    Spacing,
    chart_since,
    job_seq,
    prune_cutoffs,
)
from jobcore.door._jobs import FrontDoor, JobsBackend
from jobcore.door._leases import LeasesBackend, LeasesDoor
from jobcore.door._schedules import SchedulesBackend, SchedulesDoor

__all__ = [
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

"""The front door: what users call, checked once, over the narrow interfaces drivers implement.

Every driver object (``MemoryDriver``, ``PostgresDriver``, ``MongoDriver``, a third-party
one) is a :class:`FrontDoor`: the public :class:`~jobcore.driver.JobDriver` verbs run
their argument checks, defaults, refusals and capability decisions here, once, and then
call the driver's backend with checked values. A driver implements only the backends
(:class:`JobsBackend` for jobs; introspection, leases and schedules have their own),
each taking already-checked parameters and keeping the rules that need its store's
atomicity.
"""

from jobcore.door._jobs import FrontDoor, JobsBackend

__all__ = [
    "FrontDoor",
    "JobsBackend",
]

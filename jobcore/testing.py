"""Helpers for applications' own test suites: jobs on an in-memory store, run on demand.

:func:`job_tester` (a context manager) and the ``job_tester`` pytest fixture install a
memory driver on a :class:`~jobcore.clock.ManualClock` as the process-wide driver, so
the application's ``.enqueue(...)`` calls land there. The :class:`JobTester` then runs
every due job synchronously, in the test's own thread (:meth:`JobTester.run_due`),
moves time (:meth:`JobTester.advance`), and answers what was enqueued::

    from jobcore.testing import job_tester

    def test_signup_sends_welcome_mail():
        with job_tester() as jobs:
            signup("ada@example.com")                 # enqueues send_welcome
            jobs.assert_enqueued("send_welcome", {"to": "ada@example.com"})
            jobs.run_due()                            # runs it (and whatever it enqueues)

With pytest, add ``pytest_plugins = ["jobcore.testing"]`` to a ``conftest.py`` and take
the ``job_tester`` fixture. Handlers run through the worker's own execution code
(:mod:`jobcore.worker._execution`: retries with backoff, terminal types, dead letters,
unstorable results) except that timeouts and concurrency limits are not enforced:
there is only one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from jobcore.clock import ManualClock, SystemClock, to_millis
from jobcore.current import use_job_driver
from jobcore.driver import JobDriver
from jobcore.records import Job, JobState
from jobcore.registry import JobContext, Registry, default_registry, job_logger
from jobcore.worker._execution import (
    find_handler,
    handler_error,
    logger,
    retry_options,
    run_async,
    run_sync,
    unstorable,
)

__all__ = ["ANY", "JobTester", "job_tester"]

ANY: Any = object()
"""Matches any payload in :meth:`JobTester.assert_enqueued`."""

_LEASE = timedelta(hours=1)


class JobTester:
    """A memory driver, its clock, and the registry whose handlers run.

    Attributes:
        driver: The in-memory store (also the process-wide driver while installed).
        clock: Its clock; it moves only through :meth:`advance`.
        registry: Where handlers are looked up.
        errors: ``(job, exception)`` for every attempt that raised, oldest first.
    """

    def __init__(self, *, start: datetime | None = None, registry: Registry | None = None) -> None:
        # Imported here: the package maps drivers/ to jobcore.drivers only once installed.
        from jobcore.drivers.memory import MemoryDriver  # type: ignore[import-not-found]  # noqa: PLC0415

        self.clock = ManualClock(to_millis(start if start is not None else SystemClock().now()))
        self.driver: JobDriver = MemoryDriver(clock=self.clock)
        self.registry = registry if registry is not None else default_registry
        self.errors: list[tuple[Job, BaseException]] = []

    def advance(self, delta: timedelta | float | None = None, **parts: float) -> datetime:
        """Move the clock forward (a timedelta, seconds, or ``timedelta`` keywords); answers the new now."""
        return self.clock.advance(delta, **parts)

    def run_due(self, *, raise_errors: bool = True, max_jobs: int = 10_000) -> list[Job]:
        """Run every job due now, one at a time in this thread, until none is left.

        Jobs that handlers enqueue run too when due; retries scheduled later wait for
        :meth:`advance`. Answers the jobs as settled, in run order. With
        ``raise_errors`` (the default) the first exception a handler raised is raised
        again once its failure is recorded; otherwise failures only land in the store
        (retry, dead letter...) and in :attr:`errors`. ``max_jobs`` stops a job that
        keeps enqueueing itself.
        """
        ran: list[Job] = []
        while True:
            queues = sorted(self.driver.introspect.stats().counts)
            if not queues:
                return ran
            result = self.driver.claim(
                queues, worker_id="jobcore-testing", limit=1, lease=_LEASE,
                drop_exhausted=self.registry.drop_exhausted(),
            )
            if not result.claimed:
                return ran
            if len(ran) >= max_jobs:
                raise RuntimeError(f"run_due ran {max_jobs} jobs and more keep coming; is a job enqueueing itself?")
            claimed = result.claimed[0]
            settled, raised = self._run_one(claimed.job, claimed.token)
            ran.append(settled)
            if raised is not None and raise_errors:
                raise raised

    def _run_one(self, job: Job, token: Any) -> tuple[Job, BaseException | None]:
        """Run one claimed attempt through the worker's own execution code, and settle it."""
        log = job_logger(logger, job)
        raised: BaseException | None
        handle, raised = find_handler(self.registry, job, log)
        if handle is not None:
            ctx = JobContext(job, token, log=log)
            outcome = asyncio.run(run_async(handle, job, ctx)) if handle.is_async else run_sync(handle, job, ctx)
            raised = outcome.raised
            if raised is not None and not isinstance(raised, Exception):
                raise raised  # KeyboardInterrupt, SystemExit...: the test run stops, as it would without jobcore
            if raised is None:
                raised = unstorable(outcome.result)  # W07: a result that cannot be stored fails the attempt
                if raised is None:
                    answer = self.driver.ack(token, outcome.result)
                    assert answer is not None
                    return answer, None
        assert raised is not None
        self.errors.append((job, raised))
        options = retry_options(self.clock.now(), handle, job, raised)
        answer = self.driver.nack(token, handler_error(raised), **options)
        assert answer is not None
        return answer, raised

    def enqueued(
        self, name: str | None = None, *, state: str | JobState | Iterable[str | JobState] | None = None,
        queue: str | None = None,
    ) -> list[Job]:
        """Jobs in the store (every state unless ``state`` says), oldest first."""
        from jobcore.records import JobFilter  # noqa: PLC0415 - only this helper needs it

        flt = JobFilter(name=name, state=state, queue=queue)
        jobs: list[Job] = []
        page = self.driver.introspect.list(flt, limit=200)
        jobs.extend(page.jobs)
        while page.after is not None:
            page = self.driver.introspect.list(flt, limit=200, after=page.after)
            jobs.extend(page.jobs)
        return jobs[::-1]

    def assert_enqueued(
        self, name: str, payload: Any = ANY, *, count: int | None = None,
        state: str | JobState | Iterable[str | JobState] | None = None,
    ) -> Job:
        """Assert that a job ``name`` (with ``payload``, when given) was enqueued; answers the latest match.

        ``count`` asserts exactly that many matches; ``state`` narrows the search.
        """
        matches = [j for j in self.enqueued(name, state=state) if payload is ANY or j.payload == payload]
        if count is not None and len(matches) != count:
            raise AssertionError(f"expected {count} {name!r} jobs{_with(payload)}, found {len(matches)}")
        if not matches:
            seen = sorted({j.name for j in self.enqueued()})
            raise AssertionError(f"no {name!r} job{_with(payload)} was enqueued; enqueued: {seen or 'nothing'}")
        return matches[-1]

    def assert_not_enqueued(self, name: str, payload: Any = ANY) -> None:
        """Assert that no job ``name`` (with ``payload``, when given) is in the store."""
        matches = [j for j in self.enqueued(name) if payload is ANY or j.payload == payload]
        if matches:
            raise AssertionError(f"expected no {name!r} job{_with(payload)}, found {len(matches)}")


def _with(payload: Any) -> str:
    return "" if payload is ANY else f" with payload {payload!r}"


@contextlib.contextmanager
def job_tester(*, start: datetime | None = None, registry: Registry | None = None) -> Iterator[JobTester]:
    """Install a fresh :class:`JobTester`'s memory driver as the process-wide one for the block."""
    tester = JobTester(start=start, registry=registry)
    with use_job_driver(tester.driver):
        try:
            yield tester
        finally:
            tester.driver.close()


def _job_tester_fixture() -> Iterator[JobTester]:
    """The ``job_tester`` pytest fixture: a :func:`job_tester` around each test."""
    with job_tester() as tester:
        yield tester


try:
    import pytest
except ImportError:  # pytest is a test-time dependency of the application, not of jobcore
    pass
else:
    job_tester_fixture = pytest.fixture(name="job_tester")(_job_tester_fixture)

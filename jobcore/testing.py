"""Helpers for applications' own test suites: jobs on an in-memory store, run on demand.

:func:`job_tester` (a context manager) and the ``job_tester`` pytest fixture install a
memory driver on a :class:`~jobcore.clock.ManualClock` as the process-wide driver (and
its async flavour as the process-wide async driver), so the application's
``.enqueue(...)`` and ``await .enqueue_async(...)`` calls land there. The :class:`JobTester` then runs
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
jobs run one at a time.

In an async test (pytest-asyncio, anyio), ``await jobs.run_due_async()`` runs the due
jobs with the async handlers awaited on the test's own event loop::

    async def test_signup_sends_welcome_mail(job_tester):
        await signup_async("ada@example.com")
        await job_tester.run_due_async()

``run_due()`` works there too, but runs each async handler on a loop of its own in a
helper thread while the test's loop waits (see :meth:`JobTester.run_due`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Coroutine, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from jobcore import _tracing
from jobcore._tracing import AttemptSpan
from jobcore.clock import ManualClock, SystemClock, to_millis
from jobcore.current import use_async_job_driver, use_job_driver
from jobcore.driver import AsyncJobDriver, JobDriver
from jobcore.records import Claimed, Job, JobState
from jobcore.registry import JobContext, JobHandle, Registry, default_registry, job_logger
from jobcore.worker._execution import (
    Outcome,
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
        async_driver: The same store's async flavour (the process-wide async driver while
            installed: ``await handle.enqueue_async(...)`` lands here too).
        clock: Its clock; it moves only through :meth:`advance`.
        registry: Where handlers are looked up.
        errors: ``(job, exception)`` for every attempt that raised, oldest first.
    """

    def __init__(self, *, start: datetime | None = None, registry: Registry | None = None) -> None:
        # Imported here: the package maps drivers/ to jobcore.drivers only once installed.
        from jobcore.drivers.memory import AsyncMemoryDriver, MemoryDriver  # type: ignore[import-not-found]  # noqa: PLC0415

        self.clock = ManualClock(to_millis(start if start is not None else SystemClock().now()))
        self.driver: JobDriver = MemoryDriver(clock=self.clock)
        self.async_driver: AsyncJobDriver = AsyncMemoryDriver(twin=self.driver)
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

        An async handler runs to its end on an event loop of its own (``asyncio.run``).
        Called from a coroutine (an event loop runs in this thread: pytest-asyncio, anyio),
        that loop runs in a helper thread while this one waits, so the caller's loop is
        blocked meanwhile: a handler that needs the caller's loop (an object bound to it, a
        task it runs) would wait forever. There, prefer ``await`` :meth:`run_due_async`,
        which runs async handlers on the caller's loop.
        """
        ran: list[Job] = []
        while True:
            claimed = self._claim_next(len(ran), max_jobs)
            if claimed is None:
                return ran
            job, token = claimed.job, claimed.token
            handle, ctx, raised = self._prepare(job, token)
            outcome: Outcome | None = None
            span = None if _tracing.hook is None else _tracing.hook.attempt(job)
            if handle is not None:
                assert ctx is not None
                with contextlib.nullcontext() if span is None else span.activate():
                    outcome = (
                        _run_to_end(run_async(handle, job, ctx)) if handle.is_async else run_sync(handle, job, ctx)
                    )
            settled, raised = self._settle(job, token, handle, outcome, raised, ctx=ctx, span=span)
            ran.append(settled)
            if raised is not None and raise_errors:
                raise raised

    async def run_due_async(self, *, raise_errors: bool = True, max_jobs: int = 10_000) -> list[Job]:
        """:meth:`run_due` for a coroutine: ``await jobs.run_due_async()`` in an async test.

        Async handlers are awaited on the caller's event loop (they may use whatever the
        test made on it: clients, locks, tasks); sync handlers are called directly, as
        :meth:`run_due` does. Runs under asyncio (pytest-asyncio, anyio's asyncio backend).
        The store is the tester's in-memory one: its calls never wait on I/O.
        """
        ran: list[Job] = []
        while True:
            claimed = self._claim_next(len(ran), max_jobs)
            if claimed is None:
                return ran
            job, token = claimed.job, claimed.token
            handle, ctx, raised = self._prepare(job, token)
            outcome: Outcome | None = None
            span = None if _tracing.hook is None else _tracing.hook.attempt(job)
            if handle is not None:
                assert ctx is not None
                with contextlib.nullcontext() if span is None else span.activate():
                    outcome = await run_async(handle, job, ctx) if handle.is_async else run_sync(handle, job, ctx)
            settled, raised = self._settle(job, token, handle, outcome, raised, ctx=ctx, span=span)
            ran.append(settled)
            if raised is not None and raise_errors:
                raise raised

    def _claim_next(self, ran: int, max_jobs: int) -> Claimed | None:
        """The next due job, claimed for one attempt, or None when none is due."""
        queues = sorted(self.driver.introspect.stats().counts)
        if not queues:
            return None
        result = self.driver.claim(
            queues, worker_id="jobcore-testing", limit=1, lease=_LEASE, drop_exhausted=self.registry.drop_exhausted(),
        )
        if not result.claimed:
            return None
        if ran >= max_jobs:
            raise RuntimeError(f"run_due ran {max_jobs} jobs and more keep coming; is a job enqueueing itself?")
        return result.claimed[0]

    def _prepare(self, job: Job, token: Any) -> tuple[JobHandle | None, JobContext | None, BaseException | None]:
        """The claimed job's handler and context, or the refusal when none is registered."""
        log = job_logger(logger, job)
        handle, missing = find_handler(self.registry, job, log)
        if handle is None:
            return None, None, missing
        return handle, JobContext(job, token, log=log), None

    def _settle(
        self, job: Job, token: Any, handle: JobHandle | None, outcome: Outcome | None, raised: BaseException | None,
        *, ctx: JobContext | None = None, span: AttemptSpan | None = None,
    ) -> tuple[Job, BaseException | None]:
        """Settle one attempt through the worker's own execution code (W07 and retries);
        with tracing on, end its ``span`` with the worker's outcome names.

        The handler's last ``ctx.progress`` report is stored first, as a worker's settler
        stores it (rules G), so a test reads it on the settled job."""
        if ctx is not None and ctx.progress_seq:
            self.driver.progress(token, ctx.progress_value, ctx.progress_message)
        if outcome is not None:
            raised = outcome.raised
            if raised is not None and not isinstance(raised, Exception):
                if span is not None:
                    span.record(raised)
                    span.end("abandoned")
                raise raised  # KeyboardInterrupt, SystemExit...: the test run stops, as it would without jobcore
            if raised is None:
                raised = unstorable(outcome.result)  # W07: a result that cannot be stored fails the attempt
                if raised is None:
                    answer = self.driver.ack(token, outcome.result)
                    assert answer is not None
                    if span is not None:
                        span.end("completed")
                    return answer, None
        assert raised is not None
        self.errors.append((job, raised))
        options = retry_options(self.clock.now(), handle, job, raised)
        answer = self.driver.nack(token, handler_error(raised), **options)
        assert answer is not None
        if span is not None:
            span.record(raised)
            span.end(_outcome(answer, options))
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


def _outcome(settled: Job, options: dict[str, Any]) -> str:
    """The worker's outcome name (:data:`jobcore.contrib.otel.OUTCOMES`) of a nack that landed."""
    if settled.state is JobState.DEAD:
        return "dead_lettered"
    if settled.state is JobState.FAILED:
        return "failed" if options.get("fail") else "dropped"
    return "retry"


def _run_to_end(coro: Coroutine[Any, Any, Outcome]) -> Outcome:
    """Run an async handler's coroutine to its end from sync code.

    With no event loop running in this thread, on a fresh one (``asyncio.run``);
    inside a running one (a sync call from a coroutine), on a fresh loop in a helper
    thread while this thread waits: ``asyncio.run`` refuses to nest.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    answer: list[Outcome] = []
    failed: list[BaseException] = []

    def main() -> None:
        try:
            answer.append(asyncio.run(coro))
        except BaseException as exc:  # run_async answers what the handler raised; this is the loop's own failure
            failed.append(exc)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(main,), name="jobcore-testing-async")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return answer[0]


def _with(payload: Any) -> str:
    return "" if payload is ANY else f" with payload {payload!r}"


@contextlib.contextmanager
def job_tester(*, start: datetime | None = None, registry: Registry | None = None) -> Iterator[JobTester]:
    """Install a fresh :class:`JobTester`'s memory driver as the process-wide one for the block
    (and its async flavour as the process-wide async driver)."""
    tester = JobTester(start=start, registry=registry)
    with use_job_driver(tester.driver), use_async_job_driver(tester.async_driver):
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

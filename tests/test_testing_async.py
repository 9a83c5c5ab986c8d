"""jobcore.testing inside a running event loop (issue #18, item 5): pytest-asyncio and anyio.

``run_due()`` used to call ``asyncio.run`` for async handlers, which a running loop
refuses; ``await run_due_async()`` now awaits them on the test's own loop, and
``run_due()`` runs them on a loop of its own in a helper thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from jobcore import Backoff, Registry
from jobcore.testing import JobTester, job_tester, job_tester_fixture  # noqa: F401 - the fixture, for pytest


class App:
    """A small application: an async handler, a sync one, one that fails, one that enqueues."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[int] = []
        self.sent: list[str] = []
        self.audit: list[dict[str, Any]] = []
        self.failures_left = 0
        self.gate: asyncio.Future[str] | None = None
        reg = self.registry

        @reg.job(name="send", queue="mail", max_attempts=3, backoff=Backoff(base=60, jitter=0))
        async def send(payload: dict[str, Any]) -> dict[str, bool]:
            self.loops.append(asyncio.get_running_loop())
            await asyncio.sleep(0)
            if self.failures_left > 0:
                self.failures_left -= 1
                raise ConnectionError("the mail server said no")
            if self.gate is not None:  # made on the test's loop: only awaitable there
                payload = {**payload, "to": await self.gate}
            self.sent.append(payload["to"])
            await record.enqueue_async({"event": "sent", "to": payload["to"]})  # a job enqueued by a handler
            return {"sent": True}

        @reg.job(name="record")
        def record(payload: dict[str, Any]) -> None:
            self.threads.append(threading.get_ident())
            self.audit.append(payload)

        @reg.job(name="reject", max_attempts=1)
        async def reject(payload: int) -> None:
            raise ValueError(f"no {payload}")

        self.send, self.record, self.reject = send, record, reject


@pytest.fixture
def app() -> Iterator[tuple[App, JobTester]]:
    application = App()
    with job_tester(registry=application.registry) as jobs:
        yield application, jobs


async def _runs_jobs_on_the_callers_loop(app: tuple[App, JobTester]) -> None:
    application, jobs = app
    await application.send.enqueue_async({"to": "ada@example.com"})  # the application's async producer
    ran = await jobs.run_due_async()
    assert [(j.name, j.state) for j in ran] == [("send", "done"), ("record", "done")]
    assert application.loops == [asyncio.get_running_loop()]  # awaited on the test's own loop
    assert application.threads == [threading.get_ident()]  # the sync handler: called directly
    assert application.sent == ["ada@example.com"]
    assert application.audit == [{"event": "sent", "to": "ada@example.com"}]
    assert jobs.assert_enqueued("send").result == {"sent": True}


async def _retries_then_succeeds(app: tuple[App, JobTester]) -> None:
    application, jobs = app
    application.failures_left = 1
    application.send.enqueue({"to": "bob@example.com"})
    assert [j.state for j in await jobs.run_due_async(raise_errors=False)] == ["scheduled"]
    retry = jobs.assert_enqueued("send", state="scheduled")
    assert (retry.attempt, retry.last_error.type) == (1, "ConnectionError")
    assert await jobs.run_due_async() == []  # the 60 s backoff has not passed
    jobs.advance(seconds=60)
    assert [j.name for j in await jobs.run_due_async()] == ["send", "record"]
    assert jobs.assert_enqueued("send").attempt == 2
    assert application.sent == ["bob@example.com"]


async def _raises_handler_errors(app: tuple[App, JobTester]) -> None:
    application, jobs = app
    application.reject.enqueue(7)
    with pytest.raises(ValueError, match="no 7"):
        await jobs.run_due_async()
    assert jobs.assert_enqueued("reject").state == "dead"
    assert [(j.name, type(e)) for j, e in jobs.errors] == [("reject", ValueError)]


async def _awaits_what_the_test_made_on_its_loop(app: tuple[App, JobTester]) -> None:
    """A handler awaiting a future of the test's loop: only run_due_async can run it."""
    application, jobs = app
    loop = asyncio.get_running_loop()
    application.gate = loop.create_future()
    loop.call_later(0.01, application.gate.set_result, "late@example.com")
    application.send.enqueue({"to": "ignored"})
    await jobs.run_due_async()
    assert application.sent == ["late@example.com"]


async def _run_due_inside_a_running_loop(app: tuple[App, JobTester]) -> None:
    """The sync run_due from a coroutine: no "asyncio.run() cannot be called from a running event loop"."""
    application, jobs = app
    application.failures_left = 1
    application.send.enqueue({"to": "eve@example.com"})
    with pytest.raises(ConnectionError):  # the handler's error, raised once its retry is recorded
        jobs.run_due()
    jobs.advance(seconds=60)
    assert [j.name for j in jobs.run_due()] == ["send", "record"]
    assert application.sent == ["eve@example.com"]
    assert application.audit == [{"event": "sent", "to": "eve@example.com"}]
    application.reject.enqueue(1)
    with pytest.raises(ValueError, match="no 1"):
        jobs.run_due()
    assert len(application.loops) == 2
    assert len(application.loops) == 2
    assert asyncio.get_running_loop() not in application.loops  # a loop of its own, in a helper thread
    assert application.threads == [threading.get_ident()]


SCENARIOS = [
    _runs_jobs_on_the_callers_loop,
    _retries_then_succeeds,
    _raises_handler_errors,
    _awaits_what_the_test_made_on_its_loop,
    _run_due_inside_a_running_loop,
]
IDS = [s.__name__.strip("_") for s in SCENARIOS]


@pytest.mark.asyncio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
async def test_under_pytest_asyncio(scenario: Any, app: tuple[App, JobTester]) -> None:
    await scenario(app)


@pytest.mark.anyio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
async def test_under_anyio(scenario: Any, app: tuple[App, JobTester]) -> None:
    await scenario(app)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.asyncio
async def test_the_job_tester_fixture_in_an_async_test(job_tester: JobTester) -> None:
    """The pytest fixture (``pytest_plugins = ["jobcore.testing"]``) serves async tests as it is."""
    registry = Registry()
    seen: list[int] = []

    @registry.job(name="double")
    async def double(payload: int) -> int:
        seen.append(payload)
        return payload * 2

    job_tester.registry = registry
    double.enqueue(21)
    [settled] = await job_tester.run_due_async()
    assert (settled.state, settled.result, seen) == ("done", 42, [21])


def test_run_due_outside_a_loop_still_runs_async_handlers(app: tuple[App, JobTester]) -> None:
    """Plain sync tests are unchanged: async handlers run on a fresh loop (asyncio.run) in this thread."""
    application, jobs = app
    application.send.enqueue({"to": "sync@example.com"})
    assert [j.name for j in jobs.run_due()] == ["send", "record"]
    assert application.sent == ["sync@example.com"]

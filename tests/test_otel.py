"""OpenTelemetry tracing (jobcore.contrib.otel) on every driver: the spans an enqueue and each
attempt make, their parents and links, attributes, recorded errors and outcomes, and the
enqueue's context kept by the store (what links an attempt to its enqueue is read back from it).

Spans are collected with the SDK's in-memory exporter; the driver is each sync parity driver
(memory, minimal, postgres, postgres-pgbouncer, mongo). The async flavour's own path is
tests/test_otel_async.py.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jobcore import JobContext, Registry, Worker
from jobcore.backoff import Backoff
from jobcore.contrib import otel
from jobcore.driver import JobDriver
from jobcore.errors import BackendUnavailable, ConfigurationError
from jobcore.records import JobSpec, JobState
from jobcore.testing import job_tester

NO_WAIT = Backoff(base=0.0, jitter=0.0)


class Spans:
    """A tracer provider of our own whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith(prefix)]


@pytest.fixture
def spans() -> Iterator[Spans]:
    collected = Spans()
    otel.instrument(collected.provider)
    try:
        yield collected
    finally:
        otel.uninstrument()
        collected.provider.shutdown()


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


def run_until(driver: JobDriver, registry: Registry, done: Callable[[Worker], bool], what: str) -> Worker:
    """Run a worker on ``driver`` until ``done(worker)``, then stop it."""
    worker = Worker(
        ["default"], driver=driver, registry=registry, lease=timedelta(seconds=30), poll_interval=0.01,
        heartbeat_interval=0.05, rescue_interval=None, drain_timeout=5.0, seed=3,
    ).start()
    try:
        wait_until(lambda: done(worker), what)
    finally:
        worker.stop(5.0)
    return worker


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_attempt_span_is_a_child_of_the_enqueue_span_and_linked_to_it(driver: JobDriver, spans: Spans) -> None:
    """Enqueued inside a request's span, a job's enqueue span is that request's child; its
    attempt's span is the enqueue span's child and links to it; the handler's own span is
    the attempt's child. Every span carries the job's id, name, queue and attempt."""
    registry = Registry()

    @registry.job(name="otel.ok")
    def ok(payload: int) -> int:
        with spans.tracer.start_as_current_span("inside the handler"):
            return payload * 2

    with spans.tracer.start_as_current_span("request") as request:
        job = ok.enqueue(21, driver=driver, queue="default")
    run_until(driver, registry, lambda w: w.counts["completed"] == 1, "the job to complete")

    [enqueue] = spans.named("jobcore enqueue")
    assert enqueue.name == "jobcore enqueue otel.ok"
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert attrs_of(enqueue) == {
        "messaging.system": "jobcore", "messaging.operation.type": "send", "messaging.operation.name": "enqueue",
        "messaging.destination.name": "default", "messaging.message.id": job.id,
        "jobcore.job.id": job.id, "jobcore.job.name": "otel.ok", "jobcore.job.queue": "default",
        "jobcore.job.attempt": 0,
    }

    # What the store kept: the enqueue span's W3C context, read back by an independent get.
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.state is JobState.DONE
    assert stored.trace_context is not None
    version, trace_id, span_id, _flags = stored.trace_context["traceparent"].split("-")
    assert (version, int(trace_id, 16), int(span_id, 16)) == (
        "00", enqueue.context.trace_id, enqueue.context.span_id,
    )

    [attempt] = spans.named("jobcore process")
    assert attempt.name == "jobcore process otel.ok"
    assert attempt.kind is SpanKind.CONSUMER
    assert attempt.context.trace_id == enqueue.context.trace_id
    assert attempt.parent is not None
    assert attempt.parent.span_id == enqueue.context.span_id
    assert [link.context.span_id for link in attempt.links] == [enqueue.context.span_id]
    assert attrs_of(attempt) == {
        "messaging.system": "jobcore", "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": "default", "messaging.message.id": job.id,
        "jobcore.job.id": job.id, "jobcore.job.name": "otel.ok", "jobcore.job.queue": "default",
        "jobcore.job.attempt": 1, "jobcore.job.max_attempts": job.max_attempts, "jobcore.outcome": "completed",
    }
    assert attempt.status.status_code is StatusCode.UNSET
    assert attempt.events == ()

    [inner] = spans.named("inside the handler")
    assert inner.parent is not None
    assert inner.parent.span_id == attempt.context.span_id


def test_a_failed_attempt_records_its_exception_and_the_retry_succeeds(driver: JobDriver, spans: Spans) -> None:
    """Attempt 1 raises: its span has the exception event, status ERROR and outcome retry;
    attempt 2 completes. Both are children of the one enqueue span."""
    registry = Registry()
    calls: list[int] = []

    @registry.job(name="otel.flaky", max_attempts=3, backoff=NO_WAIT)
    def flaky(payload: int) -> str:
        calls.append(payload)
        if len(calls) == 1:
            raise ValueError("the first try fails")
        return "ok"

    job = flaky.enqueue(1, driver=driver)
    run_until(driver, registry, lambda w: w.counts["completed"] == 1, "the retry to complete")

    [enqueue] = spans.named("jobcore enqueue")
    assert enqueue.parent is None  # no span was current: the enqueue starts the job's trace
    first, second = sorted(spans.named("jobcore process"), key=lambda s: attrs_of(s)["jobcore.job.attempt"])
    assert [attrs_of(s)["jobcore.job.attempt"] for s in (first, second)] == [1, 2]
    assert [attrs_of(s)["jobcore.outcome"] for s in (first, second)] == ["retry", "completed"]
    for span in (first, second):
        assert span.parent is not None
        assert span.parent.span_id == enqueue.context.span_id
        assert attrs_of(span)["jobcore.job.id"] == job.id
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "ValueError: the first try fails"
    assert attrs_of(first)["error.type"] == "ValueError"
    [event] = first.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.type"] == "ValueError"
    assert dict(event.attributes or {})["exception.message"] == "the first try fails"
    assert second.status.status_code is StatusCode.UNSET
    assert second.events == ()


def test_the_last_failed_attempt_is_dead_lettered(driver: JobDriver, spans: Spans) -> None:
    """With no attempt left, the attempt's span ends with outcome dead_lettered, its error recorded."""
    registry = Registry()

    @registry.job(name="otel.doomed", max_attempts=1)
    def doomed(payload: int) -> None:
        raise KeyError("missing")

    job = doomed.enqueue(1, driver=driver)
    run_until(driver, registry, lambda w: w.counts["dead_lettered"] == 1, "the job to be dead-lettered")

    assert driver.introspect.get(job.id).state is JobState.DEAD  # type: ignore[union-attr]
    [attempt] = spans.named("jobcore process")
    assert attrs_of(attempt)["jobcore.outcome"] == "dead_lettered"
    assert attempt.status.status_code is StatusCode.ERROR
    assert [dict(e.attributes or {})["exception.type"] for e in attempt.events] == ["KeyError"]


def test_the_link_comes_from_the_store_not_from_the_enqueuing_process(driver: JobDriver) -> None:
    """A job enqueued under one tracer provider (the web process) and run under another (the
    worker process, nothing shared in memory) still joins the enqueue's trace: the only
    thing carrying it is the context the store kept with the job."""
    web, worker_side = Spans(), Spans()
    registry = Registry()

    @registry.job(name="otel.remote")
    def remote(payload: int) -> int:
        return payload

    otel.instrument(web.provider)
    try:
        with web.tracer.start_as_current_span("web request"):
            job = remote.enqueue(5, driver=driver)
    finally:
        otel.uninstrument()
    [enqueue] = web.named("jobcore enqueue")

    otel.instrument(worker_side.provider)
    try:
        with worker_side.tracer.start_as_current_span("unrelated work in the worker's process"):
            pass
        run_until(driver, registry, lambda w: w.counts["completed"] == 1, "the job to complete")
    finally:
        otel.uninstrument()
    assert worker_side.named("jobcore enqueue") == []
    [attempt] = worker_side.named("jobcore process")
    assert attrs_of(attempt)["jobcore.job.id"] == job.id
    assert attempt.context.trace_id == enqueue.context.trace_id
    assert attempt.parent is not None
    assert attempt.parent.span_id == enqueue.context.span_id
    assert [link.context.span_id for link in attempt.links] == [enqueue.context.span_id]
    web.provider.shutdown()
    worker_side.provider.shutdown()


def test_link_only_starts_a_trace_of_its_own(driver: JobDriver) -> None:
    """instrument(link_only=True): the attempt is a root span of a new trace, linked to the enqueue."""
    collected = Spans()
    registry = Registry()

    @registry.job(name="otel.linked")
    def linked(payload: int) -> int:
        return payload

    otel.instrument(collected.provider, link_only=True)
    try:
        linked.enqueue(1, driver=driver)
        run_until(driver, registry, lambda w: w.counts["completed"] == 1, "the job to complete")
    finally:
        otel.uninstrument()
    [enqueue] = collected.named("jobcore enqueue")
    [attempt] = collected.named("jobcore process")
    assert attempt.parent is None
    assert attempt.context.trace_id != enqueue.context.trace_id
    assert [link.context.span_id for link in attempt.links] == [enqueue.context.span_id]
    collected.provider.shutdown()


def test_enqueue_many_makes_one_span_for_the_batch(driver: JobDriver, spans: Spans) -> None:
    """One PRODUCER span for the whole batch; every job keeps its context, so each attempt is its child."""
    registry = Registry()

    @registry.job(name="otel.batch")
    def batch(payload: int) -> int:
        return payload

    jobs = batch.enqueue_many([1, 2, 3], driver=driver)
    run_until(driver, registry, lambda w: w.counts["completed"] == 3, "the batch to complete")

    [enqueue] = spans.named("jobcore enqueue")
    assert enqueue.name == "jobcore enqueue otel.batch"
    assert attrs_of(enqueue)["messaging.batch.message_count"] == 3
    assert list(attrs_of(enqueue)["jobcore.job.ids"]) == [j.id for j in jobs]
    attempts = spans.named("jobcore process")
    assert sorted(attrs_of(s)["jobcore.job.id"] for s in attempts) == sorted(j.id for j in jobs)
    assert {s.parent.span_id for s in attempts if s.parent is not None} == {enqueue.context.span_id}
    assert all(driver.introspect.get(j.id).trace_context is not None for j in jobs)  # type: ignore[union-attr]


def test_an_idempotent_duplicate_keeps_the_first_enqueue_context(driver: JobDriver, spans: Spans) -> None:
    """A second enqueue of a live key inserts nothing: its span says duplicate, the job keeps the first context."""
    first = driver.enqueue("otel.keyed", 1, key="k1")
    again = driver.enqueue("otel.keyed", 2, key="k1")
    assert again.duplicate
    assert again.id == first.id
    one, two = sorted(spans.named("jobcore enqueue"), key=lambda s: s.start_time or 0)
    assert attrs_of(two)["jobcore.job.duplicate"] is True
    assert "jobcore.job.duplicate" not in attrs_of(one)
    stored = driver.introspect.get(first.id)
    assert stored is not None
    assert stored.trace_context is not None
    assert int(stored.trace_context["traceparent"].split("-")[2], 16) == one.context.span_id


def test_a_failed_enqueue_records_its_error(driver: JobDriver, spans: Spans, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store failure inside the enqueue span (injected into the driver's backend) is recorded on it."""

    door = getattr(driver, "_target", driver)  # an async flavour's door, behind its SyncBridge
    backend = door._backend

    def unavailable(jobs: Any, connection: Any) -> Any:
        raise BackendUnavailable("the store went away", "retry the enqueue")

    async def unavailable_async(jobs: Any, connection: Any) -> Any:
        unavailable(jobs, connection)

    class Unavailable:
        insert = staticmethod(unavailable_async if inspect.iscoroutinefunction(door.enqueue) else unavailable)

        def __getattr__(self, name: str) -> Any:
            return getattr(backend, name)

    monkeypatch.setattr(door, "_backend", Unavailable())
    with pytest.raises(BackendUnavailable):
        driver.enqueue("otel.unavailable", 1)
    [enqueue] = spans.named("jobcore enqueue")
    assert enqueue.status.status_code is StatusCode.ERROR
    assert attrs_of(enqueue)["error.type"] == "BackendUnavailable"
    assert [dict(e.attributes or {})["exception.type"] for e in enqueue.events] == [
        "jobcore.errors.BackendUnavailable"
    ]
    assert "jobcore.job.id" not in attrs_of(enqueue)


def test_a_schedule_firing_is_an_enqueue_span_and_its_job_keeps_the_context(
    driver: JobDriver, spans: Spans, clock: Any
) -> None:
    """A periodic job's firing runs in an enqueue span naming the schedule; its job's attempt is that span's child."""
    schedule = driver.schedules.declare("every-minute", {"every": 60})
    occurrence = schedule.watermark + timedelta(seconds=60)
    fired = driver.schedules.fire(
        "every-minute", expected=schedule.watermark, occurrence=occurrence, job=JobSpec(name="otel.tick"),
    )
    assert fired is not None
    assert fired.last_job_id is not None
    [enqueue] = spans.named("jobcore enqueue")
    assert attrs_of(enqueue)["jobcore.schedule.name"] == "every-minute"
    assert attrs_of(enqueue)["jobcore.job.id"] == fired.last_job_id
    registry = Registry()

    @registry.job(name="otel.tick")
    def tick(payload: Any) -> None:
        return None

    run_until(driver, registry, lambda w: w.counts["completed"] == 1, "the fired job to complete")
    [attempt] = spans.named("jobcore process")
    assert attempt.parent is not None
    assert attempt.parent.span_id == enqueue.context.span_id


def test_without_instrument_nothing_is_traced_or_stored(driver: JobDriver) -> None:
    """Tracing off (the default): no span from jobcore even with a provider set, and no
    context stored (PostgreSQL: a NULL column; MongoDB: no field; read back as None)."""
    collected = Spans()
    assert not otel.is_instrumented()
    registry = Registry()

    @registry.job(name="otel.plain")
    def plain(payload: int) -> int:
        return payload

    with collected.tracer.start_as_current_span("request"):
        job = plain.enqueue(1, driver=driver)
        more = plain.enqueue_many([2, 3], driver=driver)
    assert job.trace_context is None
    run_until(driver, registry, lambda w: w.counts["completed"] == 3, "the jobs to complete")
    assert [s.name for s in collected.finished()] == ["request"]
    for j in (job, *more):
        stored = driver.introspect.get(j.id)
        assert stored is not None
        assert stored.state is JobState.DONE
        assert stored.trace_context is None
    collected.provider.shutdown()


def test_instrument_without_opentelemetry_is_a_coded_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the opentelemetry package, instrument() says how to install it; jobcore stays untraced."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry now raises ImportError
    with pytest.raises(ConfigurationError) as refused:
        otel.instrument()
    assert refused.value.code == "JC_CONFIGURATION"
    assert "jobcore-queue[otel]" in refused.value.fix
    assert not otel.is_instrumented()


def test_jobcore_runs_without_opentelemetry_installed(tmp_path: Any) -> None:
    """In a process where opentelemetry cannot be imported, jobcore (and jobcore.contrib.otel)
    import, and a job is enqueued and run by a worker."""
    script = tmp_path / "no_otel.py"
    script.write_text(textwrap.dedent("""
        import sys, time

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError(f"{name} is blocked in this test")
                return None

        sys.meta_path.insert(0, Block())
        import jobcore
        import jobcore.contrib.otel
        from jobcore import Registry, Worker
        from jobcore.drivers.memory import MemoryDriver

        registry = Registry()

        @registry.job(name="plain")
        def plain(payload):
            return payload + 1

        driver = MemoryDriver()
        job = plain.enqueue(1, driver=driver)
        worker = Worker(["default"], driver=driver, registry=registry, poll_interval=0.01).start()
        deadline = time.monotonic() + 20
        while driver.introspect.get(job.id).state != "done" and time.monotonic() < deadline:
            time.sleep(0.01)
        worker.stop(5)
        assert not any(m.startswith("opentelemetry") for m in sys.modules), "opentelemetry was imported"
        print(driver.introspect.get(job.id).state, driver.introspect.get(job.id).result)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["done", "2"]


def test_uninstrument_stops_tracing(driver: JobDriver) -> None:
    """After uninstrument(), enqueues make no span and store no context."""
    collected = Spans()
    otel.instrument(collected.provider)
    assert otel.is_instrumented()
    traced = driver.enqueue("otel.x", 1)
    otel.uninstrument()
    plain = driver.enqueue("otel.x", 2)
    assert len(collected.named("jobcore enqueue")) == 1
    assert driver.introspect.get(traced.id).trace_context is not None  # type: ignore[union-attr]
    assert driver.introspect.get(plain.id).trace_context is None  # type: ignore[union-attr]
    collected.provider.shutdown()



def test_job_tester_runs_attempts_in_spans_too(spans: Spans) -> None:
    """jobcore.testing's run_due makes the same attempt spans as a worker: retry, then dead-lettered."""
    registry = Registry()

    @registry.job(name="otel.tested", max_attempts=2, backoff=NO_WAIT)
    def tested(payload: int) -> None:
        raise ValueError(f"no {payload}")

    with job_tester(registry=registry) as jobs:
        job = tested.enqueue(3)
        settled = jobs.run_due(raise_errors=False)
    assert [j.state for j in settled] == [JobState.SCHEDULED, JobState.DEAD]
    [enqueue] = spans.named("jobcore enqueue")
    attempts = spans.named("jobcore process")
    assert [(attrs_of(s)["jobcore.job.attempt"], attrs_of(s)["jobcore.outcome"]) for s in attempts] == [
        (1, "retry"), (2, "dead_lettered"),
    ]
    assert all(attrs_of(s)["jobcore.job.id"] == job.id for s in attempts)
    assert {s.parent.span_id for s in attempts if s.parent is not None} == {enqueue.context.span_id}
    assert all(s.status.status_code is StatusCode.ERROR for s in attempts)
    assert [dict(e.attributes or {})["exception.message"] for s in attempts for e in s.events] == ["no 3", "no 3"]


def test_a_job_cancelled_while_running_ends_its_span_called_off(driver: JobDriver, spans: Spans) -> None:
    """An operator cancels the running job: the worker's next heartbeat finds the lease gone, calls
    the handler off, and the attempt's span ends with outcome called_off (nothing of it is recorded)."""
    registry = Registry()
    started = threading.Event()

    @registry.job(name="otel.long")
    def long(payload: int, ctx: JobContext) -> None:
        started.set()
        ctx.cancelled.wait(20)

    job = long.enqueue(1, driver=driver)

    def cancelled(worker: Worker) -> bool:
        if started.is_set() and driver.introspect.get(job.id).state is JobState.RUNNING:  # type: ignore[union-attr]
            driver.introspect.cancel(job.id, "not needed any more")
        return worker.counts["lost"] == 1 and bool(spans.named("jobcore process"))

    run_until(driver, registry, cancelled, "the attempt to be called off")
    [attempt] = spans.named("jobcore process")
    assert attrs_of(attempt)["jobcore.outcome"] == "called_off"
    assert driver.introspect.get(job.id).state is JobState.CANCELLED  # type: ignore[union-attr]


def test_a_timed_out_attempt_records_the_timeout(driver: JobDriver, spans: Spans) -> None:
    """A handler past its timeout: JobTimeout is recorded on the span, the attempt retries."""
    registry = Registry()

    @registry.job(name="otel.slow", timeout=0.2, max_attempts=2, backoff=Backoff(base=3600.0, jitter=0.0))
    def slow(payload: int, ctx: JobContext) -> None:
        ctx.cancelled.wait(20)

    slow.enqueue(1, driver=driver)
    run_until(driver, registry, lambda w: w.counts["retried"] == 1, "the timed-out attempt to be retried")
    [attempt] = spans.named("jobcore process")
    assert attrs_of(attempt)["jobcore.outcome"] == "retry"
    assert attrs_of(attempt)["error.type"] == "JobTimeout"
    assert attempt.status.status_code is StatusCode.ERROR

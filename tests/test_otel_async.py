"""OpenTelemetry tracing on the async flavours.

Every driver-level scenario of tests/test_otel.py runs again here on each async flavour
(``memory-async``, ``minimal-async``, ``postgres-async``, ``mongo-async``, driven through
:class:`jobcore._bridge.SyncBridge`, so the traced enqueue is the async door's own code),
and :func:`test_async_worker_and_enqueue_async_in_one_trace` runs the native async path:
``await handle.enqueue_async`` inside a span and an :class:`~jobcore.AsyncWorker` on the
test's loop running an async handler.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest
from jobcore.drivers.memory import AsyncMemoryDriver
from opentelemetry.trace import SpanKind, StatusCode

from jobcore import AsyncWorker, Backoff, Registry
from jobcore.clock import ManualClock
from jobcore.contrib import otel
from tests.test_otel import (  # the scenarios, collected here again for the async flavours
    Spans,
    attrs_of,
    spans,
    test_a_failed_attempt_records_its_exception_and_the_retry_succeeds,
    test_a_failed_enqueue_records_its_error,
    test_a_job_cancelled_while_running_ends_its_span_called_off,
    test_a_schedule_firing_is_an_enqueue_span_and_its_job_keeps_the_context,
    test_a_timed_out_attempt_records_the_timeout,
    test_an_idempotent_duplicate_keeps_the_first_enqueue_context,
    test_attempt_span_is_a_child_of_the_enqueue_span_and_linked_to_it,
    test_enqueue_many_makes_one_span_for_the_batch,
    test_link_only_starts_a_trace_of_its_own,
    test_the_last_failed_attempt_is_dead_lettered,
    test_the_link_comes_from_the_store_not_from_the_enqueuing_process,
    test_uninstrument_stops_tracing,
    test_without_instrument_nothing_is_traced_or_stored,
)

__all__ = [
    "spans",
    "test_a_failed_attempt_records_its_exception_and_the_retry_succeeds",
    "test_a_failed_enqueue_records_its_error",
    "test_a_job_cancelled_while_running_ends_its_span_called_off",
    "test_a_schedule_firing_is_an_enqueue_span_and_its_job_keeps_the_context",
    "test_a_timed_out_attempt_records_the_timeout",
    "test_an_idempotent_duplicate_keeps_the_first_enqueue_context",
    "test_attempt_span_is_a_child_of_the_enqueue_span_and_linked_to_it",
    "test_enqueue_many_makes_one_span_for_the_batch",
    "test_link_only_starts_a_trace_of_its_own",
    "test_the_last_failed_attempt_is_dead_lettered",
    "test_the_link_comes_from_the_store_not_from_the_enqueuing_process",
    "test_uninstrument_stops_tracing",
    "test_without_instrument_nothing_is_traced_or_stored",
]


ASYNC_FLAVOURS_ONLY = True
"""The sync flavours ran these scenarios in tests/test_otel.py: fixtures/plugin.py deselects them here."""


@pytest.mark.asyncio
async def test_async_worker_and_enqueue_async_in_one_trace() -> None:
    """``await enqueue_async`` in a request's span, an AsyncWorker on the same loop: the
    enqueue span is the request's child, each attempt the enqueue's child; the async
    handler's own span is its attempt's child; the failed attempt's error is recorded."""
    collected = Spans()
    otel.instrument(collected.provider)
    try:
        driver = AsyncMemoryDriver(clock=ManualClock(datetime(2030, 1, 1, 12, tzinfo=timezone.utc)))
        registry = Registry()
        tries: list[int] = []

        @registry.job(name="otel.async", max_attempts=2, backoff=Backoff(base=0.0, jitter=0.0))
        async def handler(payload: int) -> int:
            tries.append(payload)
            with collected.tracer.start_as_current_span("awaited inside"):
                await asyncio.sleep(0)
            if len(tries) == 1:
                raise RuntimeError("first try")
            return payload

        with collected.tracer.start_as_current_span("request") as request:
            job = await handler.enqueue_async(7, driver=driver)
        async with AsyncWorker(
            ["default"], driver=driver, registry=registry, lease=timedelta(seconds=30), poll_interval=0.01,
            heartbeat_interval=0.05, rescue_interval=None, drain_timeout=5.0,
        ) as worker:
            deadline = time.monotonic() + 20
            while worker.counts["completed"] < 1:
                assert time.monotonic() < deadline, "the job did not complete"
                await asyncio.sleep(0.01)
        await driver.close()
    finally:
        otel.uninstrument()

    [enqueue] = collected.named("jobcore enqueue")
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request.get_span_context().span_id
    attempts = sorted(collected.named("jobcore process"), key=lambda s: attrs_of(s)["jobcore.job.attempt"])
    assert [(attrs_of(s)["jobcore.job.attempt"], attrs_of(s)["jobcore.outcome"]) for s in attempts] == [
        (1, "retry"), (2, "completed"),
    ]
    assert all(s.kind is SpanKind.CONSUMER and attrs_of(s)["jobcore.job.id"] == job.id for s in attempts)
    assert {s.parent.span_id for s in attempts if s.parent is not None} == {enqueue.context.span_id}
    assert attempts[0].status.status_code is StatusCode.ERROR
    assert [dict(e.attributes or {})["exception.message"] for e in attempts[0].events] == ["first try"]
    inner = collected.named("awaited inside")
    assert sorted(s.parent.span_id for s in inner if s.parent is not None) == sorted(
        s.context.span_id for s in attempts
    )
    collected.provider.shutdown()

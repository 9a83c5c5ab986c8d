"""Tracing on MongoDB: what a job's document holds, and a traced enqueue inside the caller's transaction.

The documents are read with pymongo directly, never through the driver.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jobcore.drivers.mongo import MongoDriver

from jobcore.contrib import otel
from tests.test_otel import Spans


@pytest.fixture
def spans() -> Iterator[Spans]:
    collected = Spans()
    otel.instrument(collected.provider)
    try:
        yield collected
    finally:
        otel.uninstrument()
        collected.provider.shutdown()


def test_the_document_has_no_trace_field_untraced_and_the_context_pairs_traced(driver: MongoDriver) -> None:
    """Untraced: no ``trace`` field at all. Traced: ``[[name, value], ...]`` with the enqueue span's traceparent."""
    plain = driver.enqueue("mongo.plain", 1)
    collected = Spans()
    otel.instrument(collected.provider)
    try:
        traced = driver.enqueue("mongo.traced", 2)
    finally:
        otel.uninstrument()
    [enqueue] = collected.named("jobcore enqueue")
    plain_doc = driver._jobs.find_one({"_id": int(plain.id)})
    traced_doc = driver._jobs.find_one({"_id": int(traced.id)})
    assert plain_doc is not None
    assert traced_doc is not None
    assert "trace" not in plain_doc
    [[name, value]] = traced_doc["trace"]
    assert name == "traceparent"
    assert value.split("-")[1:3] == [f"{enqueue.context.trace_id:032x}", f"{enqueue.context.span_id:016x}"]
    collected.provider.shutdown()


def test_a_traced_enqueue_joins_the_callers_transaction(driver: MongoDriver, spans: Spans) -> None:
    """session=: the traced jobs are written in the caller's transaction and keep their context."""
    if "transactional_enqueue" not in driver.capabilities:
        pytest.skip("the server offers no transactions")
    with driver._client.start_session() as session, session.start_transaction():
        with spans.tracer.start_as_current_span("request") as request:
            job = driver.enqueue("mongo.tx", 1, session=session)
            batch = driver.enqueue_many([{"name": "mongo.tx", "payload": 2}], session=session)
        assert driver.introspect.get(job.id) is None  # not visible before the commit
    one, many = sorted(spans.named("jobcore enqueue"), key=lambda s: s.start_time or 0)
    assert {s.parent.span_id for s in (one, many) if s.parent is not None} == {request.get_span_context().span_id}
    for answer, span in ((job, one), (batch[0], many)):
        stored = driver.introspect.get(answer.id)
        assert stored is not None
        assert stored.trace_context is not None
        assert int(stored.trace_context["traceparent"].split("-")[2], 16) == span.context.span_id

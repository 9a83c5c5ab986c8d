"""Tracing on PostgreSQL: what the ``trace`` column holds, what a traced enqueue costs in
statements, and traced enqueues inside the caller's transaction (sync and async).

The column is read with plain SQL on a connection of our own, never through the driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver

from jobcore.contrib import otel
from tests.postgres.test_statement_budget import Recorder, _names, counted
from tests.test_otel import Spans

__all__ = ["counted"]


@pytest.fixture
def spans() -> Iterator[Spans]:
    collected = Spans()
    otel.instrument(collected.provider)
    try:
        yield collected
    finally:
        otel.uninstrument()
        collected.provider.shutdown()


def stored_trace(pg_url: str, schema: str, job_id: str) -> Any:
    """The row's ``trace`` column as the server holds it (``None`` for SQL NULL)."""
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            psycopg.sql.SQL("SELECT trace FROM {}.jobs WHERE id = %s").format(psycopg.sql.Identifier(schema)),
            (int(job_id),),
        ).fetchone()
    assert row is not None, f"job {job_id} is not in the table"
    return row[0]


def test_the_trace_column_is_null_untraced_and_the_w3c_context_traced(driver: PostgresDriver, pg_url: str) -> None:
    """Untraced: SQL NULL. Traced: a JSON object with the enqueue span's traceparent."""
    plain = driver.enqueue("pg.plain", 1)
    collected = Spans()
    otel.instrument(collected.provider)
    try:
        traced = driver.enqueue("pg.traced", 2)
    finally:
        otel.uninstrument()
    [enqueue] = collected.named("jobcore enqueue")
    assert stored_trace(pg_url, driver.schema, plain.id) is None
    column = stored_trace(pg_url, driver.schema, traced.id)
    assert set(column) == {"traceparent"}
    assert column["traceparent"].split("-")[1:3] == [
        f"{enqueue.context.trace_id:032x}", f"{enqueue.context.span_id:016x}",
    ]
    collected.provider.shutdown()


def test_a_traced_enqueue_is_still_one_statement(counted: tuple[PostgresDriver, Recorder], spans: Spans) -> None:
    """Traced, one job or a batch is one statement (the keyed ENQUEUE form, which stores the context)."""
    driver, recorder = counted
    driver.enqueue("budget", {"n": 0})
    assert _names(driver, recorder.take()) == ["ENQUEUE"]
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}} for i in range(50)])
    assert _names(driver, recorder.take()) == ["ENQUEUE"]
    assert len(spans.named("jobcore enqueue")) == 2


def test_a_traced_enqueue_joins_the_callers_transaction(
    driver: PostgresDriver, pg_url: str, spans: Spans
) -> None:
    """connection=: committed, the job keeps its context; rolled back, nothing is stored,
    and both enqueues made their span."""
    with psycopg.connect(pg_url) as conn:
        kept = driver.enqueue("pg.tx", 1, connection=conn)
        conn.commit()
        dropped = driver.enqueue_many([{"name": "pg.tx", "payload": 2}], connection=conn)
        conn.rollback()
    assert driver.introspect.get(dropped[0].id) is None
    stored = driver.introspect.get(kept.id)
    assert stored is not None
    assert stored.trace_context is not None
    first, second = sorted(spans.named("jobcore enqueue"), key=lambda s: s.start_time or 0)
    assert int(stored.trace_context["traceparent"].split("-")[2], 16) == first.context.span_id
    assert dict(second.attributes or {})["jobcore.job.id"] == dropped[0].id


def test_a_traced_enqueue_joins_an_async_transaction(
    make: Callable[..., Any], pg_url: str, spans: Spans
) -> None:
    """On the async driver, inside the caller's AsyncConnection transaction, in the caller's span."""
    store = make()

    async def scenario() -> tuple[str, int]:
        adriver = AsyncPostgresDriver(pg_url, schema=store.schema, pool_max=2)
        try:
            async with await psycopg.AsyncConnection.connect(pg_url) as conn:
                with spans.tracer.start_as_current_span("request") as request:
                    job = await adriver.enqueue("pg.atx", 1, connection=conn)
                await conn.commit()
            return job.id, request.get_span_context().span_id
        finally:
            await adriver.close()

    job_id, request_span = asyncio.run(scenario())
    [enqueue] = spans.named("jobcore enqueue")
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request_span
    stored = store.introspect.get(job_id)
    assert stored is not None
    assert stored.trace_context is not None
    assert int(stored.trace_context["traceparent"].split("-")[2], 16) == enqueue.context.span_id

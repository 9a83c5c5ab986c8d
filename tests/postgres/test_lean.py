"""The lean path (``_lean``): a one-at-a-time enqueue straight through libpq, on the driver's own
connections, with the cursor's answers, refusals and bounds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver, _lean, _lean_async, _lean_wire, make_pool

from fixtures import postgres as fx
from jobcore.clock import StoreClock
from jobcore.errors import BackendTimeout, JobcoreError

_FIELDS = ("id", "name", "queue", "payload", "state", "priority", "attempt", "max_attempts", "run_at", "created_at")


@pytest.fixture
def lean_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The statement texts sent on the lean path (sync and async) during the test."""
    calls: list[bytes] = []
    run, run_async = _lean.run, _lean_async.run

    def spy(conn: Any, text: bytes, params: Any) -> Any:
        calls.append(text)
        return run(conn, text, params)

    async def spy_async(conn: Any, text: bytes, params: Any) -> Any:
        calls.append(text)
        return await run_async(conn, text, params)

    monkeypatch.setattr(_lean, "run", spy)
    monkeypatch.setattr(_lean_async, "run", spy_async)
    return calls


@pytest.fixture
def store_driver(make: Callable[..., Any], pg_url: str) -> Callable[..., PostgresDriver]:
    """``build(**options)``: a migrated driver on its own pool, on the store's clock (as in production)."""

    def build(**options: Any) -> PostgresDriver:
        driver: PostgresDriver = make(target=pg_url, clock=None, **options)
        assert isinstance(driver.clock, StoreClock)
        return driver

    return build


def _prepared(driver: PostgresDriver) -> list[str]:
    """The lean statements prepared on the connection the driver's one-connection pool holds."""
    conn = driver._pool.getconn()
    try:
        return [row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'jc\\_%'")]
    finally:
        driver._pool.putconn(conn)


def test_a_plain_enqueue_takes_the_lean_path_and_answers_what_was_stored(
    store_driver: Callable[..., PostgresDriver], lean_calls: list[bytes],
) -> None:
    driver = store_driver(pool_max=1)
    jobs = [driver.enqueue("mail", {"to": "a@example.com", "n": [1, 2.5, None]}, queue="q", priority=3,
                           max_attempts=7) for _ in range(3)]
    assert len(lean_calls) == 3
    for job in jobs:
        stored = driver.introspect.get(job.id)
        assert stored is not None
        assert {f: getattr(job, f) for f in _FIELDS} == {f: getattr(stored, f) for f in _FIELDS}
    assert jobs[0].payload == {"to": "a@example.com", "n": [1, 2.5, None]}
    assert (jobs[0].state, jobs[0].priority, jobs[0].max_attempts, jobs[0].queue) == ("ready", 3, 7, "q")
    assert len({job.id for job in jobs}) == 3
    # Prepared once, on the pool's one connection.
    assert _prepared(driver) == [_lean_wire.statement_name(lean_calls[0]).decode()]


def test_what_the_lean_path_cannot_send_takes_the_cursor(
    store_driver: Callable[..., PostgresDriver], driver: PostgresDriver, lean_calls: list[bytes],
) -> None:
    """A due time (a datetime), an injected clock (its now is a datetime): the cursor sends them."""
    on_store = store_driver()
    later = on_store.clock.now().replace(microsecond=0)
    job = on_store.enqueue("later", run_at=later)
    assert (job.run_at, job.state) == (later, "ready")
    assert driver.enqueue("on_a_manual_clock").state == "ready"  # the fixture's driver: a ManualClock
    assert lean_calls == []


def test_a_callers_cursor_factory_sees_the_enqueue(
    pg_url: str, pool: Any, lean_calls: list[bytes],
) -> None:
    """A pool of the caller's with its own cursor class: every statement goes through that class."""
    seen: list[bytes] = []

    class Recording(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            seen.append(query if isinstance(query, bytes) else str(query).encode())
            return super().execute(query, params, **kwargs)

    schema = fx.schema_name()
    caller_pool = make_pool(pg_url, min_size=1, max_size=1, cursor_factory=Recording)
    driver = PostgresDriver(caller_pool, schema=schema)
    try:
        driver.migrate()
        seen.clear()
        driver.enqueue("recorded")
        assert lean_calls == []
        assert seen == [driver.q.ENQUEUE_ONE]
    finally:
        driver.close()
        caller_pool.close()
        fx.drop_schema(pool, schema)


def test_a_deallocated_lean_statement_is_prepared_again(
    store_driver: Callable[..., PostgresDriver], lean_calls: list[bytes],
) -> None:
    driver = store_driver(pool_max=1)
    first = driver.enqueue("one")
    conn = driver._pool.getconn()
    conn.execute("DEALLOCATE ALL")
    driver._pool.putconn(conn)
    assert _prepared(driver) == []
    second = driver.enqueue("two")
    assert int(second.id) > int(first.id)
    assert sorted(j.name for j in driver.introspect.list().jobs) == ["one", "two"]
    assert len(_prepared(driver)) == 1
    assert len(lean_calls) == 2


def test_behind_a_transaction_pooler_the_lean_statement_goes_unnamed(
    store_driver: Callable[..., PostgresDriver], lean_calls: list[bytes],
) -> None:
    """``pooler="transaction"``: the connection keeps nothing between statements, so nothing is prepared."""
    driver = store_driver(pool_max=1, pooler="transaction")
    jobs = [driver.enqueue("pooled") for _ in range(7)]
    assert len(lean_calls) == 7
    assert len({j.id for j in jobs}) == 7
    assert _prepared(driver) == []
    assert driver.introspect.stats().count("ready") == 7


def test_a_server_refusal_on_the_lean_path_is_translated_and_writes_nothing(
    store_driver: Callable[..., PostgresDriver], lean_calls: list[bytes],
) -> None:
    driver = store_driver(pool_max=1)
    driver.enqueue("before")
    conn = driver._pool.getconn()
    conn.execute("SET default_transaction_read_only = on")
    driver._pool.putconn(conn)
    with pytest.raises(JobcoreError) as info:
        driver.enqueue("refused")
    assert not isinstance(info.value, psycopg.Error)
    assert isinstance(info.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
    assert info.value.code.startswith("JC_")
    conn = driver._pool.getconn()
    conn.execute("SET default_transaction_read_only = off")
    driver._pool.putconn(conn)
    assert [j.name for j in driver.introspect.list().jobs] == ["before"]
    assert len(lean_calls) == 2


def test_a_lean_enqueue_on_a_stalled_connection_answers_jc_db_timeout_within_call_timeout(
    proxied: Callable[..., Any], lean_calls: list[bytes],
) -> None:
    """F07 on the lean path: the wait is the connection's own, bounded by call_timeout."""
    driver, proxy = proxied(store_clock=True, call_timeout=300)
    driver.enqueue("warm")
    proxy.freeze()
    started = time.monotonic()
    with pytest.raises(BackendTimeout) as info:
        driver.enqueue("stuck")
    assert 0.2 <= time.monotonic() - started <= 1.3
    assert info.value.code == "JC_DB_TIMEOUT"
    proxy.thaw()
    assert driver.enqueue("after").state == "ready"  # on a new connection: the stalled one was dropped
    assert len(lean_calls) == 3


def test_the_async_driver_takes_the_lean_path_too(pg_url: str, pool: Any, lean_calls: list[bytes]) -> None:
    schema = fx.schema_name()

    async def scenario() -> None:
        driver = AsyncPostgresDriver(pg_url, schema=schema, pool_max=1)
        try:
            await driver.migrate()
            jobs = [await driver.enqueue("async_mail", {"i": i}, queue="a") for i in range(3)]
            for job in jobs:
                stored = await driver.introspect.get(job.id)
                assert stored is not None
                assert {f: getattr(job, f) for f in _FIELDS} == {f: getattr(stored, f) for f in _FIELDS}
        finally:
            await driver.close()

    try:
        asyncio.run(scenario())
    finally:
        fx.drop_schema(pool, schema)
    assert len(lean_calls) == 3

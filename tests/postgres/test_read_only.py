"""A server that takes no writes (a standby, a primary set read-only, the standby a
multi-host URL reached first): refused as ``JC_DB_UNAVAILABLE`` with what to do, nothing
written, and the connection closed so the next call connects again. With real standbys,
tests/faults/test_failover.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver, _pool

from jobcore.errors import BackendUnavailable


@pytest.fixture
def store(make: Callable[..., Any]) -> Any:
    """A migrated driver in a fresh schema: the independent reader of what was stored."""
    return make()


def _check_refusal(error: BaseException) -> None:
    assert isinstance(error, BackendUnavailable), repr(error)
    assert error.code == "JC_DB_UNAVAILABLE"
    assert "read-only" in error.cause
    assert "target_session_attrs=read-write" in error.fix
    assert isinstance(error.__cause__, psycopg.errors.ReadOnlySqlTransaction)


def test_a_read_only_connection_is_refused_as_unavailable_and_closed_so_the_next_call_writes(
    store: Any, pg_url: str
) -> None:
    with PostgresDriver(pg_url, schema=store.schema, pool_max=1) as driver:
        driver.enqueue("warm")
        conn = driver._pool.getconn()
        conn.execute("SET default_transaction_read_only = on")  # this session only: as a standby answers
        driver._pool.putconn(conn)
        with pytest.raises(BackendUnavailable) as info:
            driver.enqueue("refused")
        _check_refusal(info.value)
        assert conn.closed
        assert [j.name for j in store.introspect.list().jobs] == ["warm"]
        assert driver.enqueue("refused").name == "refused"  # on a new connection, which writes
    assert sorted(j.name for j in store.introspect.list().jobs) == ["refused", "warm"]


def test_a_claim_meeting_a_read_only_connection_is_sent_again_on_a_new_one(store: Any, pg_url: str) -> None:
    """A claim is tried twice when its connection is lost (nothing written the first time): so here."""
    with PostgresDriver(pg_url, schema=store.schema, pool_max=1) as driver:
        driver.enqueue("warm")
        conn = driver._pool.getconn()
        conn.execute("SET default_transaction_read_only = on")
        driver._pool.putconn(conn)
        claimed = driver.claim(["default"], worker_id="w1", lease=30).claimed
        assert conn.closed
    assert [c.job.name for c in claimed] == ["warm"]
    assert store.introspect.stats().count("running") == 1


def test_an_async_driver_closes_a_read_only_connection_too(store: Any, pg_url: str) -> None:
    async def scenario() -> tuple[BaseException, bool, str]:
        async with AsyncPostgresDriver(pg_url, schema=store.schema, pool_max=1) as driver:
            await driver.enqueue("warm")
            async with driver._connection() as conn:
                await conn.execute("SET default_transaction_read_only = on")
            with pytest.raises(BackendUnavailable) as info:
                await driver.enqueue("refused")
            after = await driver.enqueue("after")
            return info.value, conn.closed, after.name

    error, closed, after = asyncio.run(scenario())
    _check_refusal(error)
    assert closed
    assert after == "after"
    assert sorted(j.name for j in store.introspect.list().jobs) == ["after", "warm"]


def test_a_transaction_meeting_a_read_only_server_closes_its_connection(store: Any, pg_url: str) -> None:
    """The transactional paths (``_transaction``) close it too: here the schedules' upsert."""
    with PostgresDriver(pg_url, schema=store.schema, pool_max=1) as driver:
        driver.enqueue("warm")
        with driver._connection() as conn:
            conn.execute("SET default_transaction_read_only = on")
        with pytest.raises(BackendUnavailable) as info, driver._transaction() as held:
            held.execute("UPDATE " + store.schema + ".jobs SET priority = 1")
        _check_refusal(info.value)
        assert held.closed
        assert driver.enqueue("after").name == "after"


@pytest.mark.parametrize(("conninfo", "env", "chosen"), [
    ("postgresql://app@db1:5432,db2:5432/app", {}, "read-write"),
    ("postgresql://app@db1,db2/app", {}, "read-write"),
    ("host=db1,db2 port=5432 dbname=app", {}, "read-write"),
    ("hostaddr=10.0.0.1,10.0.0.2 dbname=app", {}, "read-write"),
    ("dbname=app", {"PGHOST": "db1,db2"}, "read-write"),
    ("postgresql://app@db1:5432,db2:5432/app?target_session_attrs=any", {}, None),
    ("postgresql://app@db1:5432,db2:5432/app?target_session_attrs=prefer-standby", {}, None),
    ("postgresql://app@db1:5432,db2:5432/app", {"PGTARGETSESSIONATTRS": "any"}, None),
    ("postgresql://app@db1:5432/app", {}, None),
    ("dbname=app", {}, None),
])
def test_a_url_listing_several_hosts_connects_only_to_one_that_takes_writes(
    conninfo: str, env: dict[str, str], chosen: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unless the caller chose: their own target_session_attrs (URL or environment) is kept."""
    for name in ("PGHOST", "PGTARGETSESSIONATTRS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kwargs = _pool.connect_kwargs(conninfo, statement_timeout=None, call_timeout=None)
    assert kwargs.get("target_session_attrs") == chosen


@pytest.mark.parametrize("said", [
    'connection to server at "10.0.0.2", port 5432 failed: session is read-only',
    'connection to server at "10.0.0.2", port 5432 failed: server is in hot standby mode',
    'could not make a writable connection to server "10.0.0.2:5432"',  # libpq 13
])
def test_no_listed_host_taking_writes_is_named_as_such(said: str) -> None:
    """libpq's words when target_session_attrs=read-write finds only standbys (a failover in progress)."""
    from jobcore.drivers.postgres._errors import translate  # noqa: PLC0415

    failed = _pool.ConnectFailed.wrap(
        psycopg.OperationalError(f"connection failed: {said}"), "host=10.0.0.1,10.0.0.2 port=5432 user=app", {}
    )
    error = translate(failed)
    assert isinstance(error, BackendUnavailable)
    assert error.cause.startswith(
        "no host of PostgreSQL at host 10.0.0.1 port 5432 or host 10.0.0.2 port 5432 takes writes now"
    )
    assert "target_session_attrs=read-write" in error.fix


def test_a_multi_host_failure_reads_one_reason_per_host() -> None:
    """psycopg's multi-attempt text (the last failure, then every one, each with a hint) in one line."""
    from jobcore.drivers.postgres._errors import translate  # noqa: PLC0415

    said = (
        'connection failed: connection to server at "10.0.0.2", port 5432 failed: session is read-only\n'
        "Multiple connection attempts failed. All failures were:\n"
        "- host: 'db1', port: '5432', hostaddr: '10.0.0.1': connection failed: connection to server at "
        '"10.0.0.1", port 5432 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?\n"
        "- host: 'db2', port: '5432', hostaddr: '10.0.0.2': connection failed: connection to server at "
        '"10.0.0.2", port 5432 failed: session is read-only\n'
        "- host: '/run/pg', port: '5433': connection failed: connection to server on socket "
        '"/run/pg/.s.PGSQL.5433" failed: No such file or directory\n'
        "\tIs the server running locally and accepting connections on that socket?"
    )
    failed = _pool.ConnectFailed.wrap(psycopg.OperationalError(said), "host=db1,db2,/run/pg port=5432,5432,5433", {})
    error = translate(failed)
    assert isinstance(error, BackendUnavailable)
    assert error.cause.endswith(
        "takes writes now: host db1 port 5432: Connection refused; host db2 port 5432: session is read-only; "
        "host /run/pg port 5433: No such file or directory"
    ), error.cause

"""Database faults surface as coded errors (original on __cause__) and the pool recovers."""

from __future__ import annotations

import secrets
import threading
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, make_pool
from jobcore.parity.plugin import START
from psycopg import sql

from fixtures import postgres as fx
from jobcore.clock import ManualClock
from jobcore.errors import BackendTimeout, BackendUnavailable


def _own_driver(pg_url: str, pool: Any, **options: Any) -> tuple[PostgresDriver, str]:
    """A driver with its own pool, tagged by application_name so a test can kill its backends."""
    app = f"jc_fault_{secrets.token_hex(4)}"
    schema = fx.schema_name()
    sep = "&" if "?" in pg_url else "?"
    driver = PostgresDriver.from_url(
        f"{pg_url}{sep}application_name={app}&schema={schema}", clock=ManualClock(START), **options
    )
    driver.migrate()
    return driver, app


def _terminate(pool: Any, app: str) -> int:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchall()
    return len(rows)


def test_pool_recovers_after_every_backend_is_terminated(pg_url: str, pool: Any) -> None:
    """pg_terminate_backend on all the driver's connections: the next calls simply work."""
    driver, app = _own_driver(pg_url, pool, pool_min=3)
    try:
        job = driver.enqueue("a")
        driver.claim(["default"], worker_id="w", lease=30)  # use a connection or two
        assert _terminate(pool, app) >= 1
        assert driver.introspect.get(job.id) is not None
        assert driver.enqueue("b").state == "ready"
        assert len(driver.claim(["default"], worker_id="w", lease=30).claimed) == 1
    finally:
        driver.close()
        fx.drop_schema(pool, driver.schema)


def test_connection_lost_mid_statement_is_backend_unavailable(pg_url: str, pool: Any) -> None:
    """A backend killed while the driver waits on it raises JC_DB_UNAVAILABLE; the next call works."""
    driver, app = _own_driver(pg_url, pool)
    blocker = psycopg.connect(pg_url)
    try:
        driver.enqueue("warm")
        blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(driver.schema, "jobs")))
        caught: list[BaseException] = []

        def write() -> None:
            try:
                driver.enqueue("blocked")
            except BaseException as exc:
                caught.append(exc)

        thread = threading.Thread(target=write)
        thread.start()
        with pool.connection() as conn:  # wait until the driver's statement is waiting on the lock
            for _ in range(500):
                waiting = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                    (app,),
                ).fetchone()
                if waiting and waiting[0]:
                    break
                threading.Event().wait(0.01)
        _terminate(pool, app)
        thread.join(10)
        blocker.rollback()
        assert len(caught) == 1
        assert isinstance(caught[0], BackendUnavailable)
        assert caught[0].code == "JC_DB_UNAVAILABLE"
        assert isinstance(caught[0].__cause__, psycopg.OperationalError)
        assert driver.enqueue("after").state == "ready"
    finally:
        blocker.close()
        driver.close()
        fx.drop_schema(pool, driver.schema)


def test_statement_timeout_is_backend_timeout(pg_url: str, pool: Any) -> None:
    """A statement cancelled by statement_timeout raises JC_DB_TIMEOUT with QueryCanceled on __cause__."""
    driver, _ = _own_driver(pg_url, pool, statement_timeout=0.2)
    blocker = psycopg.connect(pg_url)
    try:
        driver.enqueue("warm")
        blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(driver.schema, "jobs")))
        with pytest.raises(BackendTimeout) as info:
            driver.enqueue("slow")
        assert info.value.code == "JC_DB_TIMEOUT"
        assert isinstance(info.value.__cause__, psycopg.errors.QueryCanceled)
        blocker.rollback()
        assert [j.name for j in driver.introspect.list().jobs] == ["warm"]  # nothing was written
    finally:
        blocker.close()
        driver.close()
        fx.drop_schema(pool, driver.schema)


def test_server_restart_and_outage() -> None:
    """Server down: JC_DB_UNAVAILABLE; server back on the same port: the next call works."""
    bindir = fx.find_binaries()
    if bindir is None:
        pytest.skip("needs local PostgreSQL binaries to restart a server of its own")
    server = fx.LocalServer(bindir).start()
    pool = make_pool(server.url, min_size=2, timeout=2.0)
    driver = PostgresDriver(pool, schema="jobcore", clock=ManualClock(START))
    try:
        driver.migrate()
        job = driver.enqueue("before")
        server.stop(remove=False)
        with pytest.raises(BackendUnavailable) as info:
            driver.introspect.get(job.id)
        assert info.value.__cause__ is not None
        server.start()
        assert driver.introspect.get(job.id) == job
        claimed = driver.claim(["default"], worker_id="w", lease=30).claimed
        assert [c.job.id for c in claimed] == [job.id]
        server.restart()
        assert driver.ack(claimed[0].token, {"ok": True}) is not None
    finally:
        driver.close()
        pool.close()
        server.stop()


class LoseFirstClaimReply(psycopg.Cursor[Any]):
    """Runs the statement, then loses the connection before the reply is read (once, for a claim)."""

    armed = False

    def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        result = super().execute(query, params, **kw)
        if LoseFirstClaimReply.armed and isinstance(query, bytes) and b"FOR UPDATE SKIP LOCKED" in query:
            LoseFirstClaimReply.armed = False
            self.connection.close()  # the claim committed (autocommit); its answer never arrives
            raise psycopg.OperationalError("simulated: server closed the connection unexpectedly")
        return result


def test_a_claim_retried_after_a_lost_reply_never_hands_a_job_to_two_live_tokens(pg_url: str, pool: Any) -> None:
    """The retry takes other jobs; the lost claim's job waits out its lease and its lost token stays dead."""
    schema = fx.schema_name()
    clock = ManualClock(START)
    lossy = make_pool(pg_url, min_size=1, max_size=2, cursor_factory=LoseFirstClaimReply)
    driver = PostgresDriver(lossy, schema=schema, clock=clock)
    try:
        driver.migrate()
        first, second = driver.enqueue("a"), driver.enqueue("b")
        LoseFirstClaimReply.armed = True
        retried = driver.claim(["default"], worker_id="w", lease=30).claimed
        assert [c.job.id for c in retried] == [second.id]  # the first claim took `first`, unseen
        lost = driver.introspect.get(first.id)
        assert lost is not None
        assert lost.state == "running"
        assert driver.claim(["default"], worker_id="w2", lease=30).claimed == ()  # never while its lease lives
        clock.advance(seconds=30)
        again = driver.claim(["default"], worker_id="w2", lease=30).claimed
        assert [c.job.id for c in again] == [first.id]
        assert again[0].token.claim_no == lost.claim_no + 1
        lost_token = lost.token
        assert lost_token is not None
        assert driver.ack(lost_token) is None  # the token nobody received can never settle anything
        assert driver.ack(again[0].token) is not None
    finally:
        driver.close()
        lossy.close()
        fx.drop_schema(pool, schema)

"""Recovery (F06) and the driver's own pool: after an outage or killed sessions the next call works.

The outage tests run a server of their own (``fixtures.postgres.LocalServer``), stopped
and started on the same port; they need the local binaries.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _pool
from jobcore.parity.plugin import START

from fixtures import postgres as fx
from jobcore.clock import ManualClock
from jobcore.errors import BackendUnavailable
from tests.postgres.proxy import silent, through


@pytest.fixture
def server() -> Iterator[fx.LocalServer]:
    """A server of this test's own, to stop and start."""
    bindir = fx.find_binaries()
    if bindir is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the recovery tests need local PostgreSQL binaries under CI=true")
        pytest.skip("needs local PostgreSQL binaries to stop and start a server of its own")
    own = fx.LocalServer(bindir).start()
    try:
        yield own
    finally:
        own.stop()


def _busy(driver: PostgresDriver, connections: int) -> None:
    """Open ``connections`` pooled connections at once (each held while the others open)."""
    held = [driver._pool.getconn() for _ in range(connections)]
    for conn in held:
        driver._pool.putconn(conn)


def test_the_first_call_after_an_outage_succeeds(server: fx.LocalServer) -> None:
    """Server stopped for a few seconds: calls fail fast as JC_DB_UNAVAILABLE meanwhile, and the
    first call once it accepts connections again succeeds (no reconnect backoff to sit out)."""
    driver = PostgresDriver.from_url(f"{server.url}?auto_migrate=true&pool_max=4", clock=ManualClock(START))
    try:
        job = driver.enqueue("before")
        _busy(driver, 4)  # every pooled connection will be dead after the restart
        server.stop(remove=False)
        down = time.monotonic()
        while time.monotonic() - down < 3.0:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable) as info:
                driver.claim(["default"], worker_id="w", lease=30)
            assert time.monotonic() - started < 1.0, "a call during the outage was not answered at once"
            assert info.value.__cause__ is not None
            time.sleep(0.2)
        server.start()  # answers once the server accepts connections
        back = time.monotonic()
        claimed = driver.claim(["default"], worker_id="w", lease=30).claimed
        assert [c.job.id for c in claimed] == [job.id]
        assert time.monotonic() - back < 1.0
        assert driver.ack(claimed[0].token, "after") is not None
    finally:
        driver.close()


def test_a_poller_claims_within_moments_of_the_server_coming_back(server: fx.LocalServer) -> None:
    """A loop claiming every 50 ms through a 3 s outage gets its first claim in well under 2 s
    of the server accepting connections (F06 asks 2 s of a whole worker)."""
    driver = PostgresDriver.from_url(f"{server.url}?auto_migrate=true&pool_max=2", clock=ManualClock(START))
    got: queue.Queue[float] = queue.Queue()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                if driver.claim(["default"], worker_id="poller", lease=30).claimed:
                    got.put(time.monotonic())
                    return
            except BackendUnavailable:
                pass
            stop.wait(0.05)

    try:
        driver.introspect.get("1")  # schema in place
        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        server.stop(remove=False)
        time.sleep(3.0)
        server.start()
        back = time.monotonic()
        driver.enqueue("after")
        assert got.get(timeout=5) - back < 1.0
    finally:
        stop.set()
        driver.close()


def test_a_listener_reconnects_after_a_restart(server: fx.LocalServer) -> None:
    """The wake-up subscription comes back by itself, and wakes its queues once for what it missed."""
    driver = PostgresDriver.from_url(f"{server.url}?auto_migrate=true", clock=ManualClock(START))
    heard: queue.Queue[str] = queue.Queue()
    sub = driver.subscribe(["mail"], heard.put)
    try:
        driver.enqueue("a", queue="mail")
        assert heard.get(timeout=5) == "mail"
        server.restart()
        assert heard.get(timeout=5) == "mail"  # the reconnect's wake-up
        driver.enqueue("b", queue="mail")
        assert heard.get(timeout=5) == "mail"
    finally:
        sub.close()
        driver.close()


def test_after_every_session_is_terminated_the_next_call_works(pg_url: str, pool: Any) -> None:
    """pg_terminate_backend on all of the driver's sessions: each next call works on its first try."""
    app = f"jc_recover_{secrets.token_hex(4)}"
    schema = fx.schema_name()
    driver = PostgresDriver.from_url(
        f"{pg_url}?application_name={app}&schema={schema}&pool_max=4", clock=ManualClock(START)
    )
    try:
        driver.migrate()
        job = driver.enqueue("a")
        _busy(driver, 4)
        for _ in range(2):
            with pool.connection() as conn:
                killed = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,)
                ).fetchall()
            assert len(killed) == 4
            time.sleep(0.1)  # the server's goodbye reaches the idle sockets
            assert driver.introspect.get(job.id) is not None
            assert driver.enqueue("b").state == "ready"
            _busy(driver, 4)
    finally:
        driver.close()
        fx.drop_schema(pool, schema)


def test_connecting_through_a_proxy_that_never_answers_is_bounded_by_connect_timeout(pg_url: str) -> None:
    """A server that accepts TCP and says nothing: the call answers JC_DB_UNAVAILABLE after
    connect_timeout (libpq's, at least 2 s), naming it, and is not retried."""
    with silent() as silent_proxy:
        driver = PostgresDriver.from_url(through(pg_url, silent_proxy, connect_timeout=2), clock=ManualClock(START))
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable) as info:
                driver.introspect.get("1")
            took = time.monotonic() - started
            assert 1.9 < took < 3.0, took
            assert "connect_timeout" in info.value.cause
            assert isinstance(info.value.__cause__, psycopg.errors.ConnectionTimeout)
            assert silent_proxy.accepted == 1
        finally:
            driver.close()


def test_the_pool_opens_no_more_than_pool_max_connections(pg_url: str, pool: Any) -> None:
    """Eight threads claiming at once through a pool of two: two sessions at most, every call answered."""
    app = f"jc_budget_{secrets.token_hex(4)}"
    schema = fx.schema_name()
    driver = PostgresDriver.from_url(
        f"{pg_url}?application_name={app}&schema={schema}&pool_max=2", clock=ManualClock(START)
    )
    seen: list[int] = []
    errors: list[BaseException] = []
    try:
        driver.migrate()
        driver.enqueue_many([{"name": "x"}] * 200)

        def work() -> None:
            try:
                for _ in range(25):
                    for claimed in driver.claim(["default"], worker_id="w", lease=30).claimed:
                        driver.ack(claimed.token)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            with pool.connection() as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,))
                seen.append(int(row.fetchone()[0]))  # type: ignore[index]
            time.sleep(0.01)
        assert errors == []
        assert max(seen) <= 2
        assert driver.introspect.stats().counts["default"].get("done") == 200  # type: ignore[call-overload]
    finally:
        driver.close()
        fx.drop_schema(pool, schema)


def test_a_full_pool_answers_unavailable_after_its_wait(pg_url: str) -> None:
    """Every connection in use for longer than the pool waits (call_timeout): JC_DB_UNAVAILABLE, then fine."""
    pool = _pool.Pool(pg_url, kwargs=_pool.connect_kwargs(pg_url, statement_timeout=None, call_timeout=None),
                      min_size=0, max_size=1, timeout=0.3)
    try:
        held = pool.getconn()
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            pool.getconn()
        assert 0.25 < time.monotonic() - started < 1.0
        pool.putconn(held)
        again = pool.getconn()
        assert again is held  # the idle one, not a new one
        pool.putconn(again)
    finally:
        pool.close()
    assert held.closed


def test_idle_connections_beyond_pool_min_are_closed_after_max_idle(pg_url: str) -> None:
    """Connections idle longer than max_idle are closed when the pool is next used, down to min_size."""
    pool = _pool.Pool(pg_url, kwargs=_pool.connect_kwargs(pg_url, statement_timeout=None, call_timeout=None),
                      min_size=1, max_size=4, max_idle=0.05)
    try:
        conns = [pool.getconn() for _ in range(3)]
        for conn in conns:
            pool.putconn(conn)
        time.sleep(0.1)
        fresh = pool.getconn()
        pool.putconn(fresh)  # trims what idled too long
        assert sum(not c.closed for c in conns) == 1
        assert repr(pool) == "Pool(max_size=4, open=1, idle=1)"
    finally:
        pool.close()

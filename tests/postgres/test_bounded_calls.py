"""Bounded calls (F07): no store call blocks forever, whatever the network does.

A stalled connection is made for real: the driver talks to the server through a TCP
proxy (``tests/postgres/proxy.py``) that stops forwarding, so the server never sees the
statement and only the client's own bound can end the wait.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _notify, _pool, make_pool
from jobcore.drivers.postgres._errors import translate
from psycopg import sql

from jobcore.clock import StoreClock
from jobcore.errors import BackendTimeout, BackendUnavailable, OptionInvalid, UrlInvalid
from tests.postgres.proxy import Proxy, proxy_to, through

CALL_TIMEOUT = 1.0


@contextlib.contextmanager
def _within(low: float, high: float) -> Iterator[None]:
    started = time.monotonic()
    yield
    took = time.monotonic() - started
    assert low <= took <= high, f"took {took:.2f}s, expected {low}..{high}s"


def test_a_claim_on_a_stalled_connection_answers_jc_db_timeout_within_call_timeout(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]],
) -> None:
    """The proxy stops forwarding: the claim answers JC_DB_TIMEOUT after call_timeout, naming the
    bound, the connection is discarded, and once the path is back the next calls work."""
    driver, proxy = proxied()
    job = driver.enqueue("stuck")
    proxy.freeze()
    with _within(CALL_TIMEOUT - 0.1, CALL_TIMEOUT + 1.0), pytest.raises(BackendTimeout) as info:
        driver.claim(["default"], worker_id="w", lease=30)
    error = info.value
    assert error.code == "JC_DB_TIMEOUT"
    assert "call_timeout=1s" in error.cause
    assert "discarded" in error.cause
    assert "call_timeout" in error.fix
    assert "a retried enqueue without a key can store its job twice" in error.fix  # it may have landed
    assert isinstance(error.__cause__, _pool.CallTimeout)
    assert isinstance(error.__cause__.__cause__, psycopg.errors._WaitTimeout)
    proxy.thaw()
    # The proxy held the claim's bytes and delivers them now: the job may be taken by a claim
    # whose answer nobody reads (its lease lapses; claim numbers fence its token).
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.state in ("ready", "running")
    fresh = driver.enqueue("fresh", queue="after")
    assert [c.job.id for c in driver.claim(["after"], worker_id="w", lease=30).claimed] == [fresh.id]


_CALLS: dict[str, Callable[[PostgresDriver, Any], Any]] = {
    "enqueue": lambda d, t: d.enqueue("b"),
    "enqueue_many": lambda d, t: d.enqueue_many([{"name": "c"}] * 3),
    "start": lambda d, t: d.start([t]),
    "heartbeat": lambda d, t: d.heartbeat(t, 30),
    "heartbeat_many": lambda d, t: d.heartbeat_many([t, t], 30),
    "ack": lambda d, t: d.ack(t),
    "nack": lambda d, t: d.nack(t, "x"),
    "get": lambda d, t: d.introspect.get("1"),
    "stats": lambda d, t: d.introspect.stats(),
    "rescue": lambda d, t: d.introspect.rescue(),
    "acquire": lambda d, t: d.leases.acquire("k", 1, "h", 30),  # a transaction: BEGIN is bounded too
    "schedules": lambda d, t: d.schedules.list(),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_every_call_on_a_stalled_connection_is_bounded(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]], call: str,
) -> None:
    """Writes, reads, settles, starts and transactions alike: each answers JC_DB_TIMEOUT within its bound."""
    driver, proxy = proxied(call_timeout=300)
    driver.enqueue("a")
    token = driver.claim(["default"], worker_id="w", lease=30, start=False).claimed[0].token
    proxy.freeze()
    with _within(0.2, 1.3), pytest.raises(BackendTimeout) as info:
        _CALLS[call](driver, token)
    assert info.value.code == "JC_DB_TIMEOUT"


def test_the_store_clock_reading_is_bounded_more_tightly_than_a_call(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]],
) -> None:
    """driver.clock (a StoreClock) asks the store for its time: on a stalled path that read gives
    up after CLOCK_READ_TIMEOUT, not a whole call_timeout, and keeps nothing it did not read."""
    driver, proxy = proxied(call_timeout=10_000)
    store = PostgresDriver.from_url(driver.url, call_timeout=10)  # no clock injected: a StoreClock
    try:
        assert isinstance(store.clock, StoreClock)
        store.introspect.get("1")  # connected; the clock has no reading yet
        proxy.freeze()
        with _within(_pool.CLOCK_READ_TIMEOUT - 0.1, _pool.CLOCK_READ_TIMEOUT + 1.0), pytest.raises(BackendTimeout):
            store.clock.now()
        proxy.thaw()
        assert store.clock.now().tzinfo is not None
    finally:
        store.close()


def test_the_server_cancels_a_slow_statement_first_and_keeps_the_connection(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]], pg_url: str,
) -> None:
    """The server's statement_timeout defaults to 90% of call_timeout: a statement waiting on a
    lock is cancelled there (QueryCanceled, JC_DB_TIMEOUT) and the connection stays usable.

    The cause shows which bound ended the wait: the server's cancel, not the client's 3 s
    (which would answer ``CallTimeout``). At 3 s the server's turn comes 300 ms first: at 1 s,
    100 ms was once not enough on a loaded CI machine for the server's answer to arrive."""
    driver, _ = proxied(call_timeout=3000)
    driver.enqueue("warm")
    with psycopg.connect(pg_url) as blocker:
        blocker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(driver.schema, "jobs")))
        with _within(2.4, 10.0), pytest.raises(BackendTimeout) as info:
            driver.enqueue("slow")
        assert isinstance(info.value.__cause__, psycopg.errors.QueryCanceled), repr(info.value.__cause__)
        blocker.rollback()
    assert [j.name for j in driver.introspect.list().jobs] == ["warm"]


def test_migrate_is_not_cut_short_by_call_timeout(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]], pg_url: str,
) -> None:
    """A migration that waits longer than call_timeout (here on the migration lock) still completes."""
    driver, _ = proxied(call_timeout=200)
    other = f"{driver.schema}_m"
    proxy = proxy_to(pg_url)
    late = PostgresDriver.from_url(through(pg_url, proxy, schema=other, call_timeout=200))
    try:
        with psycopg.connect(pg_url) as holder:
            holder.execute(
                "SELECT pg_advisory_xact_lock(hashtext('jobcore.migrate'), hashtext(%s::text))", (other,)
            )
            done = threading.Event()
            failed: list[BaseException] = []

            def migrate() -> None:
                try:
                    late.migrate()
                except BaseException as exc:
                    failed.append(exc)
                done.set()

            threading.Thread(target=migrate, daemon=True).start()
            assert not done.wait(1.0), f"migrate did not wait for the lock: {failed}"
            holder.rollback()
        assert done.wait(10)
        assert failed == []
        assert late.enqueue("after").state == "ready"
    finally:
        late.close()
        proxy.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other)))


def test_a_listener_on_a_stalled_connection_notices_and_reconnects(
    proxied: Callable[..., tuple[PostgresDriver, Proxy]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LISTEN connection gone silent is probed after PROBE_AFTER, its probe bounded by
    call_timeout; the listener reconnects once the path is back and wakes every queue
    (wake-ups sent meanwhile were lost)."""
    monkeypatch.setattr(_notify, "PROBE_AFTER", 0.3)
    driver, proxy = proxied(call_timeout=300, connect_timeout=2)
    heard: queue.Queue[str] = queue.Queue()
    sub = driver.subscribe(["mail"], heard.put)
    try:
        driver.enqueue("hello", queue="mail")
        assert heard.get(timeout=5) == "mail"
        accepted = proxy.accepted
        proxy.freeze()
        time.sleep(1.0)  # silence (0.3 s), the probe's bound (0.3 s), then reconnect attempts
        proxy.thaw()
        assert heard.get(timeout=5) == "mail"  # the reconnect's wake-up: nothing was enqueued
        assert proxy.accepted > accepted
        driver.enqueue("again", queue="mail")
        assert heard.get(timeout=5) == "mail"
    finally:
        with _within(0, 3):
            sub.close()


def test_call_timeout_is_a_keyword_and_a_url_option(pg_url: str) -> None:
    """call_timeout: seconds as a keyword, milliseconds in the URL; None turns the bound off;
    nonsense is refused before anything connects."""
    for value in (0, -1, float("nan"), float("inf"), True, "10"):
        with pytest.raises(OptionInvalid) as info:
            PostgresDriver(pg_url, call_timeout=value)
        assert info.value.code == "JC_OPTION_INVALID"
    with pytest.raises(UrlInvalid):
        PostgresDriver.from_url(f"{pg_url}?call_timeout=soon")
    driver = PostgresDriver.from_url(f"{pg_url}?call_timeout=2500")
    unbounded = PostgresDriver(pg_url, call_timeout=None)
    try:
        assert driver.call_timeout == 2.5
        assert unbounded.call_timeout is None
    finally:
        driver.close()
        unbounded.close()


def test_make_pool_builds_bounded_connections(pg_url: str) -> None:
    """A caller's pool from make_pool bounds its statements the same way (and the server's
    statement_timeout follows call_timeout unless given)."""
    bounded = make_pool(pg_url, min_size=1, max_size=1, call_timeout=4)
    explicit = make_pool(pg_url, min_size=1, max_size=1, call_timeout=4, statement_timeout=30)
    try:
        with bounded.connection() as conn:
            assert isinstance(conn, _pool.BoundedConnection)
            assert conn.call_timeout == 4
            assert conn.execute("SHOW statement_timeout").fetchone() == ("3600ms",)
        with explicit.connection() as conn:
            assert conn.execute("SHOW statement_timeout").fetchone() == ("30s",)
    finally:
        bounded.close()
        explicit.close()


@pytest.mark.parametrize(
    "message",
    ["connection failed: FATAL:  the database system is starting up",
     "connection failed: FATAL:  the database system is shutting down"],
)
def test_a_server_starting_or_stopping_is_backend_unavailable(message: str) -> None:
    """Connections refused while the server starts or stops (57P03) are JC_DB_UNAVAILABLE."""
    for exc in (psycopg.OperationalError(message), psycopg.errors.CannotConnectNow(message)):
        error = translate(exc)
        assert isinstance(error, BackendUnavailable)
        assert "starting up or shutting down" in error.cause

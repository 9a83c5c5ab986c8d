"""The driver through PgBouncer in transaction pooling mode, default settings (Debian's pgbouncer).

The whole parity suite also runs through it (driver ``postgres-pgbouncer``); these are the
pooler-specific promises: no startup option it refuses, no session state it would lose,
no server-side prepared statement, LISTEN only over a direct connection, and the refusals.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timezone
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, make_pool
from jobcore.drivers.postgres._pool import SLOT_HOLD_CAP

from fixtures import pgbouncer as pb
from fixtures import postgres as fx
from jobcore import Registry, Worker
from jobcore.errors import BackendUnavailable, ConfigurationError, NotSupported, OptionInvalid, UrlInvalid


@pytest.fixture
def bouncer_url(request: pytest.FixtureRequest, pg_url: str) -> str:
    return pb.bouncer_url(request.config)


@pytest.fixture
def through(bouncer_url: str, pool: Any) -> Iterator[Callable[..., PostgresDriver]]:
    """``through(**options)``: a driver built from the pooler's URL in a fresh schema (migrated through it)."""
    made: list[tuple[PostgresDriver, str]] = []

    def build(**options: Any) -> PostgresDriver:
        schema = fx.schema_name()
        driver = PostgresDriver(bouncer_url, schema=schema, **options)
        made.append((driver, schema))
        driver.migrate()
        return driver

    yield build
    for driver, schema in made:
        driver.close()
        fx.drop_schema(pool, schema)


def test_pgbouncer_refuses_startup_options_and_the_driver_sends_none(bouncer_url: str, through: Any) -> None:
    """PgBouncer's defaults close a connection that sends ``options``; the driver connects and works."""
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"):
        psycopg.connect(bouncer_url, options="-c TimeZone=UTC", connect_timeout=5).close()
    driver = through()
    job = driver.enqueue("hello", {"n": 1})
    assert driver.introspect.get(job.id) == job


def test_behind_the_pooler_nothing_is_set_or_prepared(through: Any) -> None:
    """The connection is found pooled: the server's time zone stays the pooler's, and psycopg prepares nothing."""
    driver = through()
    assert driver._behind_pooler() is True
    with driver._connection() as conn:
        assert conn.prepare_threshold is None
        assert conn.execute("SHOW TimeZone").fetchone() == (pb.SERVER_TIMEZONE,)
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)


def test_many_threads_many_calls_through_the_pooler_raise_nothing(through: Any) -> None:
    """The failure of prepared statements behind a transaction pooler: after 5 executions psycopg
    would prepare, and the next transaction lands on another server connection. 8 threads x 40
    enqueue/claim/ack rounds: every job is done once, no error."""
    driver = through(pool_max=4)
    errors: list[BaseException] = []
    done: list[str] = []

    def run(n: int) -> None:
        try:
            for i in range(40):
                driver.enqueue("x", {"t": n, "i": i}, queue=f"q{n}")
                got = driver.claim([f"q{n}"], worker_id=f"w{n}", limit=1, lease=30).claimed
                for claimed in got:
                    assert driver.ack(claimed.token) is not None
                    done.append(claimed.job.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert len(done) == len(set(done)) == 320
    assert driver.introspect.stats().count("done") == 320


def test_times_come_back_in_utc_whatever_the_servers_zone(through: Any) -> None:
    """The pooler's server connections run in America/Sao_Paulo; every time the driver answers is UTC."""
    driver = through()
    job = driver.enqueue("x", delay=60)
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.run_at.tzinfo == timezone.utc
    assert stored.run_at == job.run_at
    assert stored.created_at == job.created_at
    now = driver.clock.now()
    assert now.tzinfo == timezone.utc
    assert abs((now - job.created_at).total_seconds()) < 60


def test_without_a_listen_url_there_is_no_notify_and_the_worker_polls(through: Any) -> None:
    """LISTEN cannot go through the pooler: no ``notify``, subscribe refuses coded, a worker still drains by polling."""
    driver = through()
    assert "notify" not in driver.capabilities
    with pytest.raises(NotSupported, match="listen_url"):
        driver.subscribe(["q"], print)
    registry = Registry()
    done: list[int] = []
    registry.job(name="add", queue="q")(lambda payload: done.append(payload["n"]))
    for n in range(10):
        driver.enqueue("add", {"n": n}, queue="q")
    worker = Worker(["q"], driver=driver, registry=registry, concurrency=2, poll_interval=0.05, scheduler=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        pause = threading.Event()
        for _ in range(400):
            if driver.introspect.stats().count("done") == 10:
                break
            pause.wait(0.05)
    finally:
        worker.stop()
        thread.join(30)
    assert sorted(done) == list(range(10))


def test_wake_ups_go_over_the_direct_listen_url(through: Any, pg_url: str) -> None:
    """With ``listen_url`` (the server itself) a write through the pooler wakes the subscriber."""
    driver = through(listen_url=pg_url)
    assert "notify" in driver.capabilities
    heard: queue.Queue[str] = queue.Queue()
    sub = driver.subscribe(["q"], heard.put)
    try:
        driver.enqueue("x", queue="q")
        assert heard.get(timeout=5) == "q"
    finally:
        sub.close()
    assert dict(parse_qsl(urlsplit(driver.url).query))["listen_url"] == pg_url  # another process wakes the same way


def test_a_listen_url_that_is_itself_pooled_is_refused(through: Any, bouncer_url: str) -> None:
    """LISTEN through the pooler would be heard by nobody: subscribe refuses, coded, naming the fix."""
    driver = through(listen_url=bouncer_url)
    with pytest.raises(OptionInvalid, match="transaction pooler"):
        driver.subscribe(["q"], print)


def test_a_direct_server_still_gets_utc_generic_plans_and_its_statement_timeout(pg_url: str) -> None:
    """Direct (detected): the session settings land with one statement after connecting, the caller's own win."""
    for url, timeout in ((pg_url, "9s"), (f"{pg_url}?options=-c%20statement_timeout%3D1234", "1234ms")):
        pool = make_pool(url, min_size=0, max_size=1)
        try:
            with pool.connection() as conn:
                assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
                assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
                assert conn.execute("SHOW statement_timeout").fetchone() == (timeout,)
                assert conn.prepare_threshold == 5
        finally:
            pool.close()


def test_pooler_transaction_on_a_direct_server_sets_nothing(pg_url: str) -> None:
    """``pooler=transaction`` is taken at its word: no session setting, no prepared statement."""
    driver = PostgresDriver.from_url(f"{pg_url}?pooler=transaction")
    try:
        assert "notify" not in driver.capabilities
        with driver._connection() as conn:
            assert conn.prepare_threshold is None
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
        assert "pooler=transaction" in driver.url
    finally:
        driver.close()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"listen_url": "mongodb://localhost/x"}, UrlInvalid, "not a PostgreSQL URL"),
        ({"listen_url": "localhost:5432"}, UrlInvalid, "not a PostgreSQL URL"),
        ({"listen_url": 5432}, UrlInvalid, "must be a postgresql:// URL"),
        ({"pooler": "pgbouncer"}, OptionInvalid, "pooler="),
        ({"pooler": None}, OptionInvalid, "pooler="),
        ({"pool_max": 0}, OptionInvalid, "pool_max=0 is out of range"),
        ({"pool_max": -3}, OptionInvalid, "pool_max=-3 is out of range"),
        ({"pool_max": "4"}, OptionInvalid, "pool_max must be an int"),
        ({"pool_max": 2.5}, OptionInvalid, "pool_max must be an int"),
        ({"pool_max": True}, OptionInvalid, "pool_max must be an int"),
        ({"pool_min": -1}, OptionInvalid, "pool_min=-1 is out of range"),
    ],
)
def test_bad_pool_and_pooler_options_are_coded_refusals(pg_url: str, options: dict[str, Any], error: type,
                                                        match: str) -> None:
    """A pool size that is not a positive int, a pooler mode not known, a listen URL that is not PostgreSQL."""
    with pytest.raises(error, match=match) as caught:
        PostgresDriver(pg_url, **options)
    assert caught.value.fix


@pytest.mark.parametrize(
    ("query", "match"),
    [("pool_max=abc", "pool_max"), ("pool_max=0", "pool_max=0"), ("listen_url=http%3A%2F%2Fx", "not a PostgreSQL URL"),
     ("pooler=yes", "pooler=")],
)
def test_bad_pool_options_in_the_url_are_coded_refusals(pg_url: str, query: str, match: str) -> None:
    with pytest.raises((UrlInvalid, OptionInvalid), match=match):
        PostgresDriver.from_url(f"{pg_url}?{query}")


def test_make_pool_refuses_bad_sizes_and_modes(pg_url: str) -> None:
    for options in ({"max_size": 0}, {"max_size": "10"}, {"min_size": -1}, {"pooler": "session"}):
        with pytest.raises(OptionInvalid):
            make_pool(pg_url, **options)


STATEMENT_MODE_FIX = "set pool_mode = transaction (or session) for this database in pgbouncer.ini"


def test_statement_pooling_refuses_transactions_and_the_driver_says_so(pg_url: str, pool: Any) -> None:
    """PgBouncer in statement mode: single statements work; what runs in a transaction (a dependent
    enqueue, a fleet lease) is refused as JC_CONFIGURATION naming pool_mode, never as a lost
    connection to retry, and writes nothing."""
    with _own_bouncer(pg_url, pool, pool_mode="statement") as (bouncer, schema):
        driver = PostgresDriver(bouncer.url, schema=schema)
        try:
            parent = driver.enqueue("parent")
            assert [c.job.id for c in driver.claim(["default"], worker_id="w", lease=30).claimed] == [parent.id]
            for call in (lambda: driver.enqueue("child", depends_on=[parent.id]),
                         lambda: driver.leases.acquire("api", 1, "h1", 30)):
                with pytest.raises(ConfigurationError) as refused:
                    call()
                assert refused.value.code == "JC_CONFIGURATION"
                assert "PgBouncer pools this database in statement mode" in refused.value.cause
                assert refused.value.fix == STATEMENT_MODE_FIX
            assert PostgresDriver(pool, schema=schema).introspect.stats().count("ready") == 0  # no child
            assert PostgresDriver(pool, schema=schema).leases.holders("api") == []
        finally:
            driver.close()


def test_a_pooler_at_max_client_conn_is_unavailable_for_want_of_a_slot(pg_url: str, pool: Any) -> None:
    """PgBouncer refusing a client beyond its ``max_client_conn`` is answered as no slot free
    (retry once some close), not as "cannot be reached ... check that PostgreSQL is running"."""
    with _own_bouncer(pg_url, pool, max_client_conn="2") as (bouncer, schema):
        others = [psycopg.connect(bouncer.url) for _ in range(2)]
        driver = PostgresDriver(bouncer.url, schema=schema)
        try:
            with pytest.raises(BackendUnavailable) as refused:
                driver.enqueue("one_too_many")
            assert "no connection slot free" in refused.value.cause
            assert "no more connections allowed (max_client_conn)" in refused.value.cause
            assert "max_client_conn" in refused.value.fix
            others.pop().close()
            time.sleep(SLOT_HOLD_CAP)  # the pool's hold on asking again after a slot refusal
            assert driver.enqueue("a_slot_free").name == "a_slot_free"
        finally:
            driver.close()
            for conn in others:
                conn.close()


@contextlib.contextmanager
def _own_bouncer(pg_url: str, pool: Any, **settings: str) -> Iterator[tuple[pb.Bouncer, str]]:
    """A PgBouncer of the test's own in front of the session's server (``settings`` in its
    ``[pgbouncer]`` section) and a schema migrated for it; both gone afterwards."""
    binary = pb.find_pgbouncer()
    if binary is None:
        pb._unavailable("the pgbouncer binary is not installed")
    schema = fx.schema_name()
    PostgresDriver(pool, schema=schema).migrate()
    bouncer = pb.Bouncer(binary, pg_url, settings=settings).start()  # type: ignore[arg-type]
    try:
        yield bouncer, schema
    finally:
        bouncer.stop()
        fx.drop_schema(pool, schema)

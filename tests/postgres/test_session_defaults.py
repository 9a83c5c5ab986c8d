"""A server, database or role whose session defaults are not the ones jobcore's statements read.

psycopg reads a ``timestamptz`` as text only in ``DateStyle`` ISO and an ``interval`` only in
``IntervalStyle`` postgres. Before the driver set both (and checked them), a role defaulting
to ``DateStyle = 'SQL, DMY'`` made every claim fail *after* the server took its jobs: each
job's lease lapsed unrun, and on its last attempt it was buried as if its worker had crashed.
Every statement is written for read committed, too: a role defaulting to serializable made
racing claims, acks and keyed enqueues fail, reported as a lost connection.

Here a role defaults to other settings the way a DBA sets one up (``ALTER ROLE ... SET``):
the driver's own connections set theirs and work; a session the driver cannot set (a
caller's pool or connection, one behind a transaction pooler, a style in the caller's own
``options``) is refused with ``JC_CONFIGURATION`` before anything is sent, and no job loses
an attempt to it.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from fixtures import pgbouncer as pb
from fixtures import postgres as fx
from jobcore import Registry, Worker
from jobcore.errors import BackendFailure, BackendUnavailable, ConfigurationError
from jobcore.records import JobState
from tests.worker_run import run_until_done

OTHER_STYLES = {
    "DateStyle": "SQL, DMY", "IntervalStyle": "sql_standard", "TimeZone": "Asia/Kolkata", "client_encoding": "LATIN1",
    "extra_float_digits": "-15",
}
"""What the role defaults to in most tests: every style the driver reads or writes, changed."""

TEXT = {"s": "é \u2028 Ā 😀", "f": 0.1}
"""A payload beyond Latin-1."""

LEASE = timedelta(seconds=30)


@pytest.fixture
def role_with(pool: Any, pg_url: str) -> Iterator[Callable[..., str]]:
    """``role_with(**settings)``: a new login role whose sessions default to ``settings``; its URL."""
    made: list[str] = []

    def build(**settings: str) -> str:
        role = f"styled_{secrets.token_hex(4)}"
        with pool.connection() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD 'styled'").format(sql.Identifier(role)))
            made.append(role)
            for name, value in settings.items():
                conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(
                    sql.Identifier(role), sql.Identifier(name.lower()), sql.Literal(value),
                ))
        parts = urlsplit(pg_url)
        return urlunsplit(parts._replace(netloc=f"{role}:styled@{parts.hostname}:{parts.port or 5432}"))

    yield build
    with pool.connection() as conn:
        for role in made:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def schema(pool: Any) -> Iterator[str]:
    """A schema migrated through the session's own (ISO) pool, dropped afterwards; its name."""
    name = fx.schema_name()
    PostgresDriver(pool, schema=name).migrate()
    yield name
    fx.drop_schema(pool, name)


def _untouched(pool: Any, schema: str, job_id: str) -> None:
    """The job is still waiting to run, no attempt spent, no worker on it: nothing was claimed."""
    job = PostgresDriver(pool, schema=schema).introspect.get(job_id)
    assert job is not None
    assert (job.state, job.attempt, job.worker_id, job.errors) == (JobState.READY, 0, None, ())


def _progress_round_trips(driver: PostgresDriver) -> None:
    """A progress value is stored as given, whatever the session's ``extra_float_digits``."""
    job = driver.enqueue("progress", max_attempts=1)
    token = driver.claim(["default"], worker_id="w", lease=LEASE).claimed[0].token
    for value in (0.25, 1 / 3, 1e-07, 1.0):
        assert driver.progress(token, value, "é Ā") is True
        stored = driver.introspect.get(job.id)
        assert stored is not None
        assert stored.progress is not None
        assert (stored.progress.value, stored.progress.message) == (value, "é Ā")


def _recorded(work: Callable[[int], None], i: int, errors: list[BaseException]) -> None:
    try:
        work(i)
    except BaseException as exc:
        errors.append(exc)


def _refusal(error: ConfigurationError, setting: str, value: str) -> None:
    assert error.code == "JC_CONFIGURATION"
    assert f"{setting} is {value!r}" in error.cause
    assert "nothing was sent" in error.cause
    assert re.search(rf'\(ALTER ROLE "[a-z0-9_]+" SET {setting} = ', error.fix), error.fix
    if setting == "client_encoding":
        assert "connect with client_encoding=UTF8" in error.fix


def test_the_drivers_own_connections_set_their_styles_and_a_worker_drains(role_with: Any) -> None:
    """A role defaulting to other date, interval and zone styles: every job runs once, times read right."""
    url = role_with(**OTHER_STYLES)
    driver = PostgresDriver(url, schema=fx.schema_name(), auto_migrate=True)
    try:
        with driver._connection() as conn:  # what the driver's session runs with
            shown = [conn.execute(f"SHOW {name}").fetchone() for name in ("DateStyle", "IntervalStyle", "TimeZone",
                                                                          "client_encoding")]
        assert shown == [("ISO, DMY",), ("postgres",), ("UTC",), ("UTF8",)]
        before = datetime.now(timezone.utc)
        jobs = [driver.enqueue("count", {"n": n, **TEXT}, max_attempts=1) for n in range(12)]
        assert all(abs(job.created_at - before) < timedelta(minutes=1) for job in jobs)
        stats = driver.introspect.stats()  # reads the oldest due job's age: an interval
        assert stats.count("ready") == 12

        ran: list[int] = []
        registry = Registry()
        registry.job(name="count")(lambda payload: ran.append(payload["n"]) if payload["s"] == TEXT["s"] else None)
        worker = Worker(["default"], driver=driver, registry=registry, concurrency=2, poll_interval=0.05,
                        scheduler=False)
        run_until_done(worker, driver, 12)
        assert sorted(ran) == list(range(12))
        assert [driver.introspect.get(job.id).state for job in jobs] == [JobState.DONE] * 12  # type: ignore[union-attr]
        _progress_round_trips(driver)
    finally:
        driver.close()


@pytest.mark.parametrize(("setting", "value", "shown"), [
    ("DateStyle", "SQL, DMY", "SQL, DMY"),
    ("DateStyle", "German", "German, DMY"),
    ("IntervalStyle", "sql_standard", "sql_standard"),
    ("client_encoding", "LATIN1", "LATIN1"),
])
def test_a_callers_pool_in_another_style_is_refused_and_no_job_loses_an_attempt(
    role_with: Any, pool: Any, schema: str, setting: str, value: str, shown: str,
) -> None:
    """The caller's own pool keeps its session as it is: every call is refused, coded, before it is sent."""
    url = role_with(**{setting: value})
    job = PostgresDriver(pool, schema=schema).enqueue("x", max_attempts=2)
    theirs = ConnectionPool(url, kwargs={"autocommit": True}, min_size=1, max_size=2, open=True)
    try:
        driver = PostgresDriver(theirs, schema=schema)
        for _ in range(3):  # the attempts a refused claim would have spent
            with pytest.raises(ConfigurationError) as refused:
                driver.claim(["default"], worker_id="w", lease=LEASE)
            _refusal(refused.value, setting, shown)
        with pytest.raises(ConfigurationError):
            driver.enqueue("y", TEXT)
        with pytest.raises(ConfigurationError):
            driver.introspect.stats()
        _untouched(pool, schema, job.id)
        assert PostgresDriver(pool, schema=schema).introspect.stats().count("ready") == 1  # "y" was not written
    finally:
        theirs.close()


def test_the_refusals_fix_mends_it(role_with: Any, pool: Any, schema: str) -> None:
    """Done as the fix says (``ALTER ROLE ... SET DateStyle = 'ISO, MDY'``), the same caller's pool claims."""
    url = role_with(DateStyle="SQL, DMY")
    job = PostgresDriver(pool, schema=schema).enqueue("x")
    theirs = ConnectionPool(url, kwargs={"autocommit": True}, min_size=0, max_size=1, open=True)
    try:
        with pytest.raises(ConfigurationError) as refused:
            PostgresDriver(theirs, schema=schema).claim(["default"], worker_id="w", lease=LEASE)
        role = conninfo_to_dict(url)["user"]
        fix = refused.value.fix.split(";")[0].split("(", 1)[1]
        assert fix == f"ALTER ROLE \"{role}\" SET DateStyle = 'ISO, MDY'"  # as the refusal says, role and all
        with pool.connection() as conn:
            conn.execute(fix.encode())
        theirs.close()  # its idle connection keeps the style it was opened with
        theirs = ConnectionPool(url, kwargs={"autocommit": True}, min_size=0, max_size=1, open=True)
        claimed = PostgresDriver(theirs, schema=schema).claim(["default"], worker_id="w", lease=LEASE).claimed
        assert [(c.job.id, c.job.attempt) for c in claimed] == [(job.id, 1)]
    finally:
        theirs.close()


def test_a_callers_transaction_in_another_style_is_refused_and_stays_theirs(role_with: Any, pool: Any,
                                                                            schema: str) -> None:
    """An enqueue joining the caller's transaction is refused before its INSERT: their transaction goes on."""
    url = role_with(**OTHER_STYLES)
    driver = PostgresDriver(pool, schema=schema)
    with psycopg.connect(url) as conn:
        conn.execute("SELECT 1")  # their own work, in their transaction
        with pytest.raises(ConfigurationError) as refused:
            driver.enqueue("x", connection=conn)
        _refusal(refused.value, "DateStyle", "SQL, DMY")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # not aborted
        assert conn.execute("SELECT 2").fetchone() == (2,)
    assert driver.introspect.stats().count("ready") == 0


UNSET_BEHIND_A_POOLER = pytest.mark.parametrize(("settings", "setting", "shown"), [
    (OTHER_STYLES, "DateStyle", "SQL, DMY"),
    ({"default_transaction_isolation": "repeatable read"}, "default_transaction_isolation", "repeatable read"),
], ids=["styles", "isolation"])


@UNSET_BEHIND_A_POOLER
def test_behind_a_transaction_pooler_the_driver_sets_nothing_and_refuses(
    role_with: Any, pool: Any, schema: str, settings: dict[str, str], setting: str, shown: str,
) -> None:
    """``pooler=transaction`` sets no session state, so a role with other defaults is refused, not half-served."""
    _a_claim_is_refused(pool, schema, f"{role_with(**settings)}?pooler=transaction", setting, shown)


def _a_claim_is_refused(pool: Any, schema: str, url: str, setting: str, shown: str) -> None:
    """A driver on ``url`` is refused its claim, naming ``setting`` and its value; the waiting job untouched."""
    job = PostgresDriver(pool, schema=schema).enqueue("x", max_attempts=1)
    driver = PostgresDriver.from_url(f"{url}{'&' if '?' in url else '?'}schema={schema}")
    try:
        with pytest.raises(ConfigurationError) as refused:
            driver.claim(["default"], worker_id="w", lease=LEASE)
        _refusal(refused.value, setting, shown)
    finally:
        driver.close()
    _untouched(pool, schema, job.id)


@UNSET_BEHIND_A_POOLER
def test_through_pgbouncer_a_role_with_other_defaults_is_refused(
    role_with: Any, pool: Any, schema: str, settings: dict[str, str], setting: str, shown: str,
) -> None:
    """Through PgBouncer (transaction pooling) to a role with other defaults: refused, the job untouched."""
    binary = pb.find_pgbouncer()
    if binary is None:
        pb._unavailable("no pgbouncer binary")
    bouncer = pb.Bouncer(binary, role_with(**settings)).start()  # type: ignore[arg-type]
    try:
        _a_claim_is_refused(pool, schema, bouncer.url, setting, shown)
    finally:
        bouncer.stop()


@pytest.mark.parametrize(("option", "setting", "shown"), [
    ("DateStyle%3DPostgres", "DateStyle", "Postgres, MDY"),
    ("default_transaction_isolation%3Dserializable", "default_transaction_isolation", "serializable"),
])
def test_a_setting_in_the_callers_own_options_is_theirs_and_is_refused(pg_url: str, pool: Any, schema: str,
                                                                       option: str, setting: str, shown: str) -> None:
    """``options=-c ...`` in the URL wins over the driver's setting, so the driver checks it and refuses it."""
    _a_claim_is_refused(pool, schema, f"{pg_url}?options=-c%20{option}", setting, shown)


def test_the_async_driver_sets_its_styles_and_refuses_a_callers_pool(role_with: Any, pool: Any, schema: str) -> None:
    """The async driver: its own connections work in any role default; a caller's async pool with
    other defaults is refused (the isolation asked inside the transaction it opens, then rolled back)."""
    url = role_with(**OTHER_STYLES)

    async def scenario() -> None:
        own = AsyncPostgresDriver(url, schema=schema)
        try:
            job = await own.enqueue("x", max_attempts=1)
            claimed = (await own.claim(["default"], worker_id="w", lease=LEASE)).claimed
            assert [c.job.id for c in claimed] == [job.id]
            assert (await own.ack(claimed[0].token, {"ok": True})).state == JobState.DONE  # type: ignore[union-attr]
            assert (await own.introspect.stats()).count("done") == 1
            waiting = await own.enqueue("y", max_attempts=1)
        finally:
            await own.close()
        theirs = AsyncConnectionPool(url, kwargs={"autocommit": True}, min_size=1, max_size=2, open=False)
        await theirs.open()
        try:
            driver = AsyncPostgresDriver(theirs, schema=schema)
            with pytest.raises(ConfigurationError) as refused:
                await driver.claim(["default"], worker_id="w", lease=LEASE)
            _refusal(refused.value, "DateStyle", "SQL, DMY")
        finally:
            await theirs.close()
        strict = role_with(default_transaction_isolation="serializable")
        theirs = AsyncConnectionPool(strict, kwargs={"autocommit": False}, min_size=1, max_size=2, open=False)
        await theirs.open()
        try:
            with pytest.raises(ConfigurationError) as refused:
                await AsyncPostgresDriver(theirs, schema=schema).claim(["default"], worker_id="w", lease=LEASE)
            _refusal(refused.value, "default_transaction_isolation", "serializable")
        finally:
            await theirs.close()
        _untouched(pool, schema, waiting.id)

    asyncio.run(scenario())


def test_a_role_defaulting_to_serializable_gets_read_committed_and_its_races_settle(role_with: Any) -> None:
    """Four claimers racing over 400 jobs, and keyed enqueues racing, as a serializable-by-default role: no error."""
    driver = PostgresDriver(role_with(default_transaction_isolation="serializable"), schema=fx.schema_name(),
                            auto_migrate=True)
    try:
        with driver._connection() as conn:
            assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
        driver.enqueue_many([{"name": "j", "payload": n} for n in range(400)])
        errors: list[BaseException] = []
        taken: list[str] = []

        def drain(i: int) -> None:
            while claimed := driver.claim(["default"], worker_id=f"w{i}", limit=7, lease=LEASE).claimed:
                taken.extend(c.job.id for c in claimed)
                driver.ack_many([(c.token, None) for c in claimed])

        def enqueue_keyed(i: int) -> None:
            for n in range(40):  # the same keys from every thread: one job per key
                driver.enqueue("keyed", key=f"k{n}")

        for work in (drain, enqueue_keyed):
            threads = [threading.Thread(target=_recorded, args=(work, i, errors)) for i in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        assert errors == []
        assert len(taken) == len(set(taken)) == 400
        assert driver.introspect.stats().count("ready") == 40
    finally:
        driver.close()


def test_a_serialization_failure_is_a_rollback_to_retry_not_a_lost_connection(pool: Any, pg_url: str,
                                                                              schema: str) -> None:
    """The caller's repeatable-read transaction meets a key committed after its snapshot: JC_DB_ERROR, retry."""
    driver = PostgresDriver(pool, schema=schema)
    with psycopg.connect(pg_url) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT 1")  # the snapshot is taken here
        first = driver.enqueue("x", key="once")  # committed after it
        with pytest.raises(BackendFailure) as refused:
            driver.enqueue("x", key="once", connection=conn)
        conn.rollback()
    assert not isinstance(refused.value, BackendUnavailable)
    assert refused.value.code == "JC_DB_ERROR"
    assert "rolled the statement back: could not serialize access" in refused.value.cause
    assert refused.value.fix == "retry the call; nothing of it was written"
    assert driver.introspect.stats().count("ready") == 1
    assert driver.introspect.get(first.id) is not None


def _race(driver: PostgresDriver, schema: str, errors: list[BaseException]) -> list[list[bool]]:
    """Four migrations of ``schema`` at once, then five rounds of five holders racing for a
    lease of limit 2: each round's answers. Each locks, then reads what it locked; in a
    snapshot taken before the lock was granted the read would miss the winner's commit (a
    migration step run twice, more holders than the limit)."""
    def together(work: Callable[[int], None], n: int) -> None:
        gate = threading.Barrier(n)

        def run(i: int) -> None:
            gate.wait()
            work(i)

        threads = [threading.Thread(target=_recorded, args=(run, i, errors)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)

    together(lambda i: PostgresDriver(driver._pool, schema=schema).migrate(), 4)
    rounds: list[list[bool]] = []
    for round_ in range(5):
        answers: list[bool] = []
        together(lambda i, key=f"api{round_}", into=answers: into.append(  # type: ignore[misc]
            driver.leases.acquire(key, 2, f"h{i}", LEASE)), 5)
        rounds.append(sorted(answers))
    return rounds


def test_a_callers_pool_defaulting_to_repeatable_read_is_refused_until_its_role_is_read_committed(
    role_with: Any, pool: Any,
) -> None:
    """The caller's own pool, its role at repeatable read: refused before anything is sent; mended as the fix says."""
    url = role_with(default_transaction_isolation="repeatable read")
    schema = fx.schema_name()
    theirs = ConnectionPool(url, kwargs={"autocommit": True}, min_size=0, max_size=8, open=True)
    try:
        with pytest.raises(ConfigurationError) as refused:
            PostgresDriver(theirs, schema=schema).migrate()
        assert "default_transaction_isolation is 'repeatable read'" in refused.value.cause
        assert "nothing was sent" in refused.value.cause
        with pool.connection() as conn:
            assert conn.execute("SELECT to_regnamespace(%s)", [schema]).fetchone() == (None,)
        role = conninfo_to_dict(url)["user"]
        fix = refused.value.fix.split("(", 1)[1].split(")")[0]
        assert fix == f"ALTER ROLE \"{role}\" SET default_transaction_isolation = 'read committed'"
        with pool.connection() as conn:
            conn.execute(fix.encode())
        theirs.close()  # its idle connections keep the default they were opened with
        theirs = ConnectionPool(url, kwargs={"autocommit": True}, min_size=0, max_size=8, open=True)
        errors: list[BaseException] = []
        rounds = _race(PostgresDriver(theirs, schema=schema), schema, errors)
        assert errors == []
        assert rounds == [[False, False, False, True, True]] * 5
    finally:
        theirs.close()
        fx.drop_schema(pool, schema)


def test_a_callers_connections_set_to_repeatable_read_still_lock_then_read_at_read_committed(
    pg_url: str, pool: Any,
) -> None:
    """psycopg begins each transaction at a connection's ``isolation_level``: the driver's run at read
    committed on the caller's connections set to repeatable read, and leave them as they were."""
    schema = fx.schema_name()

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

    theirs = ConnectionPool(pg_url, kwargs={"autocommit": True}, configure=configure, min_size=0, max_size=8,
                            open=True)
    try:
        errors: list[BaseException] = []
        rounds = _race(PostgresDriver(theirs, schema=schema), schema, errors)
        assert errors == []
        assert rounds == [[False, False, False, True, True]] * 5
        with theirs.connection() as conn:
            assert conn.isolation_level == psycopg.IsolationLevel.REPEATABLE_READ
    finally:
        theirs.close()
        fx.drop_schema(pool, schema)


def test_a_progress_value_is_stored_as_given_whatever_the_sessions_float_digits(role_with: Any, pool: Any,
                                                                                schema: str) -> None:
    """``extra_float_digits = -15`` on the role (not a setting the driver makes): progress 0.25 stays 0.25."""
    theirs = ConnectionPool(role_with(extra_float_digits="-15"), kwargs={"autocommit": True}, min_size=0,
                            max_size=1, open=True)
    try:
        with theirs.connection() as conn:
            assert conn.execute("SELECT 0.25::float8::text").fetchone() == ("0.2",)  # what the role's sessions do
        _progress_round_trips(PostgresDriver(theirs, schema=schema))
    finally:
        theirs.close()


def test_a_style_the_caller_sets_on_their_connection_between_two_calls_is_refused(pg_url: str, pool: Any,
                                                                                   schema: str) -> None:
    """A caller's pool is read on every checkout: a ``SET DateStyle`` of theirs between two calls is seen."""
    theirs = ConnectionPool(pg_url, kwargs={"autocommit": True}, min_size=1, max_size=1, open=True)
    try:
        driver = PostgresDriver(theirs, schema=schema)
        job = driver.enqueue("x")
        with theirs.connection() as conn:
            conn.execute("SET DateStyle = 'SQL, DMY'")
        with pytest.raises(ConfigurationError) as refused:
            driver.claim(["default"], worker_id="w", lease=LEASE)
        _refusal(refused.value, "DateStyle", "SQL, DMY")
        _untouched(pool, schema, job.id)
        with theirs.connection() as conn:
            conn.execute("SET DateStyle = 'ISO'")
        assert [c.job.id for c in driver.claim(["default"], worker_id="w", lease=LEASE).claimed] == [job.id]
    finally:
        theirs.close()


def test_the_wake_up_listener_outlives_a_roles_idle_session_timeout(role_with: Any, schema: str,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A role whose idle sessions the server closes after 0.4 s: the LISTEN session (idle by design) is
    not closed, so no reconnection is logged, and a wake-up still arrives at once."""
    url = role_with(idle_session_timeout="400ms")
    driver = PostgresDriver(url, schema=schema)
    heard = threading.Event()
    subscription = driver.subscribe(["q"], lambda queue: heard.set())
    try:
        with caplog.at_level("WARNING"):
            threading.Event().wait(1.5)  # past three of the role's idle timeouts
            driver.enqueue("x", queue="q")
            assert heard.wait(5)
        assert [r.getMessage() for r in caplog.records if "listener lost its connection" in r.getMessage()] == []
        assert driver.introspect.stats().count("ready") == 1  # the pool's own idle sessions are the role's to close
    finally:
        subscription.close()
        driver.close()

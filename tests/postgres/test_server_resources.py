"""A server out of something: connection slots, disk, memory. Each is answered for what it is.

Connection slots: the server's ``max_connections`` (less its reserved slots), a role's or a
database's ``CONNECTION LIMIT``. Before, a role at its limit was answered ``JC_DB_AUTH``
"refused the credentials ... retrying will not help" (a worker starting then exited on
it, and a caller's pool stopped waiting for a slot at once), the server's own limit "cannot
be reached ... check that PostgreSQL is running", and each call tried a new connection,
every one a backend process the full server started only to turn it away. Here other
connections of the role hold the slots, as another fleet or an application would.

Disk, memory, I/O (SQLSTATE classes 53 and 58) were "the database connection failed ...
check that the database is up": here a trigger on the jobs table raises what PostgreSQL
raises when its disk is full (``could not extend file``, SQLSTATE 53100) and the others,
so every driver call that writes meets it as it would.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver, make_pool
from psycopg import sql

from fixtures import postgres as fx
from jobcore.errors import BackendFailure, BackendUnavailable, JobcoreError
from jobcore.records import JobSpec, JobState

ROLE = "slots_app"
LEASE = timedelta(seconds=30)


class SlotServer:
    """A small server of this module's own (``max_connections`` 12, 3 of them reserved) and
    :data:`ROLE`, a login role that is no superuser (a superuser passes every limit)."""

    def __init__(self, server: fx.LocalServer) -> None:
        self.server = server
        parts = urlsplit(server.url)
        self.url = urlunsplit(parts._replace(netloc=f"{ROLE}@{parts.netloc.rpartition('@')[2]}")) + "?schema=app"
        self.log = Path(server.root) / "server.log"

    def admin(self, statement: sql.Composable) -> None:
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            conn.execute(statement)

    def refusals(self) -> int:
        """Connections the server has turned away for want of a slot, so far."""
        text = self.log.read_text(errors="replace")
        return sum(text.count(s) for s in ("too many connections for", "remaining connection slots are reserved"))

    @contextlib.contextmanager
    def taken(self, where: str) -> Iterator[str]:
        """Every slot ``where`` (``role``, ``database``, ``server``) allows :data:`ROLE` held
        by other connections of it; yields what the server says to one more."""
        limit = {"role": "ALTER ROLE {} CONNECTION LIMIT {}", "database": "ALTER DATABASE {} CONNECTION LIMIT {}"}
        name = sql.Identifier(ROLE if where == "role" else "postgres")
        others: list[psycopg.Connection[Any]] = []
        try:
            if where in limit:
                self.admin(sql.SQL(limit[where]).format(name, 1))
            said = ""
            while not said and len(others) < 20:
                try:
                    others.append(psycopg.connect(self.url.partition("?")[0]))
                except psycopg.OperationalError as exc:
                    said = str(exc)
            assert said, "the others never filled the slots"
            yield said
        finally:
            for conn in others:
                conn.close()
            if where in limit:
                self.admin(sql.SQL(limit[where]).format(name, -1))


@pytest.fixture(scope="module")
def slots() -> Iterator[SlotServer]:
    bindir = fx.find_binaries()
    if bindir is None:
        fx.unavailable("no initdb/postgres binaries to start a server with few connection slots")
    server = fx.LocalServer(bindir, extra=("-c", "max_connections=12", "-c", "superuser_reserved_connections=3"))  # type: ignore[arg-type]
    try:
        server.start()
    except Exception as exc:
        server.stop()
        fx.unavailable(f"starting a server with few connection slots failed: {exc}")
    own = SlotServer(server)
    own.admin(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(ROLE)))
    own.admin(sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(sql.Identifier(ROLE)))
    driver = PostgresDriver.from_url(own.url)
    driver.migrate()
    driver.close()
    yield own
    server.stop()


def _says_no_slot(error: JobcoreError, server_said: str) -> None:
    """The refusal a user reads: unavailable for want of a slot, the server's words, the fix."""
    assert isinstance(error, BackendUnavailable), repr(error)
    assert error.code == "JC_DB_UNAVAILABLE"
    assert "no connection slot free" in error.cause, error.cause
    reason = server_said.rpartition("FATAL:")[2].split()
    assert " ".join(reason) in error.cause, (server_said, error.cause)
    assert "CONNECTION LIMIT" in error.fix
    assert "--connections" in error.fix
    assert "may be retried" in error.fix
    assert "credentials" not in f"{error.cause} {error.fix}"


@pytest.mark.parametrize("where", ["role", "database", "server"])
def test_every_slot_taken_is_unavailable_for_want_of_a_slot_not_refused_credentials(
    slots: SlotServer, where: str
) -> None:
    with slots.taken(where) as said:
        driver = PostgresDriver.from_url(slots.url)
        with pytest.raises(BackendUnavailable) as info:
            driver.introspect.stats()
        driver.close()
        _says_no_slot(info.value, said)
        assert "for role 'slots_app'" in info.value.cause

        async def one_call() -> None:
            driver = AsyncPostgresDriver.from_url(slots.url)
            try:
                await driver.introspect.stats()
            finally:
                await driver.close()

        with pytest.raises(BackendUnavailable) as async_info:
            asyncio.run(one_call())
        _says_no_slot(async_info.value, said)
    driver = PostgresDriver.from_url(slots.url)  # a slot free: it connects
    try:
        driver.introspect.stats()
    finally:
        driver.close()


def test_a_callers_pool_waits_for_a_slot_to_free(slots: SlotServer) -> None:
    """Before, the refusal ended the wait at once as refused credentials; a slot freed 1 s later went unused."""
    with slots.taken("role"):
        pool = make_pool(slots.url.partition("?")[0], min_size=0, timeout=8.0)
        driver = PostgresDriver(pool, schema="app")
        try:
            others_leave = threading.Timer(1.0, lambda: slots.admin(
                sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(ROLE))))
            others_leave.start()
            started = time.monotonic()
            job = driver.enqueue("waited_for_a_slot")
            assert time.monotonic() - started >= 0.9
            stored = driver.introspect.get(job.id)
            assert stored is not None
            assert stored.state is JobState.READY
        finally:
            others_leave.join()
            driver.close()
            pool.close()


def _hammer(call: Any, threads: int, seconds: float) -> list[BaseException]:
    """``call()`` in ``threads`` threads, each again and again for ``seconds``; what they raised."""
    errors: list[BaseException] = []
    until = time.monotonic() + seconds

    def loop() -> None:
        while time.monotonic() < until:
            try:
                call()
            except BackendUnavailable as exc:
                errors.append(exc)

    _in_threads(loop, threads)
    return errors


def _in_threads(target: Any, count: int) -> None:
    """``target()`` in ``count`` threads at once; back when every one has returned (or 30 s)."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def test_a_pool_asks_a_full_server_for_a_connection_at_most_every_half_second(slots: SlotServer) -> None:
    """8 threads calling nonstop for 2 s on a pool of 8 that has one connection, every other
    slot of the role taken: the server turns away a handful of connections, not one per call
    (before: 1,000 and more). Once a slot is free, the next calls get one within the hold."""
    driver = PostgresDriver.from_url(f"{slots.url}&pool_max=8")
    try:
        driver.introspect.stats()  # its one connection, idle in the pool
        limit = sql.SQL("ALTER ROLE {} CONNECTION LIMIT {}")
        slots.admin(limit.format(sql.Identifier(ROLE), 1))  # that one connection is the role's only slot
        before = slots.refusals()
        errors = _hammer(driver.introspect.stats, threads=8, seconds=2.0)
        refused = slots.refusals() - before
        assert errors, "no call met the limit"
        assert all("no connection slot free" in e.cause for e in errors), {e.cause for e in errors}
        assert 0 < refused <= 16, f"{refused} connections refused in 2 s ({len(errors)} calls answered)"

        slots.admin(limit.format(sql.Identifier(ROLE), -1))
        freed = time.monotonic()
        done: list[float] = []
        barrier = threading.Barrier(8)

        def until_served() -> None:
            barrier.wait()  # 8 at once: 7 need a new connection
            while True:
                try:
                    driver.introspect.stats()
                    done.append(time.monotonic() - freed)
                    return
                except BackendUnavailable:
                    time.sleep(0.01)

        _in_threads(until_served, 8)
        assert len(done) == 8
        assert max(done) < 1.0, done
    finally:
        slots.admin(sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(ROLE)))
        driver.close()


def test_the_async_pool_asks_a_full_server_at_most_every_half_second_too(slots: SlotServer) -> None:
    async def scenario() -> tuple[int, int, float]:
        driver = AsyncPostgresDriver.from_url(f"{slots.url}&pool_max=8")
        try:
            await driver.introspect.stats()
            slots.admin(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 1").format(sql.Identifier(ROLE)))
            before, answered = slots.refusals(), 0
            until = time.monotonic() + 2.0

            async def loop() -> None:
                nonlocal answered
                while time.monotonic() < until:
                    with contextlib.suppress(BackendUnavailable):
                        await driver.introspect.stats()
                    answered += 1
                    await asyncio.sleep(0)

            await asyncio.gather(*(loop() for _ in range(8)))
            refused = slots.refusals() - before
            slots.admin(sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(ROLE)))
            freed = time.monotonic()
            while True:
                try:
                    await asyncio.gather(*(driver.introspect.stats() for _ in range(8)))
                    return refused, answered, time.monotonic() - freed
                except BackendUnavailable:
                    await asyncio.sleep(0.01)
        finally:
            slots.admin(sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(ROLE)))
            await driver.close()

    refused, answered, recovered = asyncio.run(scenario())
    assert 0 < refused <= 16, f"{refused} connections refused in 2 s ({answered} calls answered)"
    assert recovered < 1.0


def test_a_worker_started_while_every_slot_is_taken_exits_naming_the_slots(
    slots: SlotServer, tmp_path: Path
) -> None:
    """It exits 6 as for any store it cannot reach at start (a process manager starts it again),
    with the slots as the cause; before, JC_DB_AUTH "refused the credentials ... retrying will not help"."""
    jobs = tmp_path / "slot_jobs.py"
    jobs.write_text("from jobcore import job\n\n\n@job()\ndef noop() -> None:\n    pass\n")
    with slots.taken("role"):
        done = subprocess.run(
            [sys.executable, "-m", "jobcore.cli", "worker", str(jobs), "--url", slots.url],
            check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
    shown = done.stdout + done.stderr
    assert done.returncode == 6, shown
    assert "JC_DB_UNAVAILABLE" in shown
    assert "no connection slot free for role 'slots_app'" in shown
    assert "too many connections for role" in shown
    assert "JC_DB_AUTH" not in shown


# -- disk, memory, I/O ---------------------------------------------------------------------


@pytest.fixture
def faulty(driver: PostgresDriver, pool: Any) -> tuple[PostgresDriver, Any]:
    """The driver, and ``fail(sqlstate, message)``: from then on every write to its jobs table
    raises that error, as the server does (``fail(None)`` ends it)."""
    s = sql.Identifier(driver.schema)
    with pool.connection() as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.jc_fault (sqlstate text NOT NULL, message text NOT NULL)").format(s))
        conn.execute(sql.SQL(
            "CREATE FUNCTION {s}.jc_fault() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "DECLARE f record; BEGIN "
            "SELECT * INTO f FROM {s}.jc_fault LIMIT 1; "
            "IF FOUND THEN RAISE EXCEPTION '%', f.message USING ERRCODE = f.sqlstate, "
            "HINT = 'Check free disk space.'; END IF; "
            "RETURN NEW; END $$"
        ).format(s=s))
        conn.execute(sql.SQL(
            "CREATE TRIGGER jc_fault BEFORE INSERT OR UPDATE ON {s}.jobs FOR EACH ROW EXECUTE FUNCTION {s}.jc_fault()"
        ).format(s=s))

    def fail(sqlstate: str | None, message: str = "") -> None:
        with pool.connection() as conn:
            conn.execute(sql.SQL("DELETE FROM {}.jc_fault").format(s))
            if sqlstate is not None:
                conn.execute(sql.SQL("INSERT INTO {}.jc_fault VALUES (%s, %s)").format(s), (sqlstate, message))

    return driver, fail


RESOURCES = [
    ("53100", 'could not extend file "base/5/16385": No space left on device', "is out of disk space",
     "free space on the server's data volume"),
    ("53200", "out of memory", "ran out of memory", "work_mem"),
    ("53400", "temporary file size exceeds temp_file_limit (1024kB)", "lacks a resource", "server's message"),
    ("58030", 'could not read block 0 in file "base/5/16385": Input/output error', "could not read or write its files",
     "server's disks"),
]


@pytest.mark.parametrize(("sqlstate", "message", "cause", "fix"), RESOURCES, ids=[r[0] for r in RESOURCES])
def test_a_server_out_of_a_resource_says_which_and_writes_nothing(
    faulty: tuple[PostgresDriver, Any], sqlstate: str, message: str, cause: str, fix: str
) -> None:
    driver, fail = faulty
    job = driver.enqueue("before")
    token = driver.claim(["default"], worker_id="w", lease=LEASE).claimed[0].token
    fail(sqlstate, message)
    for call in (lambda: driver.enqueue("during"), lambda: driver.enqueue("keyed", key="k"),
                 lambda: driver.enqueue_many([JobSpec(name="many"), JobSpec(name="more")]),
                 lambda: driver.ack(token, "done")):
        with pytest.raises(BackendUnavailable) as info:
            call()
        error = info.value
        assert error.code == "JC_DB_UNAVAILABLE"
        assert error.cause.startswith(f"the database server {cause}"), error.cause
        assert message in error.cause
        assert fix in error.fix
        assert "nothing of the statement was written" in error.fix
        assert "connection failed" not in error.cause
    assert [j.id for j in driver.introspect.list().jobs] == [job.id]  # nothing enqueued
    fail(None)
    assert driver.ack(token, "done") is not None  # the same token, once there is room: F05's retry lands
    done = driver.introspect.get(job.id)
    assert done is not None
    assert done.state is JobState.DONE


def test_a_statement_beyond_a_server_limit_is_a_database_error_not_unavailable(
    faulty: tuple[PostgresDriver, Any],
) -> None:
    """SQLSTATE class 54 (program limit exceeded): the same statement would fail again, so it
    is not "the connection failed ... may be retried"."""
    driver, fail = faulty
    fail("54000", "index row size 3000 exceeds btree version 4 maximum 2704 for index")
    with pytest.raises(BackendFailure) as info:
        driver.enqueue("too_big")
    assert info.value.code == "JC_DB_ERROR"
    assert info.value.cause.startswith("the statement exceeds a limit of the database server: ")
    assert "index row size" in info.value.cause
    assert driver.introspect.list().jobs == ()

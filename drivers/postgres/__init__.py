"""The PostgreSQL driver: the whole JobDriver contract on psycopg 3 and a connection pool.

Every statement is declared once in :mod:`._sql` and rendered once per schema (``self.q``). The hot
path is one statement per call: ``claim`` (burial, reclaim and due rows with ``FOR
UPDATE SKIP LOCKED``), ``ack_many`` (every row fenced on its own token), ``enqueue`` and
``enqueue_many`` (with their wake-up NOTIFY), ``nack``, ``heartbeat``, ``start``.

Time (F01). Every time decision is made by the statement on the store's clock
(:data:`._sql.NOW`); the driver sends ``now = None`` unless a clock was injected, which
then stands in for the store's. The inserts answer the store's now once, so the driver
builds the new jobs from what it sent and that now. ``driver.clock`` is then a
:class:`~jobcore.clock.StoreClock` reading ``now()`` from the store, for what callers
compute ahead of a call.

Faults. Every call runs through :func:`._errors.translated`, the one translation point.
Every wait on the server is bounded (F07, :mod:`._pool`): connecting by
``connect_timeout``, each statement by ``call_timeout`` (past it the connection is
closed and the call answers ``JC_DB_TIMEOUT``). Pooled connections are probed without a
round trip when taken (a server that dropped them has left them readable at EOF), so
after a restart or ``pg_terminate_backend`` the next call gets a fresh connection, and
the driver's own pool opens connections on demand, so the first call after an outage
gets one as soon as the server accepts it (F06). Reads, ``heartbeat``
and ``claim`` are retried once on a connection lost mid-call; writes that settle or
insert are not (their reply may have been lost after they committed, and the caller
must learn that). Retrying a claim is safe because of claim numbers: if the first
attempt committed and only its reply was lost, the jobs it took stay ``running`` under
a token nobody received; no live lease is ever handed out twice, and when that lease
lapses the next claim moves ``claim_no``, so the lost token can never settle anything.

Poolers and connections. A driver built from a URL opens at most ``pool_max`` connections
(default 10), plus one for its wake-ups while subscribed. No startup ``options`` are sent
and, behind a transaction pooler (PgBouncer ``pool_mode = transaction`` and the like,
detected on each new connection or named with ``pooler=``), no session setting and no
server-side prepared statement is used (:class:`._pool.Session`); LISTEN cannot work
through such a pooler, so wake-ups go over ``listen_url`` (a direct connection) when one
is given, and the ``notify`` capability is dropped (the worker polls) when not.

Async. :class:`AsyncPostgresDriver` (:mod:`._async_driver`) is the same driver for asyncio,
on psycopg ``AsyncConnection``: the backends (``_jobs``, ``_introspect``, ``_leases``,
``_schedules``, ``_prune``, ``_schema``) are written once as ``*_async.py`` and the sync
modules generated from them by ``tools/unasync.py``; the constructor's checks, the schema
verdict and ``migrate``'s answer are :mod:`._config`'s, shared by both flavours.

Schema. jobcore owns its schema (``jobcore`` by default, configurable): call
``driver.migrate()`` (or ``jobcore migrate``) at deploy time. A driver meeting a missing
or older schema raises ``JC_SCHEMA_OUTDATED`` on first use, unless built with
``auto_migrate=True`` (``?auto_migrate=true`` in the URL), which tests and demos use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from jobcore import validate as v
from jobcore.clock import Clock, StoreClock, to_millis
from jobcore.door import FrontDoor, IntrospectDoor, LeasesDoor, SchedulesDoor
from jobcore.driver import Duration
from jobcore.errors import (
    BackendAuthFailed,
    BackendUnavailable,
    DriverUnavailable,
    UrlInvalid,
)
from jobcore.records import Job, Migration

from . import _lean, _lean_wire, _schema
from ._async_driver import AsyncPostgresDriver
from ._config import (
    check_pooler,
    check_schema,
    configure,
    migration,
    needs_migration,
    own_options,
    split_url,
    store_url,
    timeouts,
)
from ._errors import READ_ONLY, origin, route_pool_logging, translate, translated
from ._introspect import PostgresIntrospect
from ._jobs import PostgresJobs
from ._leases import PostgresLeases
from ._notify import Listener
from ._pool import (
    CLOCK_READ_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    VETTED,
    BoundedConnection,
    Pool,
    alive,
    at_read_committed,
    bounded,
    check_styles,
    connect_kwargs,
    vet,
)
from ._rows import EPOCH
from ._schedules import PostgresSchedules
from ._sql import Statements, bound

__all__ = ["AsyncPostgresDriver", "PostgresDriver", "make_pool"]

PSYCOPG_FLOOR = "3.3.6"
"""The oldest psycopg the driver runs on: its ``Connection.wait(timeout=)`` bounds every call (F07)."""

if not hasattr(psycopg.errors, "_WaitTimeout"):  # what 3.3.6's wait(timeout=) raises; older ones have neither
    raise DriverUnavailable(
        f"psycopg {psycopg.__version__} is too old for jobcore's PostgreSQL driver, which bounds every "
        f"call with Connection.wait(timeout=) from psycopg {PSYCOPG_FLOOR}",
        f"pip install 'psycopg[binary]>={PSYCOPG_FLOOR}' (the jobcore-queue[postgres] extra asks for it)",
    )

Row = tuple[Any, ...]
_MS = timedelta(milliseconds=1)
_FAILURE_CHECK = 0.1
"""Seconds between looks at a caller's pool's last failed attempt while waiting for a connection."""


_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK


def _bound(q: Statements, conn: psycopg.Connection[Any], query: bytes, params: Mapping[str, Any] | None) -> Any:
    """A cursor of ``conn`` and what to run on it (:func:`._sql.bound`: a statement's native form)."""
    return bound(q, conn, query, params, raw=psycopg.RawCursor, plain=psycopg.Cursor)


def _has_rows(cur: psycopg.Cursor[Any]) -> bool:
    """Whether the statement answered rows (``cur.description`` would build its column list)."""
    result = cur.pgresult
    return result is not None and result.status == _TUPLES_OK


def make_pool(
    conninfo: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 10.0,
    statement_timeout: Duration | None = None, call_timeout: Duration | None = DEFAULT_CALL_TIMEOUT,
    pooler: str = "auto", **kwargs: Any,
) -> ConnectionPool[Any]:
    """A ``psycopg_pool`` pool set up the way the driver wants it (autocommit, UTF-8, UTC, ISO
    dates, read committed, generic plans), of :class:`~._pool.BoundedConnection`: no
    statement waits on the server longer than ``call_timeout`` (past it the connection is
    discarded and the call answers ``JC_DB_TIMEOUT``; ``None`` for no bound).

    ``statement_timeout`` (a duration) is applied to every pooled session, by default 90%
    of ``call_timeout``; a statement running longer is cancelled by the server and surfaces
    as ``JC_DB_TIMEOUT``. ``connect_timeout`` defaults to 5 s unless ``conninfo`` or
    ``kwargs`` name one. ``pooler`` says whether a transaction pooler sits in between
    (``"auto"``: detected on each new connection; ``"transaction"``; ``"none"``); behind
    one the connections set no session state and prepare no statements. Other ``kwargs``
    go to every connection (psycopg's keywords).

    A malformed ``conninfo`` is refused at once (``JC_URL_INVALID``). The pool's own log
    records (its failed connection attempts) go through jobcore's logger
    ``jobcore.drivers.postgres``, passwords masked, repeats at DEBUG; a call that finds no
    connection within ``timeout`` answers the last attempt's real cause (``JC_DB_AUTH`` for
    refused credentials, ``JC_DB_UNAVAILABLE`` naming the host and port).
    """
    statement, call = timeouts(statement_timeout, call_timeout)
    least = v.check_int(min_size, "min_size", 0, 1000)
    most = v.check_int(max_size, "max_size", max(1, least), 1000)
    connect = connect_kwargs(
        conninfo, statement_timeout=statement, call_timeout=call, pooler=check_pooler(pooler), **kwargs
    )
    route_pool_logging()
    # A class of its own, so this pool's last failed attempt is its own (BoundedConnection.last_failure).
    connection_class = type("JobcoreConnection", (BoundedConnection,), {"last_failure": None})
    return ConnectionPool(
        conninfo, min_size=least, max_size=most, timeout=timeout, kwargs=connect, open=True, name="jobcore",
        connection_class=connection_class,
    )


class PostgresDriver(FrontDoor):
    """The PostgreSQL :class:`~jobcore.driver.JobDriver`.

    Args:
        dsn_or_pool: A libpq connection string/URL (the driver makes and owns a pool of at
            most ``pool_max`` connections, opened on demand) or a ``psycopg_pool.ConnectionPool``
            (shared; the driver never closes it; :func:`make_pool` builds one whose
            statements are bounded).
        schema: The schema holding jobcore's tables.
        clock: Source of "now" standing in for the store's clock (tests). Default: the
            store's own clock; ``driver.clock`` is then a :class:`~jobcore.clock.StoreClock`.
        default_max_attempts: ``max_attempts`` for jobs enqueued without one.
        auto_migrate: Install or upgrade the schema on first use instead of raising
            ``JC_SCHEMA_OUTDATED`` (convenient for tests; production runs ``migrate``).
        statement_timeout: The server's per-statement limit for the pool this driver makes
            (default: 90% of ``call_timeout``).
        call_timeout: How long any statement may wait for the server before the driver
            gives up, discards the connection and answers ``JC_DB_TIMEOUT`` (default 10 s;
            ``None``: no bound). For the pool this driver makes and its wake-up listener;
            ``migrate`` is never cut short.
        pool_min, pool_max: Idle connections kept, and connections at most, of the pool this
            driver makes (whole numbers; a subscription's LISTEN connection comes on top).
        pooler: Whether a transaction pooler (PgBouncer ``pool_mode = transaction``, a cloud
            provider's) sits between the driver and the server: ``"auto"`` (default: detected
            on each new connection), ``"transaction"`` or ``"none"``. Behind one no session
            setting and no server-side prepared statement is used.
        listen_url: A ``postgresql://`` URL of the server itself, for the LISTEN connection of
            wake-ups (a transaction pooler cannot carry LISTEN). Without it, a driver behind a
            pooler lacks the ``notify`` capability and workers poll.
    """

    # Set by _config.configure from the constructor's arguments.
    auto_migrate: bool
    call_timeout: float | None
    pooler: str
    listen_url: str | None
    _pooled: bool | None
    _owns_pool: bool
    q: Statements
    lean: dict[bytes, tuple[bytes, tuple[str, ...]]]
    """The statements that take the lean path (:mod:`._lean_wire`), by their rendered text."""
    channel: str
    finish_channel: str
    _schema_ok: bool

    def __init__(
        self, dsn_or_pool: str | ConnectionPool[Any], *, schema: str = "jobcore", clock: Clock | None = None,
        default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS, auto_migrate: bool = False,
        statement_timeout: Duration | None = None, call_timeout: Duration | None = DEFAULT_CALL_TIMEOUT,
        pool_min: int = 1, pool_max: int = 10, pooler: str = "auto", listen_url: str | None = None,
    ) -> None:
        self.schema = check_schema(schema)
        v.check_clock(clock)
        self._injected = clock
        """The clock standing in for the store's, or None: the statements read the store's."""
        self.clock: Clock = clock if clock is not None else StoreClock(self._read_store_time)
        jobs = PostgresJobs(self)
        super().__init__(jobs, default_max_attempts=default_max_attempts)
        self._insert = jobs.insert  # the schedules' fire enqueues inside its own transaction
        self._pool: ConnectionPool[Any] | Pool
        configure(
            self, dsn_or_pool, pool_class=Pool, caller_pool=ConnectionPool, auto_migrate=auto_migrate,
            statement_timeout=statement_timeout, call_timeout=call_timeout, pool_min=pool_min, pool_max=pool_max,
            pooler=pooler, listen_url=listen_url,
        )
        self._schema_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._closed = False
        self.leases = LeasesDoor(PostgresLeases(self))
        self.introspect = IntrospectDoor(PostgresIntrospect(self))
        self.schedules = SchedulesDoor(PostgresSchedules(self), default_max_attempts=self._default_max_attempts)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresDriver:
        """Build from ``postgresql://user:pass@host:port/db?schema=...``.

        jobcore's own URL options (``schema``, ``auto_migrate``, ``statement_timeout`` and
        ``call_timeout`` in ms, ``pool_min``, ``pool_max``, ``default_max_attempts``) are taken
        out; the rest of the URL (``connect_timeout`` in seconds among it) goes to libpq
        unchanged. ``pooler`` and ``listen_url`` (URL-encoded) may be given there too.
        Keyword ``options`` win over the URL.
        """
        conninfo, taken = split_url(url)
        return cls(conninfo, **{**taken, **options})

    @property
    def url(self) -> str:
        """A ``postgresql://`` URL reaching this driver's store (its schema included), for
        ``jobcore.connect`` in another process (the CLI, a worker)."""
        return store_url(self._pool.conninfo, self._own)

    @property
    def _own(self) -> dict[str, str]:
        """The jobcore options :attr:`url` carries: the schema, and how to reach the server past a pooler."""
        return own_options(self.schema, self.pooler, self.listen_url)

    def _behind_pooler(self) -> bool:
        """Whether a transaction pooler sits in between: configured, else as the first
        connection found it (a pool of plain psycopg connections counts as direct)."""
        if self._pooled is None:
            with translated(self.schema), self._connection() as conn:
                self._pooled = bool(getattr(conn, "pooled", False))
        return self._pooled

    # -- plumbing ----------------------------------------------------------------------

    def _now(self) -> datetime | None:
        """The ``now`` parameter of every statement: the injected clock's time, or None
        (the statement reads the store's clock)."""
        clock = self._injected
        return None if clock is None else to_millis(clock.now())

    def _read_store_time(self) -> datetime:
        """The store's ``now()``, one round trip (``driver.clock``'s reading), bounded by
        the shorter of ``call_timeout`` and :data:`._pool.CLOCK_READ_TIMEOUT`."""
        limit = min(self.call_timeout or CLOCK_READ_TIMEOUT, CLOCK_READ_TIMEOUT)
        with translated(self.schema), self._connection() as conn, bounded(conn, limit):
            row = conn.execute(self.q.STORE_NOW).fetchone()
        assert row is not None
        stamp: datetime = row[0]
        return stamp.astimezone(EPOCH.tzinfo)  # the session's zone is the server's (or a pooler's)

    def _ensure_schema(self) -> None:
        if self._schema_ok:
            return
        with self._schema_lock:  # a second thread racing here re-checks: harmless, it is read-only
            with translated(self.schema), self._connection() as conn:
                found = _schema.read_version(conn, self.schema)
            if needs_migration(found, self.schema, self.auto_migrate):
                self._migrate(dry_run=False)
            self._schema_ok = True

    def _fetch(
        self, query: bytes, params: Mapping[str, Any] | None = None, *,
        conn: psycopg.Connection[Any] | None = None, retry: bool = False,
    ) -> list[Row]:
        """Run one statement and answer its rows (on ``conn`` when given: the caller's transaction)."""
        self._ensure_schema()
        if conn is not None:  # the caller's transaction (entering `translated` costs a generator: only here)
            check_styles(conn)
            with translated(self.schema):
                cur, text, args = _bound(self.q, conn, query, params)
                with cur:
                    cur.execute(text, args)
                    return cur.fetchall() if _has_rows(cur) else []
        for attempt in (1, 2):
            # Spelled out rather than `with translated(...), self._connection()`: this runs
            # once per statement, and two generator context managers were a tenth of the
            # client's time for a one-job enqueue.
            try:
                pooled = self._checkout()
            except psycopg.Error as exc:
                # No connection to be had (refused, connect_timeout, a full pool): trying again
                # at once would only wait as long again.
                raise translate(exc, self.schema) from origin(exc)
            try:
                if pooled.autocommit:
                    lean = self.lean.get(query)
                    if lean is not None:  # a short statement sent once per job: straight through libpq
                        dumped = _lean_wire.values(pooled, psycopg.Cursor, lean[1], params)
                        if dumped is not None:
                            return _lean.run(pooled, lean[0], dumped)
                    cur, text, args = _bound(self.q, pooled, query, params)
                    cur.execute(text, args)
                    return cur.fetchall() if _has_rows(cur) else []
                with pooled:  # a caller's pool without autocommit: commit (or roll back) here
                    cur, text, args = _bound(self.q, pooled, query, params)
                    cur.execute(text, args)
                    return cur.fetchall() if _has_rows(cur) else []
            except psycopg.Error as exc:
                if isinstance(exc, READ_ONLY):
                    pooled.close()  # a server that takes no writes: the next call connects again
                error = translate(exc, self.schema)
                if retry and attempt == 1 and isinstance(error, BackendUnavailable):  # lost mid-call
                    continue
                raise error from origin(exc)
            finally:
                self._pool.putconn(pooled)
        raise AssertionError("unreachable")  # pragma: no cover

    def _checkout(self) -> psycopg.Connection[Any]:
        """A pooled connection that survived its idle time (dead ones are closed and replaced).

        The pool's own ``check`` hook would back off a second and more between dead
        connections; after a restart every idle one is dead, so they are dropped here
        without waiting.
        """
        for _ in range(64):
            conn: psycopg.Connection[Any] = self._getconn()
            if alive(conn):
                if VETTED not in conn.__dict__:
                    try:
                        vet(conn, own=isinstance(self._pool, Pool))
                    except BaseException:
                        self._pool.putconn(conn)
                        raise
                return conn
            conn.close()
            self._pool.putconn(conn)  # the pool discards a closed connection and opens a new one
        raise psycopg.OperationalError("every pooled connection was dead")

    def _getconn(self) -> psycopg.Connection[Any]:
        """A connection from the pool. A caller's pool from :func:`make_pool` records its last
        failed attempt: credentials or parameters the server refused end the wait at once
        (waiting cannot mend them), any other failure (a server restarting) is waited out for
        the pool's ``timeout``, and a ``PoolTimeout`` then answers the attempt's real cause."""
        pool = self._pool
        recorder = getattr(pool, "connection_class", None)
        if not isinstance(pool, ConnectionPool) or not hasattr(recorder, "last_failure"):
            return pool.getconn()
        deadline = time.monotonic() + pool.timeout
        while True:
            left = deadline - time.monotonic()
            try:
                conn: psycopg.Connection[Any] = pool.getconn(timeout=max(0.001, min(_FAILURE_CHECK, left)))
            except PoolTimeout as exc:
                failure = recorder.last_failure  # type: ignore[union-attr]
                final = left <= _FAILURE_CHECK
                if failure is not None and (final or isinstance(translate(failure), BackendAuthFailed | UrlInvalid)):
                    raise failure from exc
                if final:
                    raise
            else:
                return conn

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """:meth:`_checkout` for a block, given back after it (committed first outside autocommit)."""
        conn = self._checkout()
        try:
            if conn.autocommit:  # the driver's own pool: nothing to commit
                yield conn
            else:
                with conn:  # a caller's pool without autocommit: commit (or roll back) here
                    yield conn
        except READ_ONLY:
            conn.close()  # a server that takes no writes: the next call connects again
            raise
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction, errors translated."""
        self._ensure_schema()
        with translated(self.schema), self._connection() as conn, at_read_committed(conn), conn.transaction():
            yield conn

    # -- the public extra: enqueue inside the caller's transaction (transactional_enqueue) --

    def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, depends_on: Iterable[str | Job] | None = None,
        on_parent_failure: str = "cancel", connection: psycopg.Connection[Any] | None = None,
    ) -> Job:
        """Store one job (E01, E02); ``connection=`` joins the caller's transaction."""
        if connection is None:
            return super().enqueue(
                name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
                max_attempts=max_attempts, key=key, depends_on=depends_on, on_parent_failure=on_parent_failure,
            )
        return self._enqueue_in(
            connection, "connection", name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
            max_attempts=max_attempts, key=key, depends_on=depends_on, on_parent_failure=on_parent_failure,
        )

    def enqueue_many(self, specs: Iterable[Any], *, connection: psycopg.Connection[Any] | None = None) -> list[Job]:
        """Store a batch in one round trip (E05); ``connection=`` joins the caller's transaction."""
        return self._enqueue_many_in(connection, "connection", specs)

    # -- schema ------------------------------------------------------------------------

    def _migrate(self, *, dry_run: bool) -> Migration:
        # Never cut short by call_timeout: DDL on a large table takes what it takes.
        with translated(self.schema), self._connection() as conn, bounded(conn, None):
            run = _schema.plan if dry_run else _schema.migrate
            before, statements = run(conn, self.schema)
        return migration(before, statements, dry_run=dry_run)

    def __repr__(self) -> str:
        return f"PostgresDriver(schema={self.schema!r}, clock={self.clock!r})"



"""The native asyncio flavour of the PostgreSQL driver: :class:`AsyncPostgresDriver`.

Every statement, its parameters, the fencing and the row decoding are the sync driver's:
the backends are written once as async (``_jobs_async.py``...) and the sync ones are
generated from them (``tools/unasync.py``). What differs is the I/O plumbing, here and in
:mod:`._apool` and :mod:`._anotify`, and it decides as the sync one does, with the same
functions: the constructor's checks (:mod:`._config`), the :class:`~._pool.Session` set up
on each new connection (pooler detection), :func:`~._pool.probe` at checkout, the error
translation (:mod:`._errors`: every refusal has the same code on both flavours), the
schema check, and the retry of reads, ``heartbeat`` and ``claim`` once on a connection
lost mid-call.

No thread is used for a statement: psycopg's ``AsyncConnection`` waits on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobcore import validate as v
from jobcore.clock import Clock, StoreClock, to_millis
from jobcore.door import AsyncFrontDoor, AsyncIntrospectDoor, AsyncLeasesDoor, AsyncSchedulesDoor
from jobcore.driver import Duration
from jobcore.errors import BackendUnavailable
from jobcore.records import Job, Migration

from . import _lean_async, _lean_wire, _schema_async
from ._anotify import AsyncListener
from ._apool import AsyncPool, alive_async, at_read_committed_async, discard, vet_async
from ._config import (
    check_schema,
    configure,
    migration,
    needs_migration,
    own_options,
    split_url,
    store_url,
)
from ._errors import READ_ONLY, origin, translate, translated
from ._introspect_async import AsyncPostgresIntrospect
from ._jobs_async import AsyncPostgresJobs
from ._leases_async import AsyncPostgresLeases
from ._pool import (
    CLOCK_READ_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    VETTED,
    BoundedConnection,
    bounded,
    check_styles,
)
from ._rows import EPOCH
from ._schedules_async import AsyncPostgresSchedules
from ._sql import Statements, bound

__all__ = ["AsyncPostgresDriver"]

Row = tuple[Any, ...]
_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK


def _bound(q: Statements, conn: psycopg.AsyncConnection[Any], query: bytes, params: Mapping[str, Any] | None) -> Any:
    """A cursor of ``conn`` and what to run on it (:func:`._sql.bound`: a statement's native form)."""
    return bound(q, conn, query, params, raw=psycopg.AsyncRawCursor, plain=psycopg.AsyncCursor)


def _has_rows(cur: psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement answered rows (``cur.description`` would build its column list)."""
    result = cur.pgresult
    return result is not None and result.status == _TUPLES_OK


async def driver_connection(connection: object) -> object:
    """The psycopg ``AsyncConnection`` under an SQLAlchemy ``AsyncSession`` or ``AsyncConnection``
    (its current transaction's: ``await session.connection()``, then its driver connection);
    anything else as it is (the door checks it). SQLAlchemy is not imported: an object of
    its ``ext.asyncio`` package is recognised by its module."""
    if not type(connection).__module__.startswith("sqlalchemy.ext.asyncio"):
        return connection
    if hasattr(connection, "get_raw_connection"):  # an AsyncConnection
        raw = await connection.get_raw_connection()
    elif hasattr(connection, "connection"):  # an AsyncSession: the connection of its transaction
        raw = await (await connection.connection()).get_raw_connection()
    else:
        return connection
    return raw.driver_connection


class AsyncPostgresDriver(AsyncFrontDoor):
    """The PostgreSQL driver for asyncio: every verb ``await``-ed, native I/O (psycopg ``AsyncConnection``).

    The arguments, their checks and their coded refusals are
    :class:`~jobcore.drivers.postgres.PostgresDriver`'s, except ``dsn_or_pool``:

    Args:
        dsn_or_pool: A libpq connection string/URL (the driver makes and owns a pool of at
            most ``pool_max`` connections, each opened in the task that first needs it) or a
            ``psycopg_pool.AsyncConnectionPool`` (shared, opened by its owner; the driver
            never closes it).

    The constructor does no I/O; ``await driver.close()`` (or ``async with driver:``) closes
    the pool it made and its subscriptions. The driver belongs to the event loop that first
    uses it. ``enqueue(..., connection=conn)`` and ``enqueue_many(..., connection=conn)``
    join the caller's transaction on a psycopg ``AsyncConnection`` (for SQLAlchemy's
    ``AsyncSession``/``AsyncConnection``, pass its driver connection: see docs/reference/async.md).

    ``driver.clock`` (without an injected clock) is a :class:`~jobcore.clock.StoreClock` whose
    reading, renewed every 30 s, is one round trip on a short-lived sync connection: read on
    the loop, it blocks the loop for that round trip (connecting and reading each bounded by
    2 s). The verbs never read it: their time decisions are the statements' (F01).
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
        self, dsn_or_pool: str | AsyncConnectionPool[Any], *, schema: str = "jobcore", clock: Clock | None = None,
        default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS, auto_migrate: bool = False,
        statement_timeout: Duration | None = None, call_timeout: Duration | None = DEFAULT_CALL_TIMEOUT,
        pool_min: int = 1, pool_max: int = 10, pooler: str = "auto", listen_url: str | None = None,
    ) -> None:
        self.schema = check_schema(schema)
        v.check_clock(clock)
        self._injected = clock
        """The clock standing in for the store's, or None: the statements read the store's."""
        self.clock: Clock = clock if clock is not None else StoreClock(self._read_store_time)
        jobs = AsyncPostgresJobs(self)
        super().__init__(jobs, default_max_attempts=default_max_attempts)
        self._insert = jobs.insert  # the schedules' fire enqueues inside its own transaction
        self._pool: AsyncConnectionPool[Any] | AsyncPool
        configure(
            self, dsn_or_pool, pool_class=AsyncPool, caller_pool=AsyncConnectionPool, auto_migrate=auto_migrate,
            statement_timeout=statement_timeout, call_timeout=call_timeout, pool_min=pool_min, pool_max=pool_max,
            pooler=pooler, listen_url=listen_url,
        )
        self._schema_lock: asyncio.Lock | None = None
        self._listeners: list[AsyncListener] = []
        self._closed = False
        self.leases = AsyncLeasesDoor(AsyncPostgresLeases(self))
        self.introspect = AsyncIntrospectDoor(AsyncPostgresIntrospect(self))
        self.schedules = AsyncSchedulesDoor(
            AsyncPostgresSchedules(self), default_max_attempts=self._default_max_attempts
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncPostgresDriver:
        """Build from ``postgresql://user:pass@host:port/db?schema=...`` as
        :meth:`PostgresDriver.from_url <jobcore.drivers.postgres.PostgresDriver.from_url>` does."""
        conninfo, taken = split_url(url)
        return cls(conninfo, **{**taken, **options})

    @property
    def url(self) -> str:
        """A ``postgresql://`` URL reaching this driver's store (its schema included), for
        ``jobcore.connect`` in another process (the CLI, a worker)."""
        return store_url(self._pool.conninfo, own_options(self.schema, self.pooler, self.listen_url))

    def _behind_pooler(self) -> bool:
        """Whether a transaction pooler sits in between, as far as known without I/O:
        configured, else as the first connection found it (direct until one was opened;
        :meth:`_pooler_found` opens one to know)."""
        return bool(self._pooled)

    async def _pooler_found(self) -> bool:
        """Whether a transaction pooler sits in between: configured, else as the first connection finds it."""
        if self._pooled is None:
            with translated(self.schema):
                async with self._connection() as conn:
                    self._pooled = bool(getattr(conn, "pooled", False))
        return self._pooled

    # -- plumbing ----------------------------------------------------------------------

    def _now(self) -> datetime | None:
        """The ``now`` parameter of every statement: the injected clock's time, or None."""
        clock = self._injected
        return None if clock is None else to_millis(clock.now())

    def _read_store_time(self) -> datetime:
        """The store's ``now()`` for ``driver.clock`` (sync: see the class docstring), one round
        trip on a short-lived connection bounded by :data:`._pool.CLOCK_READ_TIMEOUT`."""
        limit = min(self.call_timeout or CLOCK_READ_TIMEOUT, CLOCK_READ_TIMEOUT)
        kwargs = dict(self._pool.kwargs) if isinstance(self._pool.kwargs, dict) else {}
        kwargs.pop("session", None)
        kwargs["call_timeout"] = limit
        kwargs["connect_timeout"] = 2  # libpq's least: a server away stalls the reading 2 s at most
        kwargs.setdefault("autocommit", True)
        conninfo = self._pool.conninfo if isinstance(self._pool.conninfo, str) else ""
        with translated(self.schema), BoundedConnection.connect(conninfo, **kwargs) as conn:
            row = conn.execute(self.q.STORE_NOW).fetchone()
        assert row is not None
        stamp: datetime = row[0]
        return stamp.astimezone(EPOCH.tzinfo)

    async def _ensure_schema(self) -> None:
        if self._schema_ok:
            return
        if self._schema_lock is None:
            self._schema_lock = asyncio.Lock()
        async with self._schema_lock:
            if self._schema_ok:  # another task set it while this one waited: 50 first callers read it once
                return  # type: ignore[unreachable]  # mypy keeps the narrowing across the await
            with translated(self.schema):
                async with self._connection() as conn:
                    found = await _schema_async.read_version(conn, self.schema)
            if needs_migration(found, self.schema, self.auto_migrate):
                await self._migrate(dry_run=False)
            self._schema_ok = True

    async def _fetch(
        self, query: bytes, params: Mapping[str, Any] | None = None, *,
        conn: psycopg.AsyncConnection[Any] | None = None, retry: bool = False,
    ) -> list[Row]:
        """Run one statement and answer its rows (on ``conn`` when given: the caller's transaction)."""
        await self._ensure_schema()
        if conn is not None:  # the caller's transaction (entering `translated` costs a generator: only here)
            check_styles(conn)
            with translated(self.schema):
                cur, text, args = _bound(self.q, conn, query, params)
                async with cur:
                    await cur.execute(text, args)
                    return await cur.fetchall() if _has_rows(cur) else []
        for attempt in (1, 2):
            try:
                pooled = await self._checkout()
            except psycopg.Error as exc:
                # No connection to be had (refused, connect_timeout, a full pool): trying again
                # at once would only wait as long again.
                raise translate(exc, self.schema) from origin(exc)
            try:
                if pooled.autocommit:
                    lean = self.lean.get(query)
                    if lean is not None:  # a short statement sent once per job: straight through libpq
                        dumped = _lean_wire.values(pooled, psycopg.AsyncCursor, lean[1], params)
                        if dumped is not None:
                            return await _lean_async.run(pooled, lean[0], dumped)
                    cur, text, args = _bound(self.q, pooled, query, params)
                    await cur.execute(text, args)
                    return await cur.fetchall() if _has_rows(cur) else []
                async with pooled:  # a caller's pool without autocommit: commit (or roll back) here
                    cur, text, args = _bound(self.q, pooled, query, params)
                    await cur.execute(text, args)
                    return await cur.fetchall() if _has_rows(cur) else []
            except psycopg.Error as exc:
                if isinstance(exc, READ_ONLY):
                    discard(pooled)  # a server that takes no writes: the next call connects again
                error = translate(exc, self.schema)
                if retry and attempt == 1 and isinstance(error, BackendUnavailable):  # lost mid-call
                    continue
                raise error from origin(exc)
            finally:
                await self._putconn(pooled)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _checkout(self) -> psycopg.AsyncConnection[Any]:
        """A pooled connection that survived its idle time (dead ones are closed and replaced)."""
        for _ in range(64):
            conn = await self._getconn()
            try:
                usable = await alive_async(conn)
            except BaseException:  # cancelled while settling what was pending: never hand it out
                discard(conn)
                await self._putconn(conn)
                raise
            if usable:
                if self._pooled is None:
                    self._pooled = getattr(conn, "pooled", None)
                if VETTED not in conn.__dict__:
                    try:
                        await vet_async(conn, own=isinstance(self._pool, AsyncPool))
                    except BaseException:
                        await self._putconn(conn)
                        raise
                return conn
            discard(conn)
            await self._putconn(conn)  # the pool discards a closed connection and opens a new one
        raise psycopg.OperationalError("every pooled connection was dead")

    async def _getconn(self) -> psycopg.AsyncConnection[Any]:
        pool = self._pool
        if isinstance(pool, AsyncPool):
            return await pool.getconn()
        conn: psycopg.AsyncConnection[Any] = await pool.getconn()
        return conn

    async def _putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        pool = self._pool
        if isinstance(pool, AsyncPool):
            pool.putconn(conn)
        else:
            await pool.putconn(conn)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """:meth:`_checkout` for a block, given back after it (committed first outside autocommit)."""
        conn = await self._checkout()
        try:
            if conn.autocommit:  # the driver's own pool: nothing to commit
                yield conn
            else:
                async with conn:  # a caller's pool without autocommit: commit (or roll back) here
                    yield conn
        except READ_ONLY:
            discard(conn)  # a server that takes no writes: the next call connects again
            raise
        finally:
            await self._putconn(conn)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction, errors translated."""
        await self._ensure_schema()
        with translated(self.schema):
            async with self._connection() as conn, at_read_committed_async(conn), conn.transaction():
                yield conn

    # -- the public extra: enqueue inside the caller's transaction (transactional_enqueue) --

    async def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, depends_on: Iterable[str | Job] | None = None,
        on_parent_failure: str = "cancel", connection: psycopg.AsyncConnection[Any] | Any | None = None,
    ) -> Job:
        """Store one job (E01, E02); ``connection=`` joins the caller's transaction: a psycopg
        ``AsyncConnection``, or an SQLAlchemy ``AsyncSession``/``AsyncConnection`` on psycopg
        (``postgresql+psycopg://``), whose driver connection is used."""
        if connection is None:
            return await super().enqueue(
                name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
                max_attempts=max_attempts, key=key, depends_on=depends_on, on_parent_failure=on_parent_failure,
            )
        return await self._enqueue_in(
            await driver_connection(connection), "connection", name, payload, queue=queue, priority=priority,
            run_at=run_at, delay=delay, max_attempts=max_attempts, key=key, depends_on=depends_on,
            on_parent_failure=on_parent_failure,
        )

    async def enqueue_many(
        self, specs: Iterable[Any], *, connection: psycopg.AsyncConnection[Any] | Any | None = None
    ) -> list[Job]:
        """Store a batch in one round trip (E05); ``connection=`` joins the caller's transaction."""
        handle = None if connection is None else await driver_connection(connection)
        return await self._enqueue_many_in(handle, "connection", specs)

    # -- schema ------------------------------------------------------------------------

    async def _migrate(self, *, dry_run: bool) -> Migration:
        # Never cut short by call_timeout: DDL on a large table takes what it takes.
        with translated(self.schema):
            async with self._connection() as conn:
                with bounded(conn, None):
                    run = _schema_async.plan if dry_run else _schema_async.migrate
                    before, statements = await run(conn, self.schema)
        return migration(before, statements, dry_run=dry_run)

    def __repr__(self) -> str:
        return f"AsyncPostgresDriver(schema={self.schema!r}, clock={self.clock!r})"


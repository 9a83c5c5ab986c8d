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

Schema. jobcore owns its schema (``jobcore`` by default, configurable): call
``driver.migrate()`` (or ``jobcore migrate``) at deploy time. A driver meeting a missing
or older schema raises ``JC_SCHEMA_OUTDATED`` on first use, unless built with
``auto_migrate=True`` (``?auto_migrate=true`` in the URL), which tests and demos use.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Literal, overload
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from jobcore import validate as v
from jobcore.clock import Clock, StoreClock, to_millis
from jobcore.door import IntrospectDoor
from jobcore.driver import Duration
from jobcore.errors import (
    BackendAuthFailed,
    BackendUnavailable,
    NotSupported,
    OptionInvalid,
    SchemaOutdated,
    UrlInvalid,
    redact,
    secrets_of,
)
from jobcore.records import Claimed, ClaimResult, ClaimToken, Job, JobState, Migration

from . import _schema
from ._errors import origin, route_pool_logging, translate, translated
from ._introspect import PostgresIntrospect, PostgresLeases
from ._notify import Listener, channel_for
from ._pool import (
    CLOCK_READ_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    POOLER_MODES,
    BoundedConnection,
    Pool,
    alive,
    bounded,
    connect_kwargs,
)
from ._rows import EPOCH, decode_stored, job_from_row, parse_id
from ._schedules import PostgresSchedules
from ._sql import Statements

__all__ = ["PostgresDriver", "make_pool"]

Row = tuple[Any, ...]
_MAX_HOLDER_RETRIES = 5
_MS = timedelta(milliseconds=1)
_FAILURE_CHECK = 0.1
"""Seconds between looks at a caller's pool's last failed attempt while waiting for a connection."""


def _token_row(token: ClaimToken) -> tuple[int, str, int] | None:
    """``(id, worker_id, claim_no)`` as the row holds them, or None for a token no row can match."""
    job_id, worker, claim_no = token.job_id, token.worker_id, v.token_claim_no(token)
    if claim_no is None:
        return None
    ident = parse_id(job_id) if isinstance(job_id, str) else None
    if ident is None or not isinstance(worker, str):
        return None
    return ident, worker, claim_no


def _fenced(tokens: Sequence[ClaimToken]) -> tuple[list[tuple[int, str, int]], list[list[int]]]:
    """The distinct tokens a row can match, as ``(id, worker_id, claim_no)`` items, and for
    each item the input positions holding that token (a token given twice answers twice)."""
    items: list[tuple[int, str, int]] = []
    where: list[list[int]] = []
    position: dict[tuple[int, str, int], int] = {}
    for index, token in enumerate(tokens):
        ident = _token_row(token)
        if ident is None:
            continue
        at = position.get(ident)
        if at is None:
            position[ident] = at = len(items)
            items.append(ident)
            where.append([])
        where[at].append(index)
    return items, where


_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK


def _has_rows(cur: psycopg.Cursor[Any]) -> bool:
    """Whether the statement answered rows (``cur.description`` would build its column list)."""
    result = cur.pgresult
    return result is not None and result.status == _TUPLES_OK


def _timeouts(statement_timeout: object, call_timeout: object) -> tuple[timedelta | None, timedelta | None]:
    """The two bounds, checked: positive finite durations, or None for none."""
    statement = None if statement_timeout is None else v.check_duration(
        statement_timeout, "statement_timeout", lo=_MS, positive=True
    )
    call = None if call_timeout is None else v.check_duration(call_timeout, "call_timeout", lo=_MS, positive=True)
    return statement, call


def _check_pooler(pooler: object) -> str:
    if not isinstance(pooler, str) or pooler not in POOLER_MODES:
        raise OptionInvalid(
            f"pooler={pooler!r:.40} is not one of {', '.join(POOLER_MODES)}",
            "pass pooler='transaction' behind PgBouncer or a cloud pooler, 'none' for a direct server, "
            "or leave the default 'auto' (detected on each new connection)",
        )
    return pooler


def check_listen_url(url: object) -> str | None:
    """``url`` (the direct server wake-ups LISTEN on) checked to be a ``postgresql://`` URL, or None."""
    if url is None:
        return None
    fix = "pass the URL of the PostgreSQL server itself (not the pooler), e.g. postgresql://user@db-host/app"
    if not isinstance(url, str):
        raise UrlInvalid(f"listen_url must be a postgresql:// URL, got {type(url).__name__}", fix)
    shown = redact(repr(url), secrets_of(url))[:80]
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise UrlInvalid(f"listen_url {shown} is not a valid URL ({exc})", fix) from None
    if scheme not in ("postgresql", "postgres"):
        raise UrlInvalid(f"listen_url {shown} is not a PostgreSQL URL", fix)
    return url


def make_pool(
    conninfo: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 10.0,
    statement_timeout: Duration | None = None, call_timeout: Duration | None = DEFAULT_CALL_TIMEOUT,
    pooler: str = "auto", **kwargs: Any,
) -> ConnectionPool[Any]:
    """A ``psycopg_pool`` pool set up the way the driver wants it (autocommit, UTC, generic
    plans), of :class:`~._pool.BoundedConnection`: no statement waits on the server longer
    than ``call_timeout`` (past it the connection is discarded and the call answers
    ``JC_DB_TIMEOUT``; ``None`` for no bound).

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
    statement, call = _timeouts(statement_timeout, call_timeout)
    least = v.check_int(min_size, "min_size", 0, 1000)
    most = v.check_int(max_size, "max_size", max(1, least), 1000)
    connect = connect_kwargs(
        conninfo, statement_timeout=statement, call_timeout=call, pooler=_check_pooler(pooler), **kwargs
    )
    route_pool_logging()
    # A class of its own, so this pool's last failed attempt is its own (BoundedConnection.last_failure).
    connection_class = type("JobcoreConnection", (BoundedConnection,), {"last_failure": None})
    return ConnectionPool(
        conninfo, min_size=least, max_size=most, timeout=timeout, kwargs=connect, open=True, name="jobcore",
        connection_class=connection_class,
    )


def _inserted(id_: int, new: v.StoreTimedJob, due: tuple[datetime, JobState], now: datetime) -> Job:
    """The job a keyless insert stored: what was sent (checked, UTC, to the millisecond),
    its due time and state as the statement decided them on ``now`` (the store's), and its
    id, with no row to read back."""
    return Job(
        id=str(id_), name=new.name, queue=new.queue, payload=decode_stored(new.payload), state=due[1],
        priority=new.priority, max_attempts=new.max_attempts, run_at=due[0], created_at=now,
    )


def _built(rows: Sequence[Row], news: Sequence[v.StoreTimedJob], now: datetime) -> list[Job]:
    """The jobs of a keyless insert, from the ids it answered (in input order) and the store's ``now``."""
    jobs = []
    shape: tuple[datetime | None, timedelta] | None = None
    due: tuple[datetime, JobState] = (now, JobState.READY)
    for row, new in zip(rows, news, strict=True):
        if shape is None or new.run_at is not shape[0] or new.delay != shape[1]:  # a batch mostly shares one
            shape, due = (new.run_at, new.delay), new.due(now)
        jobs.append(_inserted(row[0], new, due, now))
    return jobs


def _store_now(epoch_ms: int) -> datetime:
    """The store's now as a statement answered it (epoch milliseconds)."""
    return EPOCH + timedelta(milliseconds=epoch_ms)


def _enqueue_items(news: Sequence[v.StoreTimedJob]) -> str:
    """The ``items`` parameter of the enqueue statements: one JSON array of rows (see ``_sql.ENQUEUE``)."""
    rows = []
    stamp: datetime | None = None
    text: str | None = None
    for n in news:
        if n.run_at is not stamp:  # a batch mostly shares one due time: write it once
            stamp, text = n.run_at, None if n.run_at is None else n.run_at.isoformat()
        rows.append([n.name, n.queue, n.payload, n.delay // _MS, n.priority, text, n.max_attempts, n.key])
    return json.dumps(rows)


_URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "schema": str,
    "auto_migrate": lambda s: s.lower() in ("1", "true", "yes", "on"),
    "statement_timeout": lambda s: float(s) / 1000,  # milliseconds, as PostgreSQL writes it
    "call_timeout": lambda s: float(s) / 1000,  # milliseconds, like statement_timeout
    "pool_min": int,
    "pool_max": int,
    "default_max_attempts": int,
    "pooler": str,
    "listen_url": str,
}


class PostgresDriver:
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

    _CAPABILITIES = frozenset({"shared_store", "transactional_enqueue", "ack_landed_only", "deferred_start"})

    def __init__(
        self, dsn_or_pool: str | ConnectionPool[Any], *, schema: str = "jobcore", clock: Clock | None = None,
        default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS, auto_migrate: bool = False,
        statement_timeout: Duration | None = None, call_timeout: Duration | None = DEFAULT_CALL_TIMEOUT,
        pool_min: int = 1, pool_max: int = 10, pooler: str = "auto", listen_url: str | None = None,
    ) -> None:
        self.schema = v.check_name(schema, "schema")
        if len(self.schema.encode()) > 63:
            raise OptionInvalid(f"schema name {schema!r:.80} is longer than 63 bytes", "use a shorter schema name")
        self._injected = clock
        """The clock standing in for the store's, or None: the statements read the store's."""
        self.clock: Clock = clock if clock is not None else StoreClock(self._read_store_time)
        self._default_max_attempts = v.check_int(default_max_attempts, "default_max_attempts", 1, v.MAX_ATTEMPTS)
        self.auto_migrate = bool(auto_migrate)
        statement, call = _timeouts(statement_timeout, call_timeout)
        self.call_timeout = None if call is None else call.total_seconds()
        self.pooler = _check_pooler(pooler)
        self.listen_url = check_listen_url(listen_url)
        self._pooled: bool | None = {"auto": None, "transaction": True, "none": False}[self.pooler]
        self._pool: ConnectionPool[Any] | Pool
        if isinstance(dsn_or_pool, str):
            least = v.check_int(pool_min, "pool_min", 0, 1000)
            self._pool = Pool(
                dsn_or_pool, kwargs=connect_kwargs(
                    dsn_or_pool, statement_timeout=statement, call_timeout=call, pooler=self.pooler,
                ),
                min_size=least, max_size=v.check_int(pool_max, "pool_max", max(1, least), 1000),
                timeout=self.call_timeout or DEFAULT_CALL_TIMEOUT,
            )
            self._owns_pool = True
        elif isinstance(dsn_or_pool, ConnectionPool):
            self._pool = dsn_or_pool
            self._owns_pool = False
        else:
            raise OptionInvalid(
                f"dsn_or_pool must be a connection string or a ConnectionPool, got {type(dsn_or_pool).__name__}",
                "pass 'postgresql://user@host/db' or a psycopg_pool.ConnectionPool",
            )
        self.q = Statements(self.schema)
        self.channel = channel_for(self.schema)
        self._schema_ok = False
        self._schema_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._closed = False
        self.leases = PostgresLeases(self)
        self.introspect = IntrospectDoor(PostgresIntrospect(self))
        self.schedules = PostgresSchedules(self)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresDriver:
        """Build from ``postgresql://user:pass@host:port/db?schema=...``.

        jobcore's own URL options (``schema``, ``auto_migrate``, ``statement_timeout`` and
        ``call_timeout`` in ms, ``pool_min``, ``pool_max``, ``default_max_attempts``) are taken
        out; the rest of the URL (``connect_timeout`` in seconds among it) goes to libpq
        unchanged. ``pooler`` and ``listen_url`` (URL-encoded) may be given there too.
        Keyword ``options`` win over the URL.
        """
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # e.g. an unbalanced "[" in the host
            raise UrlInvalid(f"{repr(redact(url))[:80]} is not a valid URL ({redact(exc)})") from None
        if parts.scheme not in ("postgresql", "postgres"):
            raise UrlInvalid(f"{parts.scheme}:// is not a PostgreSQL URL", "use postgresql://user@host/db")
        taken: dict[str, Any] = {}
        rest = []
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name in _URL_OPTIONS:
                try:
                    taken[name] = _URL_OPTIONS[name](value)
                except ValueError:
                    raise UrlInvalid(f"URL option {name}={redact(value)!r:.40} is not valid") from None
            else:
                rest.append((name, value))
        conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
        return cls(conninfo, **{**taken, **options})

    @property
    def url(self) -> str:
        """A ``postgresql://`` URL reaching this driver's store (its schema included), for
        ``jobcore.connect`` in another process (the CLI, a worker)."""
        conninfo = self._pool.conninfo if isinstance(self._pool.conninfo, str) else ""
        if conninfo.startswith(("postgresql://", "postgres://")):
            parts = urlsplit(conninfo)
            query = [(k, val) for k, val in parse_qsl(parts.query, keep_blank_values=True) if k not in self._own]
            return urlunsplit(parts._replace(query=urlencode([*query, *self._own.items()])))
        params = {k: val for k, val in conninfo_to_dict(conninfo).items() if val is not None}
        user = quote(str(params.pop("user", "")), safe="")
        password = quote(str(params.pop("password", "")), safe="")
        host = str(params.pop("host", ""))
        port = params.pop("port", None)
        dbname = quote(str(params.pop("dbname", "")), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        netloc = f"{auth}{host}{f':{port}' if port else ''}"
        options = urlencode([*((k, str(val)) for k, val in params.items()), *self._own.items()])
        return f"postgresql://{netloc}/{dbname}?{options}"

    @property
    def _own(self) -> dict[str, str]:
        """The jobcore options :attr:`url` carries: the schema, and how to reach the server past a pooler."""
        own = {"schema": self.schema}
        if self.pooler != "auto":
            own["pooler"] = self.pooler
        if self.listen_url is not None:
            own["listen_url"] = self.listen_url
        return own

    @property
    def capabilities(self) -> frozenset[str]:
        """What this driver offers; ``notify`` unless a transaction pooler is in the way and
        no ``listen_url`` was given (finding that out may take a connection)."""
        if self.listen_url is not None or not self._behind_pooler():
            return self._CAPABILITIES | {"notify"}
        return self._CAPABILITIES

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
            if found is None or found.version < _schema.LATEST:
                if not self.auto_migrate:
                    state = "is not installed" if found is None else f"is at version {found.version}"
                    raise SchemaOutdated(
                        f"jobcore's schema {self.schema!r} {state}; this jobcore needs version {_schema.LATEST}"
                    )
                self._migrate(dry_run=False)
            elif found.compatible_from > _schema.LATEST:
                raise SchemaOutdated(
                    f"schema {self.schema!r} is at version {found.version}, newer than this jobcore's"
                    f" {_schema.LATEST}, and needs a jobcore of schema {found.compatible_from} or later",
                    "upgrade jobcore in this process",
                )
            self._schema_ok = True

    def _fetch(
        self, query: bytes, params: Mapping[str, Any] | None = None, *,
        conn: psycopg.Connection[Any] | None = None, retry: bool = False,
    ) -> list[Row]:
        """Run one statement and answer its rows (on ``conn`` when given: the caller's transaction)."""
        self._ensure_schema()
        with translated(self.schema):
            if conn is not None:
                with conn.cursor() as cur:
                    cur.execute(query, params)
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
                    cur = pooled.execute(query, params)
                    return cur.fetchall() if _has_rows(cur) else []
                with pooled:  # a caller's pool without autocommit: commit (or roll back) here
                    cur = pooled.execute(query, params)
                    return cur.fetchall() if _has_rows(cur) else []
            except psycopg.Error as exc:
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
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction, errors translated."""
        self._ensure_schema()
        with translated(self.schema), self._connection() as conn, conn.transaction():
            yield conn

    def _check_conn(self, connection: object) -> psycopg.Connection[Any] | None:
        if connection is None or isinstance(connection, psycopg.Connection):
            return connection
        raise OptionInvalid(
            f"connection must be a psycopg Connection, got {type(connection).__name__}",
            "pass the psycopg.Connection whose transaction the job should join",
        )

    # -- enqueue -----------------------------------------------------------------------

    def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, connection: psycopg.Connection[Any] | None = None,
    ) -> Job:
        """Store one job (E01, E02); ``connection=`` joins the caller's transaction."""
        conn = self._check_conn(connection)
        new = v.new_job(
            name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
            max_attempts=max_attempts, key=key, now=None, default_max_attempts=self._default_max_attempts,
        )
        return self._insert([new], conn)[0]

    def enqueue_many(self, specs: Iterable[Any], *, connection: psycopg.Connection[Any] | None = None) -> list[Job]:
        """Store a batch in one round trip (E05); ``connection=`` joins the caller's transaction."""
        conn = self._check_conn(connection)
        news = v.new_jobs(specs, now=None, default_max_attempts=self._default_max_attempts)
        return self._insert(news, conn) if news else []

    def _insert(self, news: Sequence[v.StoreTimedJob], conn: psycopg.Connection[Any] | None) -> list[Job]:
        """Insert checked jobs; the store decides their times (F01) and answers its now, from
        which the keyless forms build each job as the statement stored it."""
        now = self._now()
        if len(news) == 1 and news[0].key is None:  # the common case: one statement of scalars
            new = news[0]
            rows = self._fetch(self.q.ENQUEUE_ONE, {
                "name": new.name, "queue": new.queue, "payload": new.payload, "priority": new.priority,
                "run_at": new.run_at, "delay_ms": new.delay // _MS, "max_attempts": new.max_attempts, "now": now,
                "channel": self.channel,
            }, conn=conn)
            stamp = _store_now(rows[0][2])
            return [_inserted(rows[0][0], new, new.due(stamp), stamp)]
        if all(n.key is None for n in news):  # no key, no conflict: the plain batch insert
            first = news[0]
            shared = (first.name, first.queue, first.priority, first.run_at, first.delay, first.max_attempts)
            if all((n.name, n.queue, n.priority, n.run_at, n.delay, n.max_attempts) == shared for n in news):
                # Every item's text is canonical JSON, so joining them makes the JSON array.
                rows = self._fetch(self.q.ENQUEUE_UNIFORM, {
                    "payloads": f"[{','.join([n.payload for n in news])}]", "name": first.name,
                    "queue": first.queue, "priority": first.priority, "run_at": first.run_at,
                    "delay_ms": first.delay // _MS, "max_attempts": first.max_attempts, "now": now,
                    "channel": self.channel,
                }, conn=conn)
            else:
                rows = self._fetch(self.q.ENQUEUE_MANY, {
                    "items": _enqueue_items(news), "now": now, "channel": self.channel,
                }, conn=conn)
            return _built(rows, news, _store_now(rows[0][1]))
        answers: dict[int, Job] = {}
        pending = list(range(len(news)))
        for _ in range(_MAX_HOLDER_RETRIES):
            batch = [news[i] for i in pending]
            rows = self._fetch(
                self.q.ENQUEUE, {"items": _enqueue_items(batch), "now": now, "channel": self.channel}, conn=conn
            )
            for row in rows:
                index = pending[row[0] - 1]
                answers.setdefault(index, job_from_row(row[2:], duplicate=row[1]))
            missing = [i for i in pending if i not in answers]
            # A key held by a row another transaction committed after this statement's
            # snapshot: look the holder up with a fresh snapshot; if it already finished,
            # the key is free and the next round inserts.
            for index in missing:
                found = self._fetch(self.q.KEY_HOLDER, {"name": news[index].name, "key": news[index].key}, conn=conn)
                if found:
                    answers[index] = job_from_row(found[0], duplicate=True)
            pending = [i for i in missing if i not in answers]
            if not pending:
                return [answers[i] for i in range(len(news))]
        raise BackendUnavailable(
            "an idempotency key kept changing hands while enqueueing", "retry the enqueue"
        )

    # -- claim and settle ----------------------------------------------------------------

    def claim(
        self, queues: Sequence[str], *, worker_id: str, limit: int = 1, lease: Duration,
        drop_exhausted: Iterable[str] = (), start: bool = True,
    ) -> ClaimResult:
        names, worker, size, span, drop = v.check_claim(queues, worker_id, limit, lease, drop_exhausted)
        begin = v.check_bool(start, "start")
        rows = self._fetch(self.q.CLAIM, {
            "queues": list(names), "worker": worker, "limit": size, "now": self._now(), "lease_ms": span // _MS,
            "drop": sorted(drop), "start": begin,
        }, retry=True)
        claimed: list[Claimed] = []
        buried: list[Job] = []
        for row in rows:
            job = job_from_row(row[2:])
            if row[0] == 0:
                claimed.append(Claimed.positional(job, ClaimToken.positional(job.id, worker, job.claim_no)))
            else:
                buried.append(job)
        return ClaimResult(claimed=tuple(claimed), buried=tuple(buried))

    def _fence(self, token: ClaimToken) -> dict[str, Any] | None:
        ident = _token_row(token)
        return None if ident is None else {"id": ident[0], "worker": ident[1], "claim_no": ident[2]}

    def heartbeat(self, token: ClaimToken, lease: Duration) -> bool:
        v.check_token(token)
        span = v.check_lease(lease)
        fence = self._fence(token)
        if fence is None:
            return False
        rows = self._fetch(self.q.HEARTBEAT, {**fence, "now": self._now(), "lease_ms": span // _MS}, retry=True)
        return bool(rows)

    def start(self, tokens: Iterable[ClaimToken]) -> list[bool]:
        """Start held attempts (F04): see :class:`~jobcore.driver.DeferredStart`."""
        checked = v.check_tokens(tokens)
        answers = [False] * len(checked)
        items, where = _fenced(checked)
        if items:
            # Retried like heartbeat: starting twice is harmless, and a lost reply's retry answers again.
            for (ordinal,) in self._fetch(self.q.START, {"items": json.dumps(items), "now": self._now()}, retry=True):
                for index in where[ordinal - 1]:
                    answers[index] = True
        return answers

    def ack(self, token: ClaimToken, result: Any = None) -> Job | None:
        return self.ack_many([(token, result)])[0]

    @overload
    def ack_many(
        self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[False] = ...
    ) -> list[Job | None]: ...

    @overload
    def ack_many(self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[True]) -> list[bool]: ...

    def ack_many(
        self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: bool = False
    ) -> list[Job | None] | list[bool]:
        lean = v.check_bool(landed_only, "landed_only")
        checked = [
            (v.check_token(token), None if result is None else v.encode_json(result, "result"))
            for token, result in v.check_pairs(items)
        ]
        answers: list[Any] = [False if lean else None] * len(checked)
        rows: list[list[Any]] = []  # [id, worker_id, claim_no, result] per distinct live token
        where: list[int] = []
        seen: set[tuple[int, str, int]] = set()
        for index, (token, text) in enumerate(checked):
            ident = _token_row(token)
            if ident is None:
                continue
            if ident in seen:  # the same token twice: the first lands, the second finds it settled
                continue
            seen.add(ident)
            rows.append([ident[0], ident[1], ident[2], text])
            where.append(index)
        if not rows:
            return answers
        params = {"items": json.dumps(rows), "now": self._now()}
        if lean:
            for (ordinal,) in self._fetch(self.q.ACK_MANY_LANDED, params):
                answers[where[ordinal - 1]] = True
            return answers
        for row in self._fetch(self.q.ACK_MANY, params):
            answers[where[row[0] - 1]] = job_from_row(row[1:])
        return answers

    def nack(
        self, token: ClaimToken, error: BaseException | str, *, retry_at: datetime | None = None,
        dead_letter: bool = True, fail: bool = False, counts_as_attempt: bool = True, park: bool = False,
    ) -> Job | None:
        v.check_token(token)
        type_name, message = v.error_entry(error)
        due = None if retry_at is None else v.check_time(retry_at, "retry_at")
        v.check_nack_flags(dead_letter=dead_letter, fail=fail, counts_as_attempt=counts_as_attempt, park=park)
        fence = self._fence(token)
        if fence is None:
            return None
        rows = self._fetch(self.q.NACK, {
            **fence, "fail": fail, "park": park, "give_back": 0 if counts_as_attempt else 1,
            "dead_letter": dead_letter, "type": type_name, "message": message, "now": self._now(),
            "retry_at": due, "channel": self.channel,
        })
        return job_from_row(rows[0]) if rows else None

    # -- wake-ups, schema, lifecycle -------------------------------------------------------

    def subscribe(self, queues: Sequence[str], callback: Callable[[str], None]) -> Listener:
        names = v.check_claim(queues, "subscriber", 1, 1, ())[0]
        if not callable(callback):
            raise OptionInvalid("callback must be callable", "pass a function taking the queue name")
        pool_kwargs = self._pool.kwargs if isinstance(self._pool.kwargs, dict) else {}
        conninfo = self._pool.conninfo if isinstance(self._pool.conninfo, str) else ""
        kwargs = {k: val for k, val in pool_kwargs.items() if k not in ("autocommit", "call_timeout", "session")}
        if self.listen_url is not None:
            conninfo = self.listen_url
        elif self._behind_pooler():
            raise NotSupported(
                "wake-ups (LISTEN) cannot go through a transaction pooler, and no listen_url was given",
                "pass listen_url=postgresql://... (the server itself) for wake-ups, or let workers poll",
            )
        bound = pool_kwargs.get("call_timeout", self.call_timeout)
        listener = Listener(conninfo, kwargs, self.channel, names, callback, call_timeout=bound)
        if listener.refused is not None:
            listener.close()
            raise OptionInvalid(
                listener.refused, "give listen_url the PostgreSQL server itself (not the pooler), or let workers poll",
            )
        self._listeners.append(listener)
        return listener

    def migrate(self, *, dry_run: bool = False) -> Migration:
        """Install or upgrade jobcore's schema; idempotent, safe to run from several processes.

        ``dry_run=True`` only reads: the answer's ``statements`` are the SQL a real run
        would execute, complete, for a DBA to apply (``jobcore migrate --sql``).
        """
        done = self._migrate(dry_run=dry_run)
        if done.applied:  # a newer store was left alone: the first call checks it can be used
            self._schema_ok = True
        return done

    def _migrate(self, *, dry_run: bool) -> Migration:
        # Never cut short by call_timeout: DDL on a large table takes what it takes.
        with translated(self.schema), self._connection() as conn, bounded(conn, None):
            run = _schema.plan if dry_run else _schema.migrate
            before, statements = run(conn, self.schema)
        if before is not None and before > _schema.LATEST:
            return Migration(before=before, after=before, latest=_schema.LATEST, applied=False, language="sql")
        after = _schema.LATEST if statements else before
        return Migration(
            before=before, after=after, latest=_schema.LATEST, statements=tuple(statements), applied=not dry_run,
            language="sql",
        )

    def close(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.close()
        if self._owns_pool and not self._closed:
            self._pool.close()
        self._closed = True

    def __repr__(self) -> str:
        return f"PostgresDriver(schema={self.schema!r}, clock={self.clock!r})"



"""The async driver's I/O plumbing: bounded ``AsyncConnection`` and the small pool it makes (F06, F07).

The async twins of :mod:`._pool`'s :class:`~._pool.BoundedConnection` and
:class:`~._pool.Pool`, deciding everything the same way (the :class:`~._pool.Session`
setup and pooler detection, :func:`~._pool.probe` at checkout, :class:`~._pool.CallTimeout`
past ``call_timeout``, :class:`~._pool.ConnectFailed` naming the target) and differing
only in how they wait: on the event loop, never blocking it.

:class:`AsyncBoundedConnection` bounds every wait for the server by ``call_timeout`` (the
wait is psycopg's own ``wait_async``, which is an asyncio timeout): past it the connection
is closed and :class:`~._pool.CallTimeout` raised (``JC_DB_TIMEOUT``). A wait interrupted
by a cancelled task closes the connection too: a reply may still be on its way, so the
connection is never reused mid-statement. A write is one statement in autocommit (or
one transaction), so a cancelled ``await`` leaves either the whole write or none of it,
and the server rolls back a transaction whose connection went away.

:class:`AsyncPool` opens each connection in the task that needs one (no background
task, no reconnect loop: after an outage the first call once the server accepts
connections gets one at once), at most ``max_size`` at a time, hands idle ones out
last-used first and closes those idle longer than ``max_idle`` beyond ``min_size``. It
belongs to the event loop that first uses it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import psycopg
from psycopg import waiting
from psycopg.abc import PQGen
from psycopg_pool import PoolClosed, PoolTimeout

from ._pool import (
    _IDLE,
    _WAIT_INTERVAL,
    DEFAULT_CALL_TIMEOUT,
    RV,
    VETTED,
    CallTimeout,
    ConnectFailed,
    Session,
    SlotHold,
    check_styles,
    isolation_checked,
    isolation_known,
    probe,
)
from ._sql import DEFAULT_ISOLATION

__all__ = [
    "AsyncBoundedConnection", "AsyncPool", "alive_async", "at_read_committed_async", "check_isolation_async", "discard",
    "vet_async",
]


def discard(conn: psycopg.AsyncConnection[Any]) -> None:
    """Close ``conn`` at once, without waiting for anything (its state is unknown)."""
    conn._closed = True  # what AsyncConnection.close() does, with no await on the way
    conn.pgconn.finish()


class AsyncBoundedConnection(psycopg.AsyncConnection[Any]):
    """An async connection whose every wait for the server is bounded by :attr:`call_timeout`.

    ``await AsyncBoundedConnection.connect(conninfo, call_timeout=10.0, session=..., **kwargs)``
    takes the bound (seconds, ``None`` for none) and the :class:`~._pool.Session` to set up
    beside psycopg's own arguments.
    """

    call_timeout: float | None = DEFAULT_CALL_TIMEOUT
    pooled: bool | None = None
    """Whether a transaction pooler sits between this connection and the server (None: no
    :class:`~._pool.Session` set it up)."""
    last_failure: ClassVar[ConnectFailed | None] = None

    @classmethod
    async def connect(  # type: ignore[override]  # more keywords than psycopg's
        cls, conninfo: str = "", *, call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
        session: Session | None = None, **kwargs: Any,
    ) -> AsyncBoundedConnection:
        """Connect as psycopg does; a failure raises :class:`~._pool.ConnectFailed` naming the target."""
        try:
            conn = await super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            failed = ConnectFailed.wrap(exc, conninfo, kwargs)
            cls.last_failure = failed
            raise failed from exc
        cls.last_failure = None
        conn.call_timeout = call_timeout
        if session is not None:
            try:
                conn.pooled = await session.apply_async(conn)
            except BaseException:
                discard(conn)
                raise
        return conn

    async def wait(self, gen: PQGen[RV], interval: float = _WAIT_INTERVAL, timeout: float | None = None) -> RV:
        if timeout is not None:  # the caller's own deadline (notifies()) stands
            return await super().wait(gen, interval, timeout)
        bound = self.call_timeout
        try:
            return await waiting.wait_async(gen, self.pgconn.socket, interval=interval, timeout=bound)
        except psycopg.errors._WaitTimeout as exc:
            # The reply may still arrive, or never: the connection cannot be trusted again.
            discard(self)
            error = CallTimeout(f"no answer from the database within call_timeout={bound:g}s")
            error.bound = bound or 0.0
            raise error from exc
        except BaseException:
            # Cancelled (or interrupted) mid-statement: the statement may still complete on
            # the server, and its reply would be read by the next user. Never reuse it.
            if not self.closed:
                discard(self)
            raise


async def check_isolation_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`~._pool.check_isolation` on an async connection."""
    cur = await conn.execute(DEFAULT_ISOLATION, prepare=False)
    row = await cur.fetchone()
    if not conn.autocommit:  # a caller's pool without autocommit: end the transaction the question opened
        await conn.rollback()
    isolation_checked(conn, str(row[0]) if row else "")


async def vet_async(conn: psycopg.AsyncConnection[Any], *, own: bool) -> None:
    """:func:`~._pool.vet` on an async connection."""
    check_styles(conn)
    if not isolation_known(conn):
        await check_isolation_async(conn)
    if own:
        conn.__dict__[VETTED] = True


@contextlib.asynccontextmanager
async def at_read_committed_async(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """:func:`~._pool.at_read_committed` on an async connection."""
    level = conn.isolation_level
    if level is None or level == psycopg.IsolationLevel.READ_COMMITTED:
        yield
        return
    await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)
    try:
        yield
    finally:
        await conn.set_isolation_level(level)


async def alive_async(conn: psycopg.AsyncConnection[Any]) -> bool:
    """:func:`~._pool.alive` for an async connection (no round trip unless something is pending)."""
    state = probe(conn)
    if state is None:
        try:
            await conn.execute("")  # anything else pending (a notice): settle it with one empty query
        except (psycopg.Error, OSError, ValueError):
            return False
        return True
    return state


class AsyncPool:
    """At most ``max_size`` :class:`AsyncBoundedConnection`, opened on demand (see the module docstring).

    Attributes:
        conninfo: What every connection connects to.
        kwargs: The keywords every connection is opened with (see :func:`~._pool.connect_kwargs`).
        max_size: Connections open at once, idle or in use, at most.
    """

    def __init__(
        self, conninfo: str, *, kwargs: dict[str, Any], min_size: int = 1, max_size: int = 10,
        timeout: float = DEFAULT_CALL_TIMEOUT, max_idle: float = 600.0,
    ) -> None:
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: list[tuple[psycopg.AsyncConnection[Any], float]] = []  # last used at the end
        self._size = 0  # open, or being opened by a caller
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        self._hold = SlotHold()

    async def getconn(self) -> psycopg.AsyncConnection[Any]:
        """An idle connection (the last used), else a new one when fewer than ``max_size``
        are open, else the first one given back within ``timeout`` (``PoolTimeout`` then).

        The idle one may have died meanwhile: the caller checks it with :func:`alive_async`.
        """
        deadline: float | None = None
        while True:
            if self._closed:
                raise PoolClosed("the driver's connection pool is closed")
            if self._idle:
                return self._idle.pop()[0]
            if self._size < self.max_size:
                self._hold.check()
                self._size += 1
                break
            if deadline is None:
                deadline = time.monotonic() + self.timeout
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolTimeout(f"all {self.max_size} connections of the pool stayed in use for {self.timeout:g}s")
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11; not before
                pass
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # the turn this waiter was given goes to the next one
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        try:
            conn: psycopg.AsyncConnection[Any] = await AsyncBoundedConnection.connect(self.conninfo, **self.kwargs)
        except BaseException as exc:
            self._hold.note(exc)
            self._forget()
            raise
        self._hold.note(None)
        return conn

    def putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Take back a connection from :meth:`getconn`; a closed one, or one left inside a
        transaction (a task cancelled within it), is closed and dropped."""
        if conn.closed or conn.info.transaction_status != _IDLE:
            if not conn.closed:
                discard(conn)  # the server rolls the transaction back
            self._forget()
            return
        if self._closed:
            discard(conn)
            self._size -= 1
            return
        now = time.monotonic()
        self._idle.append((conn, now))
        while len(self._idle) > self.min_size and self._idle[0][1] < now - self.max_idle:
            discard(self._idle.pop(0)[0])
            self._size -= 1
        self._wake()

    def _forget(self) -> None:
        """One connection fewer is open: a waiter may open one."""
        self._size -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close the idle connections; those in use close when given back. Idempotent."""
        self._closed = True
        idle, self._idle = self._idle, []
        self._size -= len(idle)
        for conn, _ in idle:
            await conn.close()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def __repr__(self) -> str:
        return f"AsyncPool(max_size={self.max_size}, open={self._size}, idle={len(self._idle)})"

"""LISTEN/NOTIFY wake-ups for the async driver: one task per subscription, on the subscriber's loop.

The async twin of :class:`._notify.Listener`, with the same behaviour: a dedicated
autocommit connection (an :class:`~._apool.AsyncBoundedConnection` set up by a bare
:class:`~._pool.Session`, so a pooled one is detected and refused), ``callback(queue)``
for the queues given (called on the loop, so it must not block), reconnection after
0.1 s doubling up to 1 s while the server stays away, every queue called once after a
reconnect (wake-ups sent meanwhile were lost), and an empty query after
:data:`._notify.PROBE_AFTER` seconds of silence, bounded by ``call_timeout`` (F07), to
find a connection that died silently. Nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg import sql

from jobcore.errors import redact

from ._apool import AsyncBoundedConnection, discard
from ._notify import _RECONNECT_CAP, _RECONNECT_FIRST, EVERY, PROBE_AFTER, WaiterBook
from ._pool import LISTENER_SETTINGS, Session
from ._sql import LISTEN, render

__all__ = ["AsyncFinishHub", "AsyncListener"]

log = logging.getLogger("jobcore.drivers.postgres")


class AsyncListener:
    """A running subscription of the async driver: ``close()`` (sync) stops its task,
    ``await aclose()`` stops it and waits until its connection is closed. Both idempotent."""

    def __init__(
        self, conninfo: str, kwargs: dict[str, Any], channel: str, queues: Iterable[str],
        callback: Callable[[str], None], *, call_timeout: float | None,
    ) -> None:
        self._conninfo, self._kwargs = conninfo, {**kwargs, "autocommit": True, "call_timeout": call_timeout}
        self._channel = channel
        self._queues = frozenset(queues)
        self._callback = callback
        self._ready = asyncio.Event()
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self.refused: str | None = None
        """Why this listener stopped for good (its connection goes through a transaction pooler), or None."""

    @classmethod
    async def start(
        cls, conninfo: str, kwargs: dict[str, Any], channel: str, queues: Iterable[str],
        callback: Callable[[str], None], *, call_timeout: float | None,
    ) -> AsyncListener:
        """A listener whose LISTEN is in place (when the server answers within 10 s)."""
        listener = cls(conninfo, kwargs, channel, queues, callback, call_timeout=call_timeout)
        listener._task = asyncio.get_running_loop().create_task(listener._run(), name=f"jobcore-listen-{channel}")
        with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError itself from Python 3.11; not before
            await asyncio.wait_for(listener._ready.wait(), 10)
        return listener

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await AsyncBoundedConnection.connect(self._conninfo, session=Session(LISTENER_SETTINGS), **self._kwargs)
        if conn.pooled:
            await conn.close()
            self.refused = "the wake-up connection goes through a transaction pooler, where LISTEN cannot work"
            self._stopped = True
            raise psycopg.OperationalError(self.refused)
        try:
            await conn.execute(render(LISTEN, channel=sql.Identifier(self._channel)))
        except BaseException:
            discard(conn)
            raise
        return conn

    def _deliver(self, queue: str) -> None:
        if queue in self._queues:
            try:
                self._callback(queue)
            except Exception:
                log.exception("jobcore wake-up callback failed for queue %r", queue)

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Deliver what ``conn`` hears until stopped; raises when the connection fails."""
        while not self._stopped:
            heard = False
            async for note in conn.notifies(timeout=PROBE_AFTER):
                heard = True
                self._deliver(note.payload)
            if not heard:
                await conn.execute("")  # answers at once on a live connection; bounded by call_timeout

    async def _run(self) -> None:
        delay = _RECONNECT_FIRST
        lost = False
        conn: psycopg.AsyncConnection[Any] | None = None
        while not self._stopped:
            try:
                conn = await self._connect()
                self._ready.set()
                delay = _RECONNECT_FIRST
                if lost:  # wake-ups may have been missed while we were away
                    for queue in sorted(self._queues):
                        self._deliver(queue)
                await self._listen(conn)
            except psycopg.Error as exc:
                if self.stopped:
                    self._ready.set()  # refused: subscribe() reads why at once
                    break
                if conn is not None:  # once per lost connection, not per failed reconnect
                    log.warning("jobcore listener lost its connection (%s); reconnecting", redact(exc))
                lost = True
                self._ready.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RECONNECT_CAP)
            finally:
                if conn is not None:
                    discard(conn)
                    conn = None

    @property
    def stopped(self) -> bool:
        """Whether :meth:`close` was called or the listener was refused."""
        return self._stopped

    def close(self) -> None:
        """Stop listening: the task is cancelled and closes its connection as it ends."""
        self._stopped = True
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # the loop is closed already: nothing is running
                task.get_loop().call_soon_threadsafe(task.cancel)

    async def aclose(self) -> None:
        """Stop listening and wait for the task (and its connection) to end."""
        self.close()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), 5)


class AsyncFinishHub(WaiterBook, AsyncListener):
    """The async driver's one LISTEN on the finish channel, shared by every ``wait`` (A02):
    :class:`._notify.FinishHub` as a task on the driver's loop (wake-ups run on that loop)."""

    def __init__(
        self, conninfo: str, kwargs: dict[str, Any], channel: str, queues: Iterable[str],
        callback: Callable[[str], None], *, call_timeout: float | None,
    ) -> None:
        self._open_book()
        super().__init__(conninfo, kwargs, channel, queues, callback, call_timeout=call_timeout)

    @classmethod
    async def open(cls, conninfo: str, kwargs: dict[str, Any], channel: str, *, call_timeout: float | None) -> Any:
        """A hub whose LISTEN is in place (when the server answers within 10 s)."""
        return await cls.start(conninfo, kwargs, channel, (EVERY,), lambda _: None, call_timeout=call_timeout)


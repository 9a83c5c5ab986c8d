"""LISTEN/NOTIFY wake-ups: one listener thread per subscription, on its own connection.

Writes that make a job due (enqueue, nack to a due retry, requeue, promote, resume,
rescue) call ``pg_notify(channel, queue)`` in the same statement, so the wake-up is
delivered at commit and never for a rolled-back write. The channel is per schema.
A subscription's thread LISTENs on a dedicated autocommit connection (a pooled one
would hand the LISTEN to someone else) and calls ``callback(queue)`` for the queues it
was given. When the connection drops it reconnects (after 0.1 s, doubling up to 1 s
while the server stays away) and then calls the callback for every queue once, since
wake-ups sent meanwhile were lost; polling stays the floor either way.

A listening connection only reads, so a connection that died silently (a frozen proxy,
a cut network path) would look like a quiet channel forever: after :data:`PROBE_AFTER`
seconds with nothing heard the listener sends one empty query, which the connection's
``call_timeout`` bounds (F07); no answer closes it and the listener reconnects.

LISTEN through a transaction pooler would be heard on whichever server connection ran it,
and then by nobody: a listener whose connection turns out to be pooled (see
:class:`._pool.Session`) stops at once and says so in :attr:`Listener.refused`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

import psycopg
from psycopg import sql

from jobcore.errors import redact

from ._pool import LISTENER_SETTINGS, BoundedConnection, Session
from ._sql import LISTEN, render

__all__ = ["EVERY", "PROBE_AFTER", "FinishHub", "Listener", "Waiting", "channel_for", "finish_channel_for"]

log = logging.getLogger("jobcore.drivers.postgres")

PROBE_AFTER: Final = 5.0
"""Seconds of silence after which a listener checks that its connection still answers."""
_RECONNECT_FIRST: Final = 0.1
_RECONNECT_CAP: Final = 1.0


def channel_for(schema: str) -> str:
    """The NOTIFY channel of ``schema`` (channel names are limited to 63 bytes)."""
    name = f"jobcore.{schema}"
    if len(name.encode()) <= 63:
        return name
    return f"jobcore.{hashlib.sha1(schema.encode()).hexdigest()}"  # noqa: S324 - a name, not a secret


EVERY: Final = "*"
"""A finish hub's one "queue": after a reconnect it is delivered once, waking every waiter."""


def finish_channel_for(schema: str) -> str:
    """The channel ``wait``'s wake-ups go on (A02): the payload is the finished job's id.

    Only a job some ``wait`` marked (its ``waited`` column) is ever notified, so a job nobody
    waits on costs no NOTIFY (a NOTIFY takes a lock held to the end of the commit)."""
    name = f"jobcore.finished.{schema}"
    if len(name.encode()) <= 63:
        return name
    return f"jobcore.finished.{hashlib.sha1(schema.encode()).hexdigest()}"  # noqa: S324 - a name, not a secret


class Listener:
    """A running subscription; :meth:`close` stops its thread (idempotent)."""

    def __init__(
        self, conninfo: str, kwargs: dict[str, Any], channel: str, queues: Iterable[str],
        callback: Callable[[str], None], *, call_timeout: float | None,
    ) -> None:
        self._conninfo, self._kwargs = conninfo, {**kwargs, "autocommit": True, "call_timeout": call_timeout}
        self._channel = channel
        self._queues = frozenset(queues)
        self._callback = callback
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self.refused: str | None = None
        """Why this listener stopped for good (its connection goes through a transaction pooler), or None."""
        self._thread = threading.Thread(target=self._run, name=f"jobcore-listen-{channel}", daemon=True)
        self._thread.start()
        self._ready.wait(10)  # LISTEN is in place before subscribe() returns (when the server answers)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = BoundedConnection.connect(self._conninfo, session=Session(LISTENER_SETTINGS), **self._kwargs)
        if conn.pooled:
            conn.close()
            self.refused = "the wake-up connection goes through a transaction pooler, where LISTEN cannot work"
            self._stop.set()
            raise psycopg.OperationalError(self.refused)
        try:
            conn.execute(render(LISTEN, channel=sql.Identifier(self._channel)))
        except BaseException:
            conn.close()
            raise
        return conn

    def _deliver(self, queue: str) -> None:
        if queue in self._queues:
            try:
                self._callback(queue)
            except Exception:
                log.exception("jobcore wake-up callback failed for queue %r", queue)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        """Deliver what ``conn`` hears until stopped; raises when the connection fails."""
        heard = time.monotonic()
        while not self._stop.is_set():
            for note in conn.notifies(timeout=0.25):
                heard = time.monotonic()
                self._deliver(note.payload)
            if time.monotonic() - heard >= PROBE_AFTER:
                conn.execute("")  # answers at once on a live connection; bounded by call_timeout
                heard = time.monotonic()

    def _run(self) -> None:
        delay = _RECONNECT_FIRST
        lost = False
        while not self._stop.is_set():
            try:
                self._conn = self._connect()
                self._ready.set()
                delay = _RECONNECT_FIRST
                if lost:  # wake-ups may have been missed while we were away
                    for queue in sorted(self._queues):
                        self._deliver(queue)
                self._listen(self._conn)
            except psycopg.Error as exc:
                if self._stop.is_set():
                    self._ready.set()  # refused: subscribe() reads why at once
                    break
                if self._conn is not None:  # once per lost connection, not per failed reconnect
                    log.warning("jobcore listener lost its connection (%s); reconnecting", redact(exc))
                lost = True
                self._ready.set()
                self._stop.wait(delay)
                delay = min(delay * 2, _RECONNECT_CAP)
            finally:
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()

    def close(self) -> None:
        """Stop listening and join the thread."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5)


class Waiting:
    """One ``wait``'s registration with a :class:`FinishHub` (or its async twin); ``close()``
    ends it (idempotent, from any thread)."""

    def __init__(self, hub: Any, job_id: str, wake: Callable[[], None]) -> None:
        self._hub, self._job_id, self._wake = hub, job_id, wake

    def close(self) -> None:
        self._hub.remove(self._job_id, self._wake)


class WaiterBook:
    """The waiters of a finish hub, by job id (A02), under a lock: a wait's close may come
    from another thread. Shared by :class:`FinishHub` and the async driver's hub, whose
    listeners call :meth:`_deliver` with each NOTIFY's payload (``EVERY`` after a reconnect)."""

    _waiters: dict[str, list[Callable[[], None]]]
    _guard: threading.Lock

    def _open_book(self) -> None:
        self._waiters = {}
        self._guard = threading.Lock()

    def add(self, job_id: str, wake: Callable[[], None]) -> Waiting:
        with self._guard:
            self._waiters.setdefault(job_id, []).append(wake)
        return Waiting(self, job_id, wake)

    def remove(self, job_id: str, wake: Callable[[], None]) -> None:
        with self._guard:
            waiting = self._waiters.get(job_id)
            if waiting is not None and wake in waiting:
                waiting.remove(wake)
                if not waiting:
                    del self._waiters[job_id]

    def _deliver(self, queue: str) -> None:
        with self._guard:
            if queue == EVERY:
                targets = [wake for wakes in self._waiters.values() for wake in wakes]
            else:
                targets = list(self._waiters.get(queue, ()))
        for wake in targets:
            try:
                wake()
            except Exception:
                log.exception("jobcore wait wake-up failed for job %r", queue)


class FinishHub(WaiterBook, Listener):
    """The driver's one LISTEN on the finish channel, shared by every ``wait`` (A02).

    Opened by the first wait and kept until the driver closes: one connection per driver
    however many wait at once. A NOTIFY's payload is a job id; its waiters are woken (the
    door then reads the job). After a reconnect every waiter is woken once, since
    notifications sent meanwhile were lost.
    """

    def __init__(self, conninfo: str, kwargs: dict[str, Any], channel: str, *, call_timeout: float | None) -> None:
        self._open_book()
        super().__init__(conninfo, kwargs, channel, (EVERY,), lambda _: None, call_timeout=call_timeout)


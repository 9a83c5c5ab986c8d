"""Change-stream wake-ups for the MongoDB driver's ``subscribe`` (capability ``notify``).

One :class:`Hub` per driver follows one change stream on the jobs collection in a
daemon thread and calls back every subscriber whose queues an insert or update left a
job ready or due in. Subscriptions share it, so a process holds one stream (one
connection busy in a long poll) however many workers subscribe, and a small pool is
never starved by pollers. Wake-ups are hints: workers still poll, which covers anything
missed while a stream reopens. On a server without change streams (standalone),
``subscribe`` answers :class:`Silent`.

The stream never hangs (F07): opening it and each poll run under the driver's call
bound, so a stalled socket ends in a timeout, the connection is dropped and the stream
reopened; after an outage it reopens by itself as soon as the server answers (F06).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pymongo
from pymongo import errors as pe

from jobcore.errors import JobcoreError
from jobcore.records import JobState

from ._docs import waiting_key

if TYPE_CHECKING:
    from ._store import MongoStore

__all__ = ["Hub", "Silent", "Subscription", "finished_key", "woken"]

_log = logging.getLogger("jobcore.drivers.mongo")

READY, SCHEDULED = JobState.READY.value, JobState.SCHEDULED.value
_FINISHED = frozenset(s.value for s in (JobState.DONE, JobState.FAILED, JobState.DEAD, JobState.CANCELLED))
WAIT_MS = 250
"""How long one poll of the stream waits on the server; bounds how fast a hub stops."""
BOUND = 10.0
"""Seconds opening the stream or one poll may take when the driver's calls are unbounded."""
REOPEN_PAUSE = 0.5
"""Pause between attempts to reopen a broken stream."""

Entry = tuple[frozenset[str], Callable[[str], None]]


def woken(doc: dict[str, Any] | None) -> tuple[str, datetime | None] | None:
    """The queue a changed job document may wake, and the due time still to check against
    the store's now (``None``: ready now); ``None`` when it wakes nobody. Shared by both
    flavours' hubs.

    The queue and due checks run here rather than in the stream's $match so the filter
    does not depend on how a server orders updateLookup and user stages.
    """
    if not doc:
        return None
    queue, state, run_at = doc.get("queue"), doc.get("state"), doc.get("run_at")
    if not isinstance(queue, str):
        return None
    if state == READY:
        return queue, None
    if state == SCHEDULED and isinstance(run_at, datetime):
        return queue, run_at
    return None


def finished_key(doc: dict[str, Any] | None) -> str | None:
    """The :func:`waiting_key` a changed job document wakes when it is finished, else ``None``.
    Shared by both flavours' hubs; the waiter reads the job again, trusting nothing here."""
    if not doc or doc.get("state") not in _FINISHED:
        return None
    seq = doc.get("_id")
    return waiting_key(seq) if isinstance(seq, int) else None


class Silent:
    """The subscription of a server without change streams: it never fires; callers poll."""

    def close(self) -> None:
        """Nothing to stop."""


class Subscription:
    """One subscriber of a driver's :class:`Hub`; ``close()`` ends it (idempotent)."""

    def __init__(self, hub: Hub, entry: Entry) -> None:
        self._hub, self._entry = hub, entry

    def close(self) -> None:
        self._hub.remove(self._entry)


class Hub:
    """One change stream shared by a driver's subscriptions.

    The stream is opened in :meth:`start`, in the caller's thread, so every change after
    the first ``subscribe`` returns is seen; the thread then follows it, reopening after
    the last event seen when the connection breaks.
    """

    def __init__(self, driver: MongoStore) -> None:
        self._driver = driver
        self._lock = threading.Lock()
        self._entries: list[Entry] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobcore-mongo-watch", daemon=True)
        self._stream: Any = None
        self._resume: Any = None

    @property
    def empty(self) -> bool:
        with self._lock:
            return not self._entries

    def start(self) -> None:
        self._stream = self._open()
        self._thread.start()

    def add(self, entry: Entry) -> Subscription:
        with self._lock:
            self._entries.append(entry)
        return Subscription(self, entry)

    def remove(self, entry: Entry) -> None:
        with self._lock:
            if entry not in self._entries:
                return
            self._entries.remove(entry)
            idle = not self._entries
        if idle:  # nobody listens: free the connection the long poll holds
            self._driver._hub_idle(self)

    def _bound(self) -> Any:
        """The deadline of one open or poll: the driver's call bound (a stalled socket times out)."""
        return pymongo.timeout(self._driver._bounds.call or BOUND)

    def _open(self) -> Any:
        pipeline = [{"$match": {"operationType": {"$in": ["insert", "update", "replace"]}}}]
        with self._bound():
            return self._driver._jobs.watch(
                pipeline, full_document="updateLookup", max_await_time_ms=WAIT_MS, resume_after=self._resume,
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._stream is None:
                    self._stream = self._open()
                with self._bound():
                    change = self._stream.try_next()
                self._resume = self._stream.resume_token
            except pe.PyMongoError as exc:
                # Reopen after the last event seen; if the server lost that point (a
                # restart of a server without a durable oplog), start afresh.
                _log.debug("change stream interrupted (%s); reopening", exc)
                self._discard()
                if isinstance(exc, pe.OperationFailure) and not exc.timeout:
                    self._resume = None
                self._stop.wait(REOPEN_PAUSE)
                continue
            if change is not None:
                self._deliver(change.get("fullDocument"))
        self._discard()

    def _discard(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                with self._bound():  # closing sends killCursors: a stalled server must not hold it
                    stream.close()
            except pe.PyMongoError:
                _log.debug("closing a broken change stream failed", exc_info=True)

    def _deliver(self, doc: dict[str, Any] | None) -> None:
        finished = finished_key(doc)
        if finished is not None:  # a waited-on job finished (A02): its waiters, no queue
            self._call(finished)
            return
        found = woken(doc)
        if found is None:
            return
        queue, run_at = found
        if run_at is not None:
            try:
                if run_at > self._driver._now():
                    return
            except JobcoreError:  # the server's clock could not be read: wake anyway, it is a hint
                pass
        self._call(queue)

    def _call(self, queue: str) -> None:
        """Call every subscriber of ``queue`` (a queue, or a :func:`waiting_key`)."""
        with self._lock:
            targets = [callback for queues, callback in self._entries if queue in queues]
        for callback in targets:
            try:
                callback(queue)
            except Exception:
                _log.exception("a wake-up callback raised; the subscription goes on")

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=WAIT_MS / 1000 * 8)

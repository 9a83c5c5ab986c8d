"""Change-stream wake-ups for the MongoDB driver's ``subscribe`` (capability ``notify``).

A :class:`Watcher` runs one change stream on the jobs collection in a daemon thread and
calls back when an insert or update leaves a job of its queues ready or due. Wake-ups
are hints: workers still poll, which covers anything missed while a stream reopens.
On a server without change streams (standalone), ``subscribe`` answers :class:`Silent`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pymongo import errors as pe

from jobcore.records import JobState

if TYPE_CHECKING:
    from . import MongoDriver

__all__ = ["Silent", "Watcher"]

_log = logging.getLogger("jobcore.drivers.mongo")

READY, SCHEDULED = JobState.READY.value, JobState.SCHEDULED.value
WAIT_MS = 250
"""How long one poll of the stream waits on the server; bounds how fast close() returns."""


class Silent:
    """The subscription of a server without change streams: it never fires; callers poll."""

    def close(self) -> None:
        """Nothing to stop."""


class Watcher:
    """A change stream on the jobs collection, calling back when a job may have become due.

    Runs in a daemon thread. A lost connection or server restart reopens the stream
    after a short pause; wake-ups missed meanwhile are covered by the caller's polling.
    """

    def __init__(self, driver: MongoDriver, queues: frozenset[str], callback: Callable[[str], None]) -> None:
        self._driver, self._queues, self._callback = driver, queues, callback
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobcore-mongo-watch", daemon=True)
        self._stream: Any = None
        self._resume: Any = None

    def start(self) -> None:
        """Open the stream here, in the caller's thread, so every change after
        ``subscribe`` returns is seen; then follow it in the background."""
        self._stream = self._open()
        self._thread.start()

    def _open(self) -> Any:
        pipeline = [{"$match": {"operationType": {"$in": ["insert", "update", "replace"]}}}]
        return self._driver._jobs.watch(
            pipeline, full_document="updateLookup", max_await_time_ms=WAIT_MS, resume_after=self._resume,
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._stream is None:
                    self._stream = self._open()
                change = self._stream.try_next()
                self._resume = self._stream.resume_token
                if change is not None:
                    self._deliver(change.get("fullDocument"))
            except pe.PyMongoError as exc:
                # Reopen after the last event seen; if the server lost that point (a
                # restart of a server without a durable oplog), start afresh.
                _log.debug("change stream interrupted (%s); reopening", exc)
                self._discard()
                if isinstance(exc, pe.OperationFailure):
                    self._resume = None
                self._stop.wait(0.5)
        self._discard()

    def _discard(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except pe.PyMongoError:
                _log.debug("closing a broken change stream failed", exc_info=True)

    def _deliver(self, doc: dict[str, Any] | None) -> None:
        # The queue and due checks run here rather than in the stream's $match so the
        # filter does not depend on how a server orders updateLookup and user stages.
        if not doc or doc.get("queue") not in self._queues:
            return
        state, run_at = doc.get("state"), doc.get("run_at")
        if state == READY or (state == SCHEDULED and isinstance(run_at, datetime) and run_at <= self._driver._now()):
            try:
                self._callback(doc["queue"])
            except Exception:
                _log.exception("a wake-up callback raised; the subscription goes on")

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=WAIT_MS / 1000 * 8)


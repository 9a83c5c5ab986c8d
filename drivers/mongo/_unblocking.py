"""The async flavour's own I/O plumbing: the store clock's reading and the change-stream hub, on the event loop.

Everything else of :class:`~jobcore.drivers.mongo.AsyncMongoDriver` (queries, fencing,
decoding, schema, sessions) is generated-shared with the sync driver; these two differ
because the sync ones block a thread:

- :class:`AsyncStoreClock`: the default clock (F01). Its reading of the server's time is
  renewed by the driver's own calls, awaited, before they decide anything; ``now()``
  (what a worker or scheduler asks synchronously) never blocks the loop: it carries the
  last reading forward on the local monotonic clock.
- :class:`AsyncHub`: one change stream per driver, followed by a task on the loop that
  subscribed first (no thread), with the sync hub's decisions (:func:`~._watch.woken`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pymongo
from pymongo import errors as pe

from jobcore.clock import StoreClock, utc
from jobcore.errors import BackendFailure, JobcoreError

from ._watch import BOUND, REOPEN_PAUSE, WAIT_MS, Entry, Silent, finished_key, woken

if TYPE_CHECKING:
    from ._store_async import AsyncMongoStore

__all__ = ["AsyncHub", "AsyncStoreClock", "AsyncSubscription", "Silent"]

_log = logging.getLogger("jobcore.drivers.mongo")


class AsyncStoreClock(StoreClock):
    """The server's clock for the async driver: read by awaiting, carried forward without I/O.

    :meth:`refresh` (awaited by every driver call that decides on time) reads ``hello``'s
    ``localTime`` when the last reading is ``refresh`` seconds old, exactly as
    :class:`~jobcore.clock.StoreClock` does (three tries at most, the shortest round trip
    kept, a failed re-read keeping the old reading). ``now()`` never reads: before the
    first reading it raises ``JC_DB_FAILURE`` saying so.
    """

    def __init__(self) -> None:
        super().__init__(self._unread)
        self._pending: asyncio.Future[None] | None = None

    @staticmethod
    def _unread() -> datetime:
        raise BackendFailure(
            "the async MongoDB driver has not read the server's clock yet, and now() cannot read it without blocking",
            "await a driver call first (await driver.migrate() does), or pass clock= explicitly",
        )

    async def refresh(self, read: Callable[[], Awaitable[datetime]]) -> None:
        """Read the server's time when the reading in use is due for renewal (or there is none).

        Concurrent callers share one reading in flight (a burst of first calls sends one
        ``hello`` series, not one each); a caller cancelled meanwhile leaves it running.
        """
        anchor = self._anchor
        if anchor is not None and self._mono() - anchor[1] < self._refresh:
            return
        pending = self._pending
        if pending is None or pending.done() or pending.get_loop() is not asyncio.get_running_loop():
            pending = self._pending = asyncio.ensure_future(self._read_best(read))
        try:
            await asyncio.shield(pending)
        except Exception:
            if self._anchor is None:
                raise  # no reading at all: the caller cannot decide

    async def _read_best(self, read: Callable[[], Awaitable[datetime]]) -> None:
        best: tuple[datetime, float, float] | None = None
        for _ in range(3):
            sent = self._mono()
            store = await read()
            back = self._mono()
            if best is None or back - sent < best[2]:
                best = (store.astimezone(utc), (sent + back) / 2, back - sent)
            if back - sent <= self._max_rtt:
                break
        assert best is not None
        with self._lock:
            self._anchor = (best[0], best[1])
            self.rtt = best[2]

    def now(self) -> datetime:
        anchor = self._anchor
        if anchor is None:
            self._unread()
        assert anchor is not None
        return anchor[0] + timedelta(seconds=self._mono() - anchor[1])

    def __repr__(self) -> str:
        return "AsyncStoreClock()" if self.rtt is None else f"AsyncStoreClock(rtt={self.rtt * 1000:.1f}ms)"


class AsyncSubscription:
    """One subscriber of an :class:`AsyncHub`; ``close()`` (sync, from any thread) ends it, idempotent."""

    def __init__(self, hub: AsyncHub, entry: Entry) -> None:
        self._hub, self._entry = hub, entry

    def close(self) -> None:
        self._hub.remove(self._entry)


class AsyncHub:
    """One change stream shared by an async driver's subscriptions, followed by a task on the loop.

    :meth:`start` opens the stream (awaited by ``subscribe``, so every change after it
    returns is seen) and starts the task on the running loop. Callbacks run on that loop
    and must not block it (a worker's wake-up sets an event). ``close()`` may come from
    any thread (a subscription closed through a bridge); the task is cancelled on its loop.
    """

    def __init__(self, driver: AsyncMongoStore) -> None:
        self._driver = driver
        self._lock = threading.Lock()
        self._entries: list[Entry] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._stream: Any = None
        self._resume: Any = None
        self._stopped = False

    @property
    def empty(self) -> bool:
        with self._lock:
            return not self._entries

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stream = await self._open()
        self._task = self._loop.create_task(self._run(), name="jobcore-mongo-watch")

    def add(self, entry: Entry) -> AsyncSubscription:
        with self._lock:
            self._entries.append(entry)
        return AsyncSubscription(self, entry)

    def remove(self, entry: Entry) -> None:
        with self._lock:
            if entry not in self._entries:
                return
            self._entries.remove(entry)
            idle = not self._entries
        if idle:  # nobody listens: free the connection the long poll holds (decided on the loop)
            self._on_loop(self._driver._hub_idle, self)

    def _on_loop(self, func: Callable[..., object], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            func(*args)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            func(*args)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing runs on it any more
                loop.call_soon_threadsafe(func, *args)

    def _bound(self) -> Any:
        return pymongo.timeout(self._driver._bounds.call or BOUND)

    async def _open(self) -> Any:
        pipeline = [{"$match": {"operationType": {"$in": ["insert", "update", "replace"]}}}]
        with self._bound():
            return await self._driver._jobs.watch(
                pipeline, full_document="updateLookup", max_await_time_ms=WAIT_MS, resume_after=self._resume,
            )

    async def _run(self) -> None:
        try:
            # A flag as well as the cancellation: a cancellation delivered inside PyMongo's
            # stream code may come out as a stream error, which this loop would survive.
            while not self._stopped:
                try:
                    if self._stream is None:
                        self._stream = await self._open()
                    with self._bound():
                        change = await self._stream.try_next()
                    self._resume = self._stream.resume_token
                except pe.PyMongoError as exc:
                    _log.debug("change stream interrupted (%s); reopening", exc)
                    await self._discard()
                    if isinstance(exc, pe.OperationFailure) and not exc.timeout:
                        self._resume = None
                    if not self._stopped:
                        await asyncio.sleep(REOPEN_PAUSE)
                    continue
                if change is not None:
                    await self._deliver(change.get("fullDocument"))
        finally:
            await asyncio.shield(self._discard())

    async def _discard(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                with self._bound():
                    await stream.close()
            except pe.PyMongoError:
                _log.debug("closing a broken change stream failed", exc_info=True)

    async def _deliver(self, doc: dict[str, Any] | None) -> None:
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
                if run_at > await self._driver._now():
                    return
            except JobcoreError:  # the server's clock could not be read: wake anyway, it is a hint
                pass
        self._call(queue)

    def _call(self, queue: str) -> None:
        """Call every subscriber of ``queue`` (a queue, or a ``wait``'s :func:`._watch.waiting_key`)."""
        with self._lock:
            targets = [callback for queues, callback in self._entries if queue in queues]
        for callback in targets:
            try:
                callback(queue)
            except Exception:
                _log.exception("a wake-up callback raised; the subscription goes on")

    def close(self) -> None:
        """Stop following the stream (from any thread; the task ends on its loop)."""
        self._stopped = True
        task = self._task
        if task is not None:
            self._on_loop(task.cancel)

    async def aclose(self) -> None:
        """Stop and wait until the stream is closed (the driver's ``close``)."""
        task = self._task
        if task is None:
            return
        self.close()
        if self._loop is asyncio.get_running_loop():
            # Bounded as the sync hub's join is: a stream stuck in a poll ends with its call bound.
            await asyncio.wait({task}, timeout=WAIT_MS / 1000 * 8)

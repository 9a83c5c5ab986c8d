"""The overview's store reads, kept fresh in the background so no page waits for them.

The counts (``introspect.stats()``) read every job; on a large PostgreSQL table that is a
second or more. A page must not wait for it, so :class:`Snapshots` keeps the latest answer
of each read and one daemon thread per app refreshes every read that is older than its
ttl, for as long as someone watches: an overview served in the last ``idle`` seconds. A page
serves the latest snapshot and says how old it is. Only a read never answered before (the
app's first overview, or the first after a failed read) is made in the request itself.
A ttl of 0 reads in the request every time (tests, plan checks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs

__all__ = ["Snapshot", "Snapshots"]

_log = logging.getLogger("jobcore.web")


@attrs.frozen
class Snapshot:
    """One read's answer, the store time it was made at, and when (monotonic seconds)."""

    at: datetime
    value: Any
    taken: float

    def age(self) -> float:
        """Seconds since the read was made (not the store's clock: the app's own)."""
        return max(0.0, time.monotonic() - self.taken)


@attrs.define
class _Read:
    ttl: float
    read: Callable[[], Any]
    snapshot: Snapshot | None = None


@attrs.define
class Snapshots:
    """The latest answer of each named read, refreshed by one thread while pages are served."""

    now: Callable[[], datetime]
    idle: float = 30.0
    _reads: dict[str, _Read] = attrs.field(init=False, factory=dict)
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _first: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _seen: float = attrs.field(init=False, default=0.0)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)

    def get(self, key: str, ttl: float, read: Callable[[], Any]) -> Snapshot:
        """The latest snapshot of ``read`` (registered under ``key``), starting the refresher."""
        if ttl <= 0:
            return self._take(read)
        with self._lock:
            self._seen = time.monotonic()
            entry = self._reads.setdefault(key, _Read(ttl, read))
            snapshot = entry.snapshot
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._refresh, name="jobcore-web-snapshots", daemon=True)
                self._thread.start()
        if snapshot is not None:
            return snapshot
        with self._first:  # one first read at a time; a waiter takes the one just made
            with self._lock:
                snapshot = entry.snapshot
            if snapshot is None:
                snapshot = self._take(read)
                with self._lock:
                    entry.snapshot = snapshot
        return snapshot

    def stop(self) -> None:
        """Stop refreshing (the thread ends within one ttl); the next ``get`` starts it again."""
        with self._lock:
            self._seen = float("-inf")

    def _take(self, read: Callable[[], Any]) -> Snapshot:
        taken, at = time.monotonic(), self.now()
        return Snapshot(at, read(), taken)

    def _refresh(self) -> None:
        while True:
            with self._lock:
                if time.monotonic() - self._seen > self.idle:
                    self._thread = None
                    return
                entries = list(self._reads.values())
            wait = min((e.ttl for e in entries), default=1.0)
            for entry in entries:
                if entry.snapshot is None:  # a request is making the first read: not twice
                    continue
                if entry.snapshot.age() < entry.ttl:
                    wait = min(wait, entry.ttl - entry.snapshot.age())
                    continue
                try:
                    snapshot = self._take(entry.read)
                except Exception as exc:  # the store is down or closed: keep the last answer, stop until the next page
                    _log.warning("dashboard: background read failed, pages show the last answer and its age: %s", exc)
                    _log.debug("dashboard: background read failed", exc_info=True)
                    with self._lock:
                        self._thread = None
                    return
                with self._lock:
                    entry.snapshot = snapshot
            time.sleep(max(0.05, wait))

"""The attempts one worker holds: their status, its allowed moves, and the busy count.

Every status change goes through :meth:`Attempts.move`, under the book's lock; it
checks the move against :data:`TRANSITIONS` and keeps :attr:`Attempts.busy` (the slots
taken) right, waking whoever waits for a slot or for the drain when one frees.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import threading
import time
from collections.abc import Collection
from typing import Any

from jobcore._tracing import AttemptSpan
from jobcore.records import Claimed, Job
from jobcore.registry import JobContext, JobHandle


class AttemptStatus(enum.Enum):
    """Where one attempt is in this worker."""

    QUEUED = "queued"
    """Claimed, waiting in the backlog (held where the driver offers it); leased and heartbeated."""
    STARTING = "starting"
    """A slot reserved, its start on its way to the store."""
    RUNNING = "running"
    """Its handler is busy; holds a slot."""
    FINISHING = "finishing"
    """Its outcome (or give-back) is queued for the settler."""
    TIMED_OUT = "timed_out"
    """Its handler ran past its timeout; the failure is queued for the settler."""
    SETTLING = "settling"
    """The settler is sending its settle; a heartbeat answering False no longer calls it off."""
    LOST = "lost"
    """Its lease is gone: the handler was called off and nothing of it is recorded."""
    ABANDONED = "abandoned"
    """Shutdown or kill let it go; its lease lapses for reclaim."""

    # Members are singletons compared by identity: hash them by identity too, in C. Enum's
    # own __hash__ is a Python call, and the status sets are checked several times per job.
    __hash__ = object.__hash__


S = AttemptStatus

TRANSITIONS: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    S.QUEUED: frozenset({S.STARTING, S.FINISHING, S.LOST, S.ABANDONED}),
    S.STARTING: frozenset({S.RUNNING, S.FINISHING, S.LOST, S.ABANDONED}),
    S.RUNNING: frozenset({S.FINISHING, S.TIMED_OUT, S.LOST, S.ABANDONED}),
    S.FINISHING: frozenset({S.SETTLING, S.LOST, S.ABANDONED}),
    S.TIMED_OUT: frozenset({S.SETTLING, S.LOST, S.ABANDONED}),
    S.SETTLING: frozenset({S.ABANDONED}),
    S.LOST: frozenset(),
    S.ABANDONED: frozenset(),
}
"""Each status and the statuses an attempt may move to from it; the settler forgets an
attempt once its settle is answered (or given up), whatever its status."""

SOURCES: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    to: frozenset(s for s, targets in TRANSITIONS.items() if to in targets) for to in AttemptStatus
}
"""Each status and the statuses an attempt may reach it from."""

BUSY = frozenset({S.STARTING, S.RUNNING})
"""Statuses that hold one of the worker's slots (counted in :attr:`Attempts.busy`)."""

KEPT = frozenset({S.QUEUED, S.STARTING, S.RUNNING})
"""Statuses the keeper holds to their local deadline (F02): nothing of them is queued to settle."""

RENEWED = frozenset({S.QUEUED, S.STARTING, S.RUNNING, S.FINISHING, S.TIMED_OUT, S.SETTLING})
"""Statuses whose lease the beater renews (W01)."""

TO_SETTLE = frozenset({S.FINISHING, S.TIMED_OUT, S.SETTLING})
"""Statuses whose settle is queued or under way."""


class Attempt:
    """One claimed job while this worker holds it; its status moves only through :meth:`Attempts.move`."""

    __slots__ = (
        "__weakref__", "claimed", "ctx", "deadline", "handle", "held", "job", "log", "next_beat", "progress_due",
        "progress_sent", "renewed_at", "slot_holder", "slot_key", "span", "started_at", "status", "task",
    )

    def __init__(
        self, claimed: Claimed, handle: JobHandle | None, ctx: JobContext, log: logging.LoggerAdapter[Any], *,
        renewed_at: float, held: bool,
    ):
        self.claimed = claimed
        self.job: Job = claimed.job
        self.handle = handle
        self.ctx = ctx
        self.log = log
        self.status = AttemptStatus.QUEUED
        self.renewed_at = renewed_at
        """Local (monotonic) time the last claim or renewal that landed was sent (F02)."""
        self.held = held
        """Claimed with ``start=False`` and not started in the store yet (F04)."""
        self.next_beat = 0.0
        self.started_at = time.monotonic()  # real time, for the attempt-duration event field
        self.deadline: float | None = None  # the handler timeout's, in real time
        self.slot_key: str | None = None
        self.slot_holder = ""
        self.task: asyncio.Task[Any] | None = None
        self.progress_sent = 0
        """``ctx.progress_seq`` at the last progress write (rules G): a report is pending while they differ."""
        self.progress_due = 0.0
        """Monotonic time before which no further progress is written (``progress_interval``)."""
        self.span: AttemptSpan | None = None  # tracing on (jobcore.contrib.otel): from start to settle


def end_span(attempt: Attempt, outcome: str) -> None:
    """End the attempt's span (tracing on) with its outcome; once, whoever ends it first."""
    span = attempt.span
    if span is not None:
        attempt.span = None
        span.end(outcome)


class Attempts:
    """The attempts a worker holds (by job id), its backlog, and how many slots are busy.

    ``lock`` (reentrant) guards all of it; ``cond`` (on the same lock) is notified
    whenever a slot frees, for the claim loop and the drain.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.active: dict[str, Attempt] = {}
        self.backlog: collections.deque[Attempt] = collections.deque()
        self._busy = 0

    @property
    def busy(self) -> int:
        """Slots taken: attempts starting or running."""
        return self._busy

    def move(self, attempt: Attempt, to: AttemptStatus, *, only_from: Collection[AttemptStatus] | None = None) -> bool:
        """Move ``attempt`` to ``to`` if its status is one of ``only_from`` (default: any
        status :data:`TRANSITIONS` allows it from); answers whether it moved. Keeps
        :attr:`busy` right and notifies ``cond`` when a slot frees."""
        with self.lock:
            now = attempt.status
            if now not in (SOURCES[to] if only_from is None else only_from):
                return False
            if to not in TRANSITIONS[now]:
                raise RuntimeError(f"an attempt of job {attempt.job.id} cannot move from {now.value} to {to.value}")
            attempt.status = to
            change = (to in BUSY) - (now in BUSY)
            if change:
                self._busy += change
                if change < 0:
                    self.cond.notify_all()
            return True

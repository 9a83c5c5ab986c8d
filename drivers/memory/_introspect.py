"""The in-memory driver's :class:`~jobcore.door.IntrospectBackend` (rules O, C10, R01).

Each verb holds the driver's lock for its whole read-and-write, so it is atomic against
every other verb. Arguments arrive checked by :class:`~jobcore.door.IntrospectDoor`.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobcore.door._introspect import FinishedRow, Refused, Spacing, chart_since, prune_cutoffs
from jobcore.records import (
    FINISHED_STATES,
    BulkResult,
    Job,
    JobFilter,
    JobState,
    PruneResult,
    RescueResult,
    Stats,
)
from jobcore.vocabulary import CANCELLED_ENTRY, CLAIMABLE_STATES

if TYPE_CHECKING:
    from . import MemoryDriver
    from ._jobs import _Row

__all__ = ["MemoryIntrospect"]

READY, SCHEDULED, DEAD, CANCELLED = JobState.READY, JobState.SCHEDULED, JobState.DEAD, JobState.CANCELLED
RowList = list["_Row"]


class MemoryIntrospect:
    """Reads, operator verbs and retention over the memory driver's rows (its lock held)."""

    def __init__(self, driver: MemoryDriver) -> None:
        self._d = driver

    def __repr__(self) -> str:
        return "MemoryIntrospect()"

    # -- reads ---------------------------------------------------------------------------

    def get(self, seq: int) -> Job | None:
        with self._d._lock:
            row = self._d._rows.get(seq)
            return None if row is None else row.job()

    def list_older(self, flt: JobFilter, limit: int, below: int | None) -> list[Job]:
        with self._d._lock:
            rows = []
            for row in reversed(self._d._rows.values()):
                if below is not None and row.seq >= below:
                    continue
                if row.matches(flt):
                    rows.append(row)
                    if len(rows) == limit:
                        break
            return [r.job() for r in rows]

    def list_newer(self, flt: JobFilter, limit: int, above: int) -> list[Job]:
        with self._d._lock:
            rows = [r for r in self._d._rows.values() if r.seq > above and r.matches(flt)]
            return [r.job() for r in rows[:limit]]

    def stats(self) -> Stats:
        with self._d._lock:
            now = self._d._now()
            counts: dict[str, dict[JobState, int]] = {}
            oldest: dict[str, datetime] = {}
            for row in self._d._rows.values():
                per_queue = counts.setdefault(row.queue, {})
                per_queue[row.state] = per_queue.get(row.state, 0) + 1
                if row.state in CLAIMABLE_STATES and row.run_at <= now:
                    oldest[row.queue] = min(oldest.get(row.queue, row.run_at), row.run_at)
            return Stats(counts=counts, oldest_due_age={q: now - t for q, t in oldest.items()})

    def dead_letters(self, queue: str | None, limit: int) -> list[Job]:
        with self._d._lock:
            rows = [r for r in self._d._rows.values() if r.state is DEAD and (queue is None or r.queue == queue)]
            rows.sort(key=lambda r: (r.finished_at, r.seq), reverse=True)
            return [r.job() for r in rows[:limit]]

    def finished_counts(self, minutes: int) -> list[FinishedRow]:
        with self._d._lock:
            since = chart_since(self._d._now(), minutes)
            counts: dict[tuple[datetime, JobState], int] = {}
            for row in self._d._rows.values():
                at = row.finished_at
                if row.state in FINISHED_STATES and at is not None and at >= since:
                    bucket = (at.replace(second=0, microsecond=0), row.state)
                    counts[bucket] = counts.get(bucket, 0) + 1
            return [(minute, state, n) for (minute, state), n in counts.items()]

    def rescue(self) -> RescueResult:
        d = self._d
        with d._lock:
            now = d._now()
            requeued, buried = 0, []
            woken: set[str] = set()
            for queue in list(d._leases):
                for row in d._lapsed(queue, now):
                    if row.attempt >= row.max_attempts and not row.held:
                        buried.append(d._bury(row, frozenset(), now))
                        continue
                    d._release_lapsed(row, now)
                    row.state, row.worker_id, row.lease_expires_at, row.run_at = READY, None, None, now
                    d._schedule(row, now)
                    requeued += 1
                    woken.add(queue)
        d._wake(woken)
        d._wake_released()
        return RescueResult(requeued=requeued, buried=tuple(buried))

    # -- single-job verbs ----------------------------------------------------------------

    def cancel(self, seq: int, states: frozenset[JobState], message: str) -> Job | None:
        with self._d._lock:
            row = self._d._rows.get(seq)
            if row is None or row.state not in states:
                return None
            self._cancel(row, message, self._d._now())
            return row.job()

    def _cancel(self, row: _Row, message: str, now: datetime) -> None:
        self._d._error(row, CANCELLED_ENTRY, message, now)
        self._d._finish(row, CANCELLED, now)

    def _target(self, seq: int, states: frozenset[JobState]) -> _Row | Refused | None:
        """Job ``seq`` when it is in ``states``; else what the door needs to word the refusal (lock held)."""
        row = self._d._rows.get(seq)
        if row is None or row.state in states:
            return row
        return Refused(row.state)

    def requeue(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        with self._d._lock:
            row = self._target(seq, states)
            if row is None or isinstance(row, Refused):
                return row
            if row.key is not None and (row.name, row.key) in self._d._live_keys:
                holder = self._d._live_keys[(row.name, row.key)]
                return Refused(row.state, row.key, str(holder), clash=True)
            now = self._d._now()
            self._requeue(row, now, now)
            job = row.job()
        self._d._wake((job.queue,))
        return job

    def _requeue(self, row: _Row, now: datetime, due: datetime) -> None:
        row.state = READY if due <= now else SCHEDULED
        row.attempt, row.run_at, row.finished_at, row.result = 0, due, None, None
        if row.key is not None:
            self._d._live_keys[(row.name, row.key)] = row.seq
        self._d._schedule(row, now)

    def remove(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        with self._d._lock:
            row = self._target(seq, states)
            if row is None or isinstance(row, Refused):
                return row
            job = row.job()
            self._forget(row)
            return job

    def _forget(self, row: _Row) -> None:
        del self._d._rows[row.seq]
        if row.key is not None and self._d._live_keys.get((row.name, row.key)) == row.seq:
            del self._d._live_keys[(row.name, row.key)]
        self._d._forget_parent(row, self._d._now())

    def relatives(self, seq: int) -> tuple[list[Job], list[Job]] | None:
        """Job ``seq``'s parents and children (rules D)."""
        return self._d._store.relatives(seq)

    def make_due(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        with self._d._lock:
            row = self._target(seq, states)
            if row is None or isinstance(row, Refused):
                return row
            row.attempt = min(row.attempt, row.max_attempts - 1)  # a resumed job has an attempt left (S05)
            row.waiting = False  # resuming a job waiting on its parents runs it now (D05)
            self._make_due(row, self._d._now())
            job = row.job()
        self._d._wake((job.queue,))
        return job

    def _make_due(self, row: _Row, now: datetime) -> None:
        row.state, row.run_at = READY, now
        self._d._schedule(row, now)

    # -- bulk verbs: ``flt.state`` is the verb's guard already (O05) -------------------------

    def _eligible(self, flt: JobFilter) -> RowList:
        return [r for r in self._d._rows.values() if r.matches(flt)]

    def cancel_many(self, flt: JobFilter, limit: int, message: str) -> BulkResult:
        with self._d._lock:
            now = self._d._now()
            rows = self._eligible(flt)
            for row in rows[:limit]:
                if row.state in flt.state:  # type: ignore[operator]  # not already cancelled by a parent's cascade
                    self._cancel(row, message, now)
            return BulkResult(affected=min(limit, len(rows)), remaining=max(0, len(rows) - limit))

    def _requeueable(self, flt: JobFilter) -> RowList:
        rows, keys = [], set()
        for row in self._eligible(flt):
            if row.key is not None:
                ident = (row.name, row.key)
                if ident in self._d._live_keys or ident in keys:
                    continue
                keys.add(ident)
            rows.append(row)
        return rows

    def requeue_many(self, flt: JobFilter, limit: int, spacing: Spacing) -> BulkResult:
        with self._d._lock:
            now = self._d._now()
            rows = self._requeueable(flt)[:limit]
            offsets = spacing(len(rows))
            for row, offset in zip(rows, offsets, strict=True):
                self._requeue(row, now, now + offset)
            remaining = len(self._requeueable(flt))
            queues = {r.queue for r in rows}
        self._d._wake(queues)
        return BulkResult(affected=len(rows), remaining=remaining)

    def remove_many(self, flt: JobFilter, limit: int) -> BulkResult:
        with self._d._lock:
            rows = self._eligible(flt)
            for row in rows[:limit]:
                self._forget(row)
            return BulkResult(affected=min(limit, len(rows)), remaining=max(0, len(rows) - limit))

    def promote_many(self, flt: JobFilter, limit: int) -> BulkResult:
        with self._d._lock:
            now = self._d._now()
            rows = self._eligible(flt)
            for row in rows[:limit]:
                self._make_due(row, now)
            queues = {r.queue for r in rows[:limit]}
            result = BulkResult(affected=min(limit, len(rows)), remaining=max(0, len(rows) - limit))
        self._d._wake(queues)
        return result

    # -- retention (R01) -----------------------------------------------------------------

    def _prunable(self, cutoffs: dict[JobState, datetime]) -> list[tuple[datetime, int, _Row]]:
        return [
            (r.finished_at, r.seq, r) for r in self._d._rows.values()
            if r.finished_at is not None and r.state in cutoffs and r.finished_at <= cutoffs[r.state]
        ]

    def prune(self, ages: Mapping[JobState, timedelta], limit: int, batch: int, dry_run: bool) -> PruneResult:
        with self._d._lock:
            cutoffs = prune_cutoffs(ages, self._d._now())
        removed = dict.fromkeys(cutoffs, 0)
        total = 0
        while not dry_run and total < limit:
            want = min(batch, limit - total)
            # One batch per hold of the lock, so claims on other threads interleave with a long prune.
            with self._d._lock:
                rows = heapq.nsmallest(want, self._prunable(cutoffs), key=lambda t: (t[0], t[1]))
                for _, _, row in rows:
                    self._forget(row)
                    removed[row.state] += 1
            total += len(rows)
            if len(rows) < want:
                break
        remaining = dict.fromkeys(cutoffs, 0)
        with self._d._lock:
            for _, _, row in self._prunable(cutoffs):
                remaining[row.state] += 1
        return PruneResult(removed=removed, remaining=remaining)

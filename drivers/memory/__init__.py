"""The in-memory driver: the whole JobDriver contract in one process, for tests and demos.

It keeps every rule the database drivers keep (the same front door,
:class:`~jobcore.door.FrontDoor`, checks every argument; payloads are stored as their
JSON text; time comes only from its clock) and is fast enough that application test
suites do not notice it. The store itself, its jobs backend, is
:class:`._jobs.MemoryJobs`: one lock guards all state.
"""

from __future__ import annotations

import builtins
import heapq
from datetime import datetime
from typing import Any

from jobcore import validate as v
from jobcore.clock import Clock, SystemClock
from jobcore.door import FrontDoor, LeasesDoor, SchedulesDoor
from jobcore.driver import Duration
from jobcore.errors import (
    JobDuplicate,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
    JobNotResumable,
    UrlInvalid,
    redact,
)
from jobcore.records import (
    FINISHED_STATES,
    LIVE_STATES,
    BulkResult,
    Job,
    JobFilter,
    JobState,
    Page,
    PruneResult,
    RescueResult,
    RetentionPolicy,
    Stats,
)
from jobcore.vocabulary import CANCELLED_ENTRY

from ._jobs import MemoryJobs, _Row, _seq_of
from ._leases import MemoryLeases
from ._schedules import MemorySchedules

__all__ = ["MemoryDriver"]

READY, SCHEDULED, RUNNING, SUSPENDED = JobState.READY, JobState.SCHEDULED, JobState.RUNNING, JobState.SUSPENDED
DEAD, CANCELLED = JobState.DEAD, JobState.CANCELLED


class MemoryDriver(FrontDoor):
    """The in-memory :class:`~jobcore.driver.JobDriver`.

    Args:
        clock: Source of "now" (default: UTC wall time).
        default_max_attempts: ``max_attempts`` for jobs enqueued without one.
    """

    def __init__(self, *, clock: Clock | None = None, default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS) -> None:
        store = MemoryJobs(clock if clock is not None else SystemClock())
        super().__init__(store, default_max_attempts=default_max_attempts)
        # The store and its steps, which the introspector, leases and schedules share.
        self._store = store
        self._lock, self._rows, self._live_keys = store._lock, store._rows, store._live_keys
        self._leases, self._subscribers = store._leases, store._subscribers
        self._now, self._schedule, self._insert = store._now, store._schedule, store._insert
        self._finish, self._error, self._lapsed = store._finish, store._error, store._lapsed
        self._bury, self._release_lapsed, self._wake = store._bury, store._release_lapsed, store._wake
        self.leases = LeasesDoor(MemoryLeases(self))
        self.introspect = _MemoryIntrospector(self)
        self.schedules = SchedulesDoor(MemorySchedules(self), default_max_attempts=self._default_max_attempts)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryDriver:
        """Build from ``memory://`` (the URL carries nothing else)."""
        if url.rstrip("/") != "memory:":
            raise UrlInvalid(f"{redact(url)!r} carries options the memory driver does not take", "use memory://")
        return cls(**options)

    def __repr__(self) -> str:
        return f"MemoryDriver(jobs={len(self._rows)}, clock={self.clock!r})"


class _MemoryIntrospector:
    """Reads and operator verbs (rules O, C10)."""

    def __init__(self, driver: MemoryDriver) -> None:
        self._d = driver

    def _row(self, job_id: str) -> _Row | None:
        seq = _seq_of(v.check_id(job_id))
        return None if seq is None else self._d._rows.get(seq)

    def _existing(self, job_id: str) -> _Row:
        row = self._row(job_id)
        if row is None:
            raise JobNotFound(f"no job has id {job_id!r:.60}")
        return row

    def get(self, job_id: str) -> Job | None:
        with self._d._lock:
            row = self._row(job_id)
            return None if row is None else row.job()

    def list(
        self, filter: JobFilter | None = None, limit: int = v.DEFAULT_PAGE, *,
        after: str | None = None, before: str | None = None,
    ) -> Page:
        flt = v.check_filter(filter)
        size, after_seq, before_seq = v.check_page(limit, after, before)
        with self._d._lock:
            if before_seq is not None:
                newer = [r for r in self._d._rows.values() if r.seq > before_seq and r.matches(flt)]
                rows = list(reversed(newer[:size]))
                more_newer = len(newer) > size
                jobs = tuple(r.job() for r in rows)
                return Page(
                    jobs=jobs,
                    after=v.encode_cursor(rows[-1].seq) if rows else None,
                    before=v.encode_cursor(rows[0].seq) if more_newer else None,
                )
            rows = []
            for row in reversed(self._d._rows.values()):
                if after_seq is not None and row.seq >= after_seq:
                    continue
                if row.matches(flt):
                    rows.append(row)
                    if len(rows) == size:
                        break
            jobs = tuple(r.job() for r in rows)
            return Page(
                jobs=jobs,
                after=v.encode_cursor(rows[-1].seq) if len(rows) == size else None,
                before=v.encode_cursor(rows[0].seq) if rows and after_seq is not None else None,
            )

    def stats(self) -> Stats:
        with self._d._lock:
            now = self._d._now()
            counts: dict[str, dict[JobState, int]] = {}
            oldest: dict[str, datetime] = {}
            for row in self._d._rows.values():
                per_queue = counts.setdefault(row.queue, {})
                per_queue[row.state] = per_queue.get(row.state, 0) + 1
                if row.state in (READY, SCHEDULED) and row.run_at <= now:
                    oldest[row.queue] = min(oldest.get(row.queue, row.run_at), row.run_at)
            return Stats(counts=counts, oldest_due_age={q: now - t for q, t in oldest.items()})

    def dead_letters(self, queue: str | None = None, limit: int = v.DEFAULT_PAGE) -> builtins.list[Job]:
        name = v.check_name(queue, "queue", optional=True)
        size = v.check_int(limit, "limit", 1, v.MAX_PAGE)
        with self._d._lock:
            rows = [r for r in self._d._rows.values() if r.state is DEAD and (name is None or r.queue == name)]
            rows.sort(key=lambda r: (r.finished_at, r.seq), reverse=True)
            return [r.job() for r in rows[:size]]

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
        return RescueResult(requeued=requeued, buried=tuple(buried))

    def cancel(self, job_id: str, reason: str | None = None) -> Job | None:
        text = "cancelled by an operator" if reason is None else v.error_entry(reason)[1]
        with self._d._lock:
            row = self._row(job_id)
            if row is None or row.state not in LIVE_STATES:
                return None
            now = self._d._now()
            self._d._error(row, CANCELLED_ENTRY, text, now)
            self._d._finish(row, CANCELLED, now)
            return row.job()

    def requeue(self, job_id: str) -> Job:
        with self._d._lock:
            row = self._existing(job_id)
            if row.state not in FINISHED_STATES:
                raise JobNotRequeueable(f"job {job_id} is {row.state}, not finished")
            if row.key is not None and (row.name, row.key) in self._d._live_keys:
                holder = self._d._live_keys[(row.name, row.key)]
                raise JobDuplicate(f"job {job_id}'s key {row.key!r} is held by live job {holder}")
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

    def remove(self, job_id: str) -> Job | None:
        with self._d._lock:
            row = self._row(job_id)
            if row is None:
                return None
            if row.state is RUNNING:
                raise JobNotRemovable(f"job {job_id} is running")
            job = row.job()
            self._forget(row)
            return job

    def _forget(self, row: _Row) -> None:
        del self._d._rows[row.seq]
        if row.key is not None and self._d._live_keys.get((row.name, row.key)) == row.seq:
            del self._d._live_keys[(row.name, row.key)]

    def promote(self, job_id: str) -> Job:
        with self._d._lock:
            row = self._existing(job_id)
            if row.state is not SCHEDULED:
                raise JobNotPromotable(f"job {job_id} is {row.state}, not scheduled")
            self._make_due(row, self._d._now())
            job = row.job()
        self._d._wake((job.queue,))
        return job

    def resume(self, job_id: str) -> Job:
        with self._d._lock:
            row = self._existing(job_id)
            if row.state is not SUSPENDED:
                raise JobNotResumable(f"job {job_id} is {row.state}, not suspended")
            row.attempt = min(row.attempt, row.max_attempts - 1)  # a resumed job has an attempt left (S05)
            self._make_due(row, self._d._now())
            job = row.job()
        self._d._wake((job.queue,))
        return job

    def _make_due(self, row: _Row, now: datetime) -> None:
        row.state, row.run_at = READY, now
        self._d._schedule(row, now)

    # -- bulk verbs: each applies its own guard whatever the filter says (O05) -----------

    def _eligible(self, flt: JobFilter, guard: frozenset[JobState]) -> builtins.list[_Row]:
        return [r for r in self._d._rows.values() if r.state in guard and r.matches(flt)]

    def cancel_many(
        self, filter: JobFilter | None = None, *, reason: str | None = None, limit: int = v.MAX_BULK_ROWS,
    ) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        text = "cancelled by an operator" if reason is None else v.error_entry(reason)[1]
        with self._d._lock:
            now = self._d._now()
            rows = self._eligible(flt, LIVE_STATES)
            for row in rows[:size]:
                self._d._error(row, CANCELLED_ENTRY, text, now)
                self._d._finish(row, CANCELLED, now)
            return BulkResult(affected=min(size, len(rows)), remaining=max(0, len(rows) - size))

    def _requeueable(self, flt: JobFilter) -> builtins.list[_Row]:
        rows, keys = [], set()
        for row in self._eligible(flt, FINISHED_STATES):
            if row.key is not None:
                ident = (row.name, row.key)
                if ident in self._d._live_keys or ident in keys:
                    continue
                keys.add(ident)
            rows.append(row)
        return rows

    def requeue_many(
        self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS, spread: Duration | None = None,
    ) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        window = None if spread is None else v.check_spread(spread)
        with self._d._lock:
            now = self._d._now()
            rows = self._requeueable(flt)[:size]
            window = v.default_spread(len(rows)) if window is None else window
            for index, row in enumerate(rows):
                self._requeue(row, now, v.spread_run_at(now, window, index, len(rows)))
            remaining = len(self._requeueable(flt))
            queues = {r.queue for r in rows}
        self._d._wake(queues)
        return BulkResult(affected=len(rows), remaining=remaining)

    def remove_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        with self._d._lock:
            rows = self._eligible(flt, frozenset(JobState) - {RUNNING})
            for row in rows[:size]:
                self._forget(row)
            return BulkResult(affected=min(size, len(rows)), remaining=max(0, len(rows) - size))

    def promote_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        with self._d._lock:
            now = self._d._now()
            rows = self._eligible(flt, frozenset({SCHEDULED}))
            for row in rows[:size]:
                self._make_due(row, now)
            queues = {r.queue for r in rows[:size]}
            result = BulkResult(affected=min(size, len(rows)), remaining=max(0, len(rows) - size))
        self._d._wake(queues)
        return result

    # -- retention (R01) ---------------------------------------------------------------

    def _prunable(self, cutoffs: dict[JobState, datetime]) -> builtins.list[tuple[datetime, int, _Row]]:
        return [
            (r.finished_at, r.seq, r) for r in self._d._rows.values()
            if r.finished_at is not None and r.state in cutoffs and r.finished_at <= cutoffs[r.state]
        ]

    def prune(
        self, policy: RetentionPolicy | None = None, *, limit: int = v.DEFAULT_PRUNE_ROWS,
        batch: int = v.DEFAULT_PRUNE_BATCH, dry_run: bool = False,
    ) -> PruneResult:
        rules, size, step = v.check_prune(policy, limit, batch, dry_run=dry_run)
        with self._d._lock:
            cutoffs = v.prune_cutoffs(rules, self._d._now())
        removed = dict.fromkeys(sorted(FINISHED_STATES), 0)
        total = 0
        while not dry_run and total < size:
            want = min(step, size - total)
            # One batch per hold of the lock, so claims on other threads interleave with a long prune.
            with self._d._lock:
                rows = heapq.nsmallest(want, self._prunable(cutoffs), key=lambda t: (t[0], t[1]))
                for _, _, row in rows:
                    self._forget(row)
                    removed[row.state] += 1
            total += len(rows)
            if len(rows) < want:
                break
        remaining = dict.fromkeys(sorted(FINISHED_STATES), 0)
        with self._d._lock:
            for _, _, row in self._prunable(cutoffs):
                remaining[row.state] += 1
        # Counted up to MAX_PRUNE_ROWS per state, as the database drivers bound their counts.
        capped = {state: min(count, v.MAX_PRUNE_ROWS) for state, count in remaining.items()}
        return PruneResult(removed=removed, remaining=capped)

"""A deliberately plain third-party driver: the four backend protocols and nothing else.

It is the worked example of docs/writing-a-driver.md and the proof that a driver
needs no more than that page says: it imports only jobcore's public modules (never
``jobcore.drivers``), keeps every job in a dict under one lock and finds everything by
linear scan. The front door (:class:`~jobcore.door.FrontDoor` and the introspection,
lease and schedule doors) checks every argument, applies defaults, words refusals and
emulates what this store lacks; the backends below only read and write rows, each
verb in one step under the lock (that lock is this store's atomicity).

It declares no capability: scenarios needing ``notify``, ``deferred_start``,
``shared_store`` and the like skip on it, and the door answers ``ack_many(...,
landed_only=True)`` from full acks. jobcore's own test run puts it in the parity
matrix as driver ``minimal`` (fixtures/plugin.py).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobcore.clock import Clock, SystemClock, to_millis
from jobcore.door import (
    AsyncFrontDoor,
    AsyncIntrospectDoor,
    AsyncLeasesDoor,
    AsyncSchedulesDoor,
    Awaiting,
    FrontDoor,
    IntrospectDoor,
    LeasesDoor,
    Refused,
    SchedulesDoor,
    Spacing,
    chart_since,
    job_seq,
    prune_cutoffs,
)
from jobcore.records import (
    FINISHED_STATES,
    BulkResult,
    Claimed,
    ClaimResult,
    ClaimToken,
    Job,
    JobError,
    JobFilter,
    JobState,
    LeaseSlot,
    Migration,
    Progress,
    PruneResult,
    RescueResult,
    Schedule,
    ScheduleOutcome,
    Stats,
)
from jobcore.vocabulary import (
    CANCELLED_ENTRY,
    CLAIMABLE_STATES,
    DEFAULT_MAX_ATTEMPTS,
    LEASE_EXPIRED,
    LEASE_EXPIRED_TEXT,
    LEASE_LAPSED_FINAL,
    LIVE_STATES,
    lease_lapsed_final_text,
)

if TYPE_CHECKING:
    from jobcore.validate import StoreTimedJob

__all__ = ["MinimalDriver", "driver_factory"]

READY, SCHEDULED, RUNNING, SUSPENDED = JobState.READY, JobState.SCHEDULED, JobState.RUNNING, JobState.SUSPENDED
DONE, FAILED, DEAD, CANCELLED = JobState.DONE, JobState.FAILED, JobState.DEAD, JobState.CANCELLED


class _Row:
    """One stored job. Payload and result stay the JSON text the door encoded."""

    def __init__(self, seq: int, job: StoreTimedJob, now: datetime) -> None:
        self.seq = seq
        self.name, self.queue, self.payload, self.priority = job.name, job.queue, job.payload, job.priority
        self.max_attempts, self.key = job.max_attempts, job.key
        self.run_at, self.state = job.due(now)  # the store decides on its own clock (F01)
        self.created_at = now
        self.attempt = 0
        self.claim_no = 0
        self.attempted_at: datetime | None = None
        self.finished_at: datetime | None = None
        self.worker_id: str | None = None
        self.lease_expires_at: datetime | None = None
        self.result: str | None = None
        self.errors: list[JobError] = []
        self.progress: Progress | None = None  # the running attempt's, cleared by the next claim (G04)
        # Tracing (jobcore.contrib.otel): the enqueuing trace's context, kept as given, handed out as a copy.
        self.trace = None if job.trace_context is None else dict(job.trace_context)

    def job(self, duplicate: bool = False) -> Job:
        return Job(
            id=str(self.seq), name=self.name, queue=self.queue, payload=json.loads(self.payload),
            state=self.state, priority=self.priority, attempt=self.attempt, max_attempts=self.max_attempts,
            run_at=self.run_at, created_at=self.created_at, attempted_at=self.attempted_at,
            finished_at=self.finished_at, worker_id=self.worker_id, claim_no=self.claim_no,
            lease_expires_at=self.lease_expires_at, key=self.key,
            result=None if self.result is None else json.loads(self.result),
            last_error=self.errors[-1] if self.errors else None, errors=tuple(self.errors),
            progress=self.progress, trace_context=None if self.trace is None else dict(self.trace),
            duplicate=duplicate,
        )

    def matches(self, flt: JobFilter) -> bool:
        return (
            (flt.queue is None or self.queue == flt.queue)
            and (flt.name is None or self.name == flt.name)
            and (flt.state is None or self.state in flt.state)
            and (flt.id_prefix is None or str(self.seq).startswith(flt.id_prefix))
            and (flt.created_from is None or self.created_at >= flt.created_from)
            and (flt.created_to is None or self.created_at < flt.created_to)
        )


class _Store:
    """The shared state of the four backends: one lock, rows in enqueue order, and the steps they share."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.rows: dict[int, _Row] = {}
        self.last_seq = 0

    def now(self) -> datetime:
        return to_millis(self.clock.now())

    def live_holder(self, name: str, key: str | None) -> _Row | None:
        """The live job of ``name`` holding ``key`` (E02), if any."""
        if key is None:
            return None
        for row in self.rows.values():
            if row.key == key and row.name == name and row.state in LIVE_STATES:
                return row
        return None

    def insert(self, job: StoreTimedJob, now: datetime) -> tuple[_Row, bool]:
        """Store ``job``, or answer the live holder of its key (``True``: a duplicate)."""
        holder = self.live_holder(job.name, job.key)
        if holder is not None:
            return holder, True
        self.last_seq += 1
        row = self.rows[self.last_seq] = _Row(self.last_seq, job, now)
        return row, False

    def current(self, token: ClaimToken) -> _Row | None:
        """The running row ``token`` still holds, or ``None`` (L02, L03): a junk token holds nothing."""
        seq = job_seq(token.job_id)
        row = None if seq is None else self.rows.get(seq)
        if row is None or row.state is not RUNNING or type(token.claim_no) is not int:
            return None
        return row if (row.worker_id, row.claim_no) == (token.worker_id, token.claim_no) else None

    def error(self, row: _Row, type_name: str, message: str, now: datetime) -> None:
        row.errors.append(JobError(type=type_name, message=message, at=now, attempt=row.attempt))

    def finish(self, row: _Row, state: JobState, now: datetime) -> None:
        row.state, row.finished_at, row.worker_id, row.lease_expires_at = state, now, None, None

    def lapsed(self, now: datetime, queues: Sequence[str] | None = None) -> list[_Row]:
        """Running rows whose lease ran out (of ``queues``, or all)."""
        return [
            r for r in self.rows.values()
            if r.state is RUNNING and r.lease_expires_at is not None and r.lease_expires_at <= now
            and (queues is None or r.queue in queues)
        ]

    def bury(self, row: _Row, drop: frozenset[str], now: datetime) -> Job:
        """Settle a lapsed final attempt ``dead`` (``failed`` for names in ``drop``) (C08)."""
        self.error(row, LEASE_LAPSED_FINAL, lease_lapsed_final_text(row.attempt, row.max_attempts), now)
        self.finish(row, FAILED if row.name in drop else DEAD, now)
        return row.job()


# -- jobs (JobsBackend) ---------------------------------------------------------------------


class _NoWakeUps:
    """``subscribe``'s answer without ``notify``: it never fires."""

    def close(self) -> None:
        pass


class MinimalJobs:
    """Enqueue, claim, heartbeat and settle (:class:`~jobcore.door.JobsBackend`)."""

    capabilities: frozenset[str] = frozenset()

    def __init__(self, store: _Store) -> None:
        self._s = store
        self.clock = store.clock

    def insert(self, jobs: Sequence[StoreTimedJob], connection: Any) -> list[Job]:
        with self._s.lock:
            now = self._s.now()
            return [row.job(duplicate=dup) for row, dup in (self._s.insert(job, now) for job in jobs)]

    def claim(
        self, queues: tuple[str, ...], worker_id: str, limit: int, lease: timedelta, *, drop: frozenset[str],
        start: bool,
    ) -> ClaimResult:
        s = self._s
        with s.lock:
            now = s.now()
            buried, taken = [], []
            for row in s.lapsed(now, queues):
                if row.attempt >= row.max_attempts:
                    buried.append(s.bury(row, drop, now))  # C08
                else:
                    taken.append(row)  # reclaimed first (C07)
            taken.sort(key=_claim_order)
            taken = taken[:limit]
            for row in taken:
                s.error(row, LEASE_EXPIRED, LEASE_EXPIRED_TEXT, now)
            due = [r for r in s.rows.values() if r.queue in queues and r.state in CLAIMABLE_STATES and r.run_at <= now]
            taken += sorted(due, key=_claim_order)[: limit - len(taken)]
            claimed = []
            for row in taken:
                row.state, row.worker_id, row.lease_expires_at = RUNNING, worker_id, to_millis(now + lease)
                row.claim_no += 1
                row.attempt += 1
                row.attempted_at = now
                row.progress = None
                job = row.job()
                token = ClaimToken(job_id=job.id, worker_id=worker_id, claim_no=job.claim_no)
                claimed.append(Claimed(job=job, token=token))
            return ClaimResult(claimed=tuple(claimed), buried=tuple(buried))

    def heartbeat(self, token: ClaimToken, lease: timedelta) -> bool:
        with self._s.lock:
            row = self._s.current(token)
            if row is not None:
                row.lease_expires_at = to_millis(self._s.now() + lease)
            return row is not None

    def progress(self, token: ClaimToken, value: float | None, message: str | None) -> bool:
        with self._s.lock:
            row = self._s.current(token)
            if row is not None:
                row.progress = Progress(value=value, message=message, updated_at=self._s.now())
            return row is not None

    def start(self, tokens: list[ClaimToken]) -> list[bool]:
        raise AssertionError("the door never calls start without deferred_start")

    def ack_many(self, items: list[tuple[ClaimToken, str | None]], landed_only: bool) -> list[Any]:
        answers: list[Job | None] = []
        with self._s.lock:
            now = self._s.now()
            for token, text in items:
                row = self._s.current(token)  # a token repeated in the batch is no longer current
                if row is not None:
                    row.result = text
                    self._s.finish(row, DONE, now)
                answers.append(None if row is None else row.job())
        return answers

    def nack(
        self, token: ClaimToken, type_name: str, message: str, retry_at: datetime | None, *,
        dead_letter: bool, fail: bool, counts_as_attempt: bool, park: bool,
    ) -> Job | None:
        s = self._s
        with s.lock:
            row = s.current(token)
            if row is None:
                return None
            now = s.now()
            s.error(row, type_name, message, now)
            if not counts_as_attempt:
                row.attempt -= 1
            row.worker_id, row.lease_expires_at = None, None
            if fail:
                s.finish(row, FAILED, now)
            elif park:
                row.state = SUSPENDED
            elif row.attempt >= row.max_attempts:
                s.finish(row, DEAD if dead_letter else FAILED, now)
            else:
                row.state, row.run_at = SCHEDULED, now if retry_at is None else retry_at
            return row.job()

    def subscribe(self, queues: frozenset[str], callback: Callable[[str], None]) -> _NoWakeUps:
        return _NoWakeUps()

    def migrate(self, dry_run: bool) -> Migration:
        return Migration(before=None, after=None, latest=None, applied=not dry_run)

    def close(self) -> None:
        pass


def _claim_order(row: _Row) -> tuple[int, datetime, int]:
    """Higher priority first, then earlier due, then enqueue order (C01)."""
    return -row.priority, row.run_at, row.seq


# -- reads and operator verbs (IntrospectBackend) -------------------------------------------


class MinimalIntrospect:
    """Reads, operator verbs and retention (:class:`~jobcore.door.IntrospectBackend`)."""

    def __init__(self, store: _Store) -> None:
        self._s = store

    def get(self, seq: int) -> Job | None:
        with self._s.lock:
            row = self._s.rows.get(seq)
            return None if row is None else row.job()

    def list_older(self, flt: JobFilter, limit: int, below: int | None) -> list[Job]:
        with self._s.lock:
            rows = [r for r in reversed(self._s.rows.values()) if (below is None or r.seq < below) and r.matches(flt)]
            return [r.job() for r in rows[:limit]]

    def list_newer(self, flt: JobFilter, limit: int, above: int) -> list[Job]:
        with self._s.lock:
            rows = [r for r in self._s.rows.values() if r.seq > above and r.matches(flt)]
            return [r.job() for r in rows[:limit]]

    def stats(self) -> Stats:
        with self._s.lock:
            now = self._s.now()
            counts: dict[str, dict[JobState, int]] = {}
            oldest: dict[str, datetime] = {}
            for row in self._s.rows.values():
                per_queue = counts.setdefault(row.queue, {})
                per_queue[row.state] = per_queue.get(row.state, 0) + 1
                if row.state in CLAIMABLE_STATES and row.run_at <= now:
                    oldest[row.queue] = min(oldest.get(row.queue, row.run_at), row.run_at)
            return Stats(counts=counts, oldest_due_age={q: now - t for q, t in oldest.items()})

    def dead_letters(self, queue: str | None, limit: int) -> list[Job]:
        with self._s.lock:
            rows = [r for r in self._s.rows.values() if r.state is DEAD and queue in (None, r.queue)]
            rows.sort(key=lambda r: (r.finished_at, r.seq), reverse=True)
            return [r.job() for r in rows[:limit]]

    def finished_counts(self, minutes: int) -> list[tuple[datetime, JobState, int]]:
        with self._s.lock:
            since = chart_since(self._s.now(), minutes)
            counts: dict[tuple[datetime, JobState], int] = {}
            for row in self._s.rows.values():
                if row.state in FINISHED_STATES and row.finished_at is not None and row.finished_at >= since:
                    bucket = (row.finished_at.replace(second=0, microsecond=0), row.state)
                    counts[bucket] = counts.get(bucket, 0) + 1
            return [(minute, state, n) for (minute, state), n in counts.items()]

    def rescue(self) -> RescueResult:
        s = self._s
        with s.lock:
            now = s.now()
            requeued, buried = 0, []
            for row in s.lapsed(now):
                if row.attempt >= row.max_attempts:
                    buried.append(s.bury(row, frozenset(), now))
                else:
                    s.error(row, LEASE_EXPIRED, LEASE_EXPIRED_TEXT, now)
                    row.state, row.worker_id, row.lease_expires_at, row.run_at = READY, None, None, now
                    requeued += 1
            return RescueResult(requeued=requeued, buried=tuple(buried))

    def cancel(self, seq: int, states: frozenset[JobState], message: str) -> Job | None:
        with self._s.lock:
            row = self._s.rows.get(seq)
            if row is None or row.state not in states:
                return None
            self._cancel(row, message, self._s.now())
            return row.job()

    def _cancel(self, row: _Row, message: str, now: datetime) -> None:
        self._s.error(row, CANCELLED_ENTRY, message, now)
        self._s.finish(row, CANCELLED, now)

    def requeue(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        with self._s.lock:
            row = self._s.rows.get(seq)
            if row is None:
                return None
            if row.state not in states:
                return Refused(row.state)
            holder = self._s.live_holder(row.name, row.key)
            if holder is not None:
                return Refused(row.state, row.key, str(holder.seq), clash=True)
            now = self._s.now()
            self._requeue(row, now, now)
            return row.job()

    def _requeue(self, row: _Row, now: datetime, due: datetime) -> None:
        row.state = READY if due <= now else SCHEDULED
        row.attempt, row.run_at, row.finished_at, row.result = 0, due, None, None

    def remove(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        with self._s.lock:
            row = self._s.rows.get(seq)
            if row is None:
                return None
            if row.state not in states:
                return Refused(row.state)
            del self._s.rows[seq]
            return row.job()

    def make_due(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        with self._s.lock:
            row = self._s.rows.get(seq)
            if row is None:
                return None
            if row.state not in states:
                return Refused(row.state)
            row.attempt = min(row.attempt, row.max_attempts - 1)  # a resumed job has an attempt left (S05)
            row.state, row.run_at = READY, self._s.now()
            return row.job()

    def _matching(self, flt: JobFilter) -> list[_Row]:
        return [r for r in self._s.rows.values() if r.matches(flt)]

    def cancel_many(self, flt: JobFilter, limit: int, message: str) -> BulkResult:
        with self._s.lock:
            rows, now = self._matching(flt), self._s.now()
            for row in rows[:limit]:
                self._cancel(row, message, now)
            return BulkResult(affected=min(limit, len(rows)), remaining=max(0, len(rows) - limit))

    def _requeueable(self, flt: JobFilter) -> list[_Row]:
        """Matching rows a requeue may move: none whose key a live job holds, one per (name, key)."""
        rows, seen = [], set()
        for row in self._matching(flt):
            if row.key is not None:
                if (row.name, row.key) in seen or self._s.live_holder(row.name, row.key) is not None:
                    continue
                seen.add((row.name, row.key))
            rows.append(row)
        return rows

    def requeue_many(self, flt: JobFilter, limit: int, spacing: Spacing) -> BulkResult:
        with self._s.lock:
            now = self._s.now()
            rows = self._requeueable(flt)[:limit]
            for row, offset in zip(rows, spacing(len(rows)), strict=True):
                self._requeue(row, now, now + offset)
            return BulkResult(affected=len(rows), remaining=len(self._requeueable(flt)))

    def remove_many(self, flt: JobFilter, limit: int) -> BulkResult:
        with self._s.lock:
            rows = self._matching(flt)
            for row in rows[:limit]:
                del self._s.rows[row.seq]
            return BulkResult(affected=min(limit, len(rows)), remaining=max(0, len(rows) - limit))

    def promote_many(self, flt: JobFilter, limit: int) -> BulkResult:
        with self._s.lock:
            rows, now = self._matching(flt), self._s.now()
            for row in rows[:limit]:
                row.state, row.run_at = READY, now
            return BulkResult(affected=min(limit, len(rows)), remaining=max(0, len(rows) - limit))

    def prune(self, ages: Mapping[JobState, timedelta], limit: int, batch: int, dry_run: bool) -> PruneResult:
        s = self._s
        with s.lock:
            cutoffs = prune_cutoffs(ages, s.now())
        removed = dict.fromkeys(cutoffs, 0)
        total = 0
        while not dry_run and total < limit:
            with s.lock:  # one batch per hold of the lock: claims interleave with a long prune (R02)
                rows = sorted(self._prunable(cutoffs), key=lambda r: (r.finished_at, r.seq))
                rows = rows[: min(batch, limit - total)]
                for row in rows:
                    del s.rows[row.seq]
                    removed[row.state] += 1
            total += len(rows)
            if len(rows) < batch:
                break
        with s.lock:
            remaining = dict.fromkeys(cutoffs, 0)
            for row in self._prunable(cutoffs):
                remaining[row.state] += 1
        return PruneResult(removed=removed, remaining=remaining)

    def _prunable(self, cutoffs: dict[JobState, datetime]) -> list[_Row]:
        return [
            r for r in self._s.rows.values()
            if r.state in cutoffs and r.finished_at is not None and r.finished_at <= cutoffs[r.state]
        ]


# -- fleet leases (LeasesBackend) -------------------------------------------------------------


class MinimalLeases:
    """Counted slots with expiry (:class:`~jobcore.door.LeasesBackend`): ``{key: {holder: expires}}``."""

    def __init__(self, store: _Store) -> None:
        self._s = store
        self._slots: dict[str, dict[str, datetime]] = {}

    def acquire(self, key: str, limit: int, holder: str, ttl: timedelta) -> bool:
        with self._s.lock:
            now = self._s.now()
            slots = {h: t for h, t in self._slots.get(key, {}).items() if t > now}  # expired slots never count
            if holder not in slots and len(slots) >= limit:
                return False
            slots[holder] = to_millis(now + ttl)
            self._slots[key] = slots
            return True

    def renew(self, key: str, holder: str, ttl: timedelta) -> bool:
        with self._s.lock:
            now = self._s.now()
            slots = self._slots.get(key, {})
            if holder not in slots or slots[holder] <= now:  # a lost slot is never revived
                return False
            slots[holder] = to_millis(now + ttl)
            return True

    def release(self, key: str, holder: str) -> bool:
        with self._s.lock:
            return self._slots.get(key, {}).pop(holder, None) is not None

    def slots(self, key: str | None, limit: int) -> list[LeaseSlot]:
        with self._s.lock:
            now = self._s.now()
            held = self._slots if key is None else {key: self._slots.get(key, {})}
            live = sorted((k, h, t) for k, slots in held.items() for h, t in slots.items() if t > now)
        return [LeaseSlot(key=k, holder=h, expires_at=t) for k, h, t in live[:limit]]


# -- periodic schedules (SchedulesBackend) ----------------------------------------------------


class MinimalSchedules:
    """Declarations and watermarks (:class:`~jobcore.door.SchedulesBackend`), each kept as a dict."""

    def __init__(self, store: _Store) -> None:
        self._s = store
        self._entries: dict[str, dict[str, Any]] = {}

    def _answer(self, entry: dict[str, Any]) -> Schedule:
        return Schedule(**{**entry, "definition": json.loads(entry["definition"])})

    def declare(self, name: str, definition: str, start: datetime | None) -> Schedule:
        with self._s.lock:
            now = self._s.now()
            entry = self._entries.get(name)
            if entry is None:
                entry = self._entries[name] = {
                    "name": name, "definition": definition, "watermark": now if start is None else start,
                    "paused": False, "last_fired_at": None, "last_outcome": None, "last_job_id": None,
                    "created_at": now, "updated_at": now,
                }
            elif entry["definition"] != definition:
                entry.update(definition=definition, updated_at=now)
            return self._answer(entry)

    def get(self, name: str) -> Schedule | None:
        with self._s.lock:
            entry = self._entries.get(name)
            return None if entry is None else self._answer(entry)

    def list(self) -> list[Schedule]:
        with self._s.lock:
            return [self._answer(entry) for entry in self._entries.values()]

    def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: StoreTimedJob | None,
        outcome: ScheduleOutcome, overlap: bool,
    ) -> Schedule | None:
        s = self._s
        with s.lock:  # the compare-and-set and the enqueue in one step (P01)
            entry = self._entries.get(name)
            if entry is None or entry["paused"] or entry["watermark"] != expected:
                return None
            now = s.now()
            entry.update(watermark=occurrence, last_fired_at=now, updated_at=now)
            last = entry["last_job_id"]
            last_row = None if last is None else s.rows.get(int(last))
            if not overlap and last_row is not None and last_row.state in LIVE_STATES:
                entry["last_outcome"] = ScheduleOutcome.SKIPPED_OVERLAP  # P03
            else:
                entry["last_outcome"] = outcome
                if job is not None:
                    entry["last_job_id"] = str(s.insert(job, now)[0].seq)
            return self._answer(entry)

    def pause(self, name: str) -> Schedule | None:
        with self._s.lock:
            entry = self._entries.get(name)
            if entry is not None and not entry["paused"]:
                entry.update(paused=True, updated_at=self._s.now())
            return None if entry is None else self._answer(entry)

    def resume(self, name: str) -> Schedule | None:
        with self._s.lock:
            entry = self._entries.get(name)
            if entry is not None and entry["paused"]:
                now = self._s.now()
                entry.update(paused=False, watermark=max(entry["watermark"], now), updated_at=now)
            return None if entry is None else self._answer(entry)

    def remove(self, name: str) -> bool:
        with self._s.lock:
            return self._entries.pop(name, None) is not None


# -- the driver and its factory -------------------------------------------------------------


class MinimalDriver(FrontDoor):
    """The driver users get: the front door over the four backends above, sharing one store.

    Args:
        clock: The store's clock (default: UTC wall time).
        default_max_attempts: ``max_attempts`` for jobs enqueued without one.
    """

    def __init__(self, *, clock: Clock | None = None, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        store = _Store(clock if clock is not None else SystemClock())
        super().__init__(MinimalJobs(store), default_max_attempts=default_max_attempts)
        self.introspect = IntrospectDoor(MinimalIntrospect(store))
        self.leases = LeasesDoor(MinimalLeases(store))
        self.schedules = SchedulesDoor(MinimalSchedules(store), default_max_attempts=default_max_attempts)


class AsyncMinimalDriver(AsyncFrontDoor):
    """The async flavour: the same four backends, awaited on the event loop.

    They keep the store in the process and never wait on I/O, so :class:`~jobcore.door.Awaiting`
    turns each into its async protocol with no thread; a driver over a network store writes
    async backends instead (see docs/writing-a-driver.md).
    """

    def __init__(self, *, clock: Clock | None = None, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        store = _Store(clock if clock is not None else SystemClock())
        super().__init__(Awaiting(MinimalJobs(store)), default_max_attempts=default_max_attempts)  # type: ignore[arg-type]
        self.introspect = AsyncIntrospectDoor(Awaiting(MinimalIntrospect(store)))  # type: ignore[arg-type]
        self.leases = AsyncLeasesDoor(Awaiting(MinimalLeases(store)))  # type: ignore[arg-type]
        self.schedules = AsyncSchedulesDoor(
            Awaiting(MinimalSchedules(store)), default_max_attempts=default_max_attempts,  # type: ignore[arg-type]
        )


@contextlib.asynccontextmanager
async def async_driver_factory(clock: Clock | None) -> AsyncIterator[AsyncMinimalDriver]:
    """The async flavour's factory, for :func:`jobcore._bridge.bridged_factory`."""
    async with AsyncMinimalDriver(clock=clock) as driver:
        yield driver


@contextlib.contextmanager
def driver_factory(clock: Clock | None) -> Iterator[MinimalDriver]:
    """The parity suite's driver factory: a fresh, empty driver on ``clock`` (``None``: its own)."""
    driver = MinimalDriver(clock=clock)
    try:
        yield driver
    finally:
        driver.close()

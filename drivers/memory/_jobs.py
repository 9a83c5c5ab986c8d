"""The memory driver's :class:`~jobcore.door.JobsBackend`: the store itself, under one lock.

One lock guards all state, so many threads may claim, heartbeat and settle at once;
wake-ups are delivered to subscribers after the lock is released. Every argument
arrives checked by the front door (:class:`~jobcore.door.FrontDoor`).

Claimable jobs sit in per-queue heaps: ``_due`` ordered by (-priority, run_at, seq)
and ``_later`` ordered by run_at, plus ``_leases`` ordered by lease expiry. Heap
entries are never removed in place; an entry is checked against its row when popped
and dropped when stale.
"""

from __future__ import annotations

import heapq
import itertools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from jobcore import validate as v
from jobcore.clock import Clock, to_millis
from jobcore.errors import DependencyInvalid, DependencyNotFound
from jobcore.records import (
    Claimed,
    ClaimResult,
    ClaimToken,
    Job,
    JobError,
    JobFilter,
    JobState,
    Migration,
    Progress,
)
from jobcore.vocabulary import (
    CANCELLED_ENTRY,
    CLAIMABLE_STATES,
    LEASE_EXPIRED,
    LEASE_EXPIRED_TEXT,
    LEASE_LAPSED_FINAL,
    lease_lapsed_final_text,
    parent_ended_text,
)

__all__ = ["MemoryJobs"]

READY, SCHEDULED, RUNNING, SUSPENDED = JobState.READY, JobState.SCHEDULED, JobState.RUNNING, JobState.SUSPENDED
DONE, FAILED, DEAD, CANCELLED = JobState.DONE, JobState.FAILED, JobState.DEAD, JobState.CANCELLED
_ENDED_OTHERWISE = (FAILED, DEAD, CANCELLED)
_FINISHED_NAMES = frozenset(s.value for s in (DONE, *_ENDED_OTHERWISE))
_CLAIMABLE = tuple(CLAIMABLE_STATES)  # a tuple: ``in`` compares by identity, no enum hashing on the claim path


_raw_decode = json.JSONDecoder().raw_decode


def _loads(text: str) -> Any:
    """Decode stored JSON: it is canonical (no surrounding whitespace), so ``raw_decode`` suffices."""
    return _raw_decode(text)[0]


class _Row:
    """One stored job; mutated only under the driver's lock."""

    __slots__ = (
        "attempt", "attempted_at", "claim_no", "created_at", "errors", "finished_at", "held", "key",
        "lease_expires_at", "max_attempts", "name", "parents", "payload", "priority", "progress", "queue",
        "result", "run_anyway", "run_at", "seq", "state", "trace", "waiting", "worker_id",
    )

    def __init__(
        self, seq: int, new: v.NewJob | v.StoreTimedJob, now: datetime, run_at: datetime, state: JobState
    ) -> None:
        self.seq = seq
        self.name = new.name
        self.queue = new.queue
        self.payload = new.payload
        self.state = state
        self.priority = new.priority
        self.attempt = 0
        self.max_attempts = new.max_attempts
        self.run_at = run_at
        self.created_at = now
        self.attempted_at: datetime | None = None
        self.finished_at: datetime | None = None
        self.worker_id: str | None = None
        self.claim_no = 0
        self.held = False  # running under a claim whose attempt has not started (F04)
        self.lease_expires_at: datetime | None = None
        self.key = new.key
        self.result: str | None = None
        self.errors: list[JobError] = []
        self.progress: Progress | None = None
        self.trace = new.trace_context  # the door's own dict, never handed out (copied in job())
        self.parents: tuple[int, ...] = ()  # rules D: the jobs this one depends on
        self.run_anyway = False  # on_parent_failure="run"
        self.waiting = False  # suspended until its parents are done (D01), not parked

    def job(self, *, duplicate: bool = False, started: datetime | None = None) -> Job:
        """The row as a record; with ``started``, as a held attempt will stand once started
        then (F04): ``attempt`` moved by one, ``attempted_at`` set. The JSON is decoded
        afresh each time, so no caller can change what the store holds."""
        errors = tuple(self.errors)
        # Positionally (the fields' declaration order): every claim and settle builds one.
        return Job.positional(
            str(self.seq), self.name, self.queue, _loads(self.payload), self.state, self.priority,
            self.attempt if started is None else self.attempt + 1, self.max_attempts, self.run_at, self.created_at,
            self.attempted_at if started is None else started, self.finished_at, self.worker_id, self.claim_no,
            self.lease_expires_at, self.key, None if self.result is None else _loads(self.result),
            errors[-1] if errors else None, errors, self.progress,
            None if self.trace is None else dict(self.trace), duplicate,
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


class _Subscription:
    def __init__(self, store: MemoryJobs, entry: tuple[frozenset[str], Callable[[str], None]]) -> None:
        self._store, self._entry = store, entry

    def close(self) -> None:
        with self._store._lock:
            if self._entry in self._store._subscribers:
                self._store._subscribers.remove(self._entry)


class _Watch:
    """A ``wait``'s watch on one job (A02): ``close()`` stops its wake-ups."""

    def __init__(self, store: MemoryJobs, seq: int, wake: Callable[[], None]) -> None:
        self._store, self._seq, self._wake = store, seq, wake

    def close(self) -> None:
        with self._store._lock:
            waiting = self._store._watchers.get(self._seq)
            if waiting is not None and self._wake in waiting:
                waiting.remove(self._wake)
                if not waiting:
                    del self._store._watchers[self._seq]


class MemoryJobs:
    """Jobs in dicts and heaps (:class:`~jobcore.door.JobsBackend`), for the memory driver.

    Args:
        clock: Source of "now"; the store's clock for every decision (F01).
    """

    capabilities = frozenset(
        {"notify", "finish_notify", "ack_landed_only", "deferred_start", "dependencies", "heartbeat_many"}
    )

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self._rows: dict[int, _Row] = {}
        self._live_keys: dict[tuple[str, str], int] = {}
        self._due: dict[str, list[tuple[int, datetime, int]]] = {}
        self._later: dict[str, list[tuple[datetime, int]]] = {}
        self._leases: dict[str, list[tuple[datetime, int, int]]] = {}
        self._subscribers: list[tuple[frozenset[str], Callable[[str], None]]] = []
        self._watchers: dict[int, list[Callable[[], None]]] = {}
        self._children: dict[int, list[int]] = {}  # parent seq -> its children's seqs (rules D)
        self._settling: list[tuple[int, str | None]] | None = None  # parents whose children are being settled
        self._released: set[str] = set()  # queues a parent's end made a child due in, to wake

    # -- internals (call with the lock held) -------------------------------------------

    def _now(self) -> datetime:
        return to_millis(self.clock.now())

    def _schedule(self, row: _Row, now: datetime) -> None:
        """Index a ready/scheduled row in its queue's heaps."""
        if row.run_at <= now:
            heapq.heappush(self._due.setdefault(row.queue, []), (-row.priority, row.run_at, row.seq))
        else:
            heapq.heappush(self._later.setdefault(row.queue, []), (row.run_at, row.seq))

    def _insert(self, new: v.NewJob | v.StoreTimedJob, now: datetime) -> tuple[_Row, bool]:
        """Store ``new`` (its due time resolved on ``now`` unless already resolved), or answer
        the live holder of its key (E02)."""
        if new.key is not None:
            holder = self._live_keys.get((new.name, new.key))
            if holder is not None:
                return self._rows[holder], True
        if type(new) is v.StoreTimedJob:
            run_at, state = new.due(now)
        else:  # a NewJob (the schedules' fire): resolved already
            run_at, state = new.run_at, new.state  # type: ignore[union-attr,assignment]
        row = _Row(next(self._seq), new, now, run_at, state)
        self._rows[row.seq] = row
        if row.key is not None:
            self._live_keys[(row.name, row.key)] = row.seq
        self._schedule(row, now)
        return row, False

    def _finish(self, row: _Row, state: JobState, now: datetime) -> None:
        row.held = False
        row.state = state
        row.finished_at = now
        row.lease_expires_at = None
        row.worker_id = None
        row.waiting = False
        if row.key is not None and self._live_keys.get((row.name, row.key)) == row.seq:
            del self._live_keys[(row.name, row.key)]
        for wake in self._watchers.get(row.seq, ()):  # waiters on this job (A02); each call is quick
            wake()
        if self._children and row.seq in self._children:  # a parent (rules D): settle its waiting children
            self._settle_children(row.seq, now, None)

    # -- dependencies (rules D), lock held -------------------------------------------------

    def _verdict(self, child: _Row) -> tuple[int, str] | bool:
        """What a waiting child's parents call for: ``(parent, state)`` to cancel it for
        (D02), ``True`` to make it due (D01), ``False`` to keep it waiting. A parent no
        longer stored was removed once finished (removing an unfinished one settles its
        children first), so it counts as done."""
        live = False
        for seq in child.parents:
            parent = self._rows.get(seq)
            if parent is None or parent.state is DONE:
                continue
            if parent.state in _ENDED_OTHERWISE:
                if not child.run_anyway:
                    return seq, parent.state.value
            else:
                live = True
        return not live

    def _settle_children(self, parent: int, now: datetime, removed: str | None) -> None:
        """Release or cancel the waiting children of ``parent``, which just finished or (with
        ``removed``, its state then) was removed; cancellations cascade to their own children,
        iteratively (a chain of any length)."""
        if self._settling is not None:  # called from a cancellation below: queue it
            self._settling.append((parent, removed))
            return
        self._settling = [(parent, removed)]
        try:
            while self._settling:
                seq, gone = self._settling.pop()
                for child_seq in self._children.get(seq, ()):
                    child = self._rows.get(child_seq)
                    if child is None or not child.waiting:
                        continue
                    verdict: tuple[int, str] | bool
                    if gone is not None and gone not in _FINISHED_NAMES and not child.run_anyway:
                        verdict = (seq, "removed")  # removed before it finished (D05)
                    else:
                        verdict = self._verdict(child)
                    if verdict is True:
                        child.waiting = False
                        child.state = READY if child.run_at <= now else SCHEDULED
                        self._schedule(child, now)
                        if child.state is READY:
                            self._released.add(child.queue)
                    elif verdict is not False:
                        self._error(child, CANCELLED_ENTRY, parent_ended_text(str(verdict[0]), verdict[1]), now)
                        self._finish(child, CANCELLED, now)  # queues its own children
                if gone is not None:
                    self._children.pop(seq, None)
        finally:
            self._settling = None

    def _forget_parent(self, row: _Row, now: datetime) -> None:
        """``row`` (a parent) was just removed: settle its waiting children (D05)."""
        if self._children and row.seq in self._children:
            self._settle_children(row.seq, now, row.state.value)

    def _wake_released(self) -> None:
        """Wake the queues children were made due in (call without the lock held)."""
        if self._released:
            with self._lock:
                queues, self._released = self._released, set()
            self._wake(queues)

    def relatives(self, seq: int) -> tuple[list[Job], list[Job]] | None:
        """Job ``seq``'s stored parents and children, oldest first; ``None`` when it is unknown."""
        with self._lock:
            row = self._rows.get(seq)
            if row is None:
                return None
            parents = [self._rows[p].job() for p in sorted(row.parents) if p in self._rows]
            kids = [self._rows[c].job() for c in sorted(self._children.get(seq, ())) if c in self._rows]
            return parents, kids

    def insert_linked(
        self, jobs: Sequence[v.StoreTimedJob], links: Sequence[v.Links | None], connection: Any
    ) -> list[Job]:
        """:meth:`insert` with parents (rules D): every parent checked before anything is written (D04)."""
        with self._lock:
            now = self._now()
            for index, link in enumerate(links):
                for job_id in () if link is None else link.ids:
                    seq = _seq_of(job_id)
                    parent = None if seq is None else self._rows.get(seq)
                    if parent is None:
                        where = f"spec {index} " if len(jobs) > 1 else ""
                        raise DependencyNotFound(f"{where}depends on job {job_id!s:.60}, which the store does not hold")
                    if parent.state in _ENDED_OTHERWISE and not link.run_anyway:  # type: ignore[union-attr]
                        raise DependencyInvalid(
                            f"job {job_id!s:.60} already ended {parent.state.value}: it will never be done",
                            'requeue the parent first, or pass on_parent_failure="run"',
                        )
            rows: list[tuple[_Row, bool]] = []
            for new, link in zip(jobs, links, strict=True):
                row, duplicate = self._insert(new, now)
                rows.append((row, duplicate))
                if duplicate or link is None:
                    continue
                parents = [int(job_id) for job_id in link.ids] + [rows[i][0].seq for i in link.earlier]
                row.parents, row.run_anyway = tuple(dict.fromkeys(p for p in parents if p != row.seq)), link.run_anyway
                for seq in row.parents:
                    self._children.setdefault(seq, []).append(row.seq)
                if self._verdict(row) is False:
                    row.state, row.waiting = SUSPENDED, True
            answers = [row.job(duplicate=dup) for row, dup in rows]
        self._wake({j.queue for j in answers if j.state is READY and not j.duplicate})
        return answers

    def _error(self, row: _Row, type_name: str, message: str, now: datetime) -> None:
        row.errors.append(JobError(type=type_name, message=message, at=now, attempt=row.attempt))

    def _current(self, token: ClaimToken) -> _Row | None:
        """The row ``token`` still holds, or None (L02, L03)."""
        seq = _seq_of(token.job_id)
        row = None if seq is None or v.token_claim_no(token) is None else self._rows.get(seq)
        if (
            row is None
            or row.state is not RUNNING
            or row.worker_id != token.worker_id
            or row.claim_no != token.claim_no
        ):
            return None
        return row

    def _lapsed(self, queue: str, now: datetime) -> list[_Row]:
        """Pop every running row of ``queue`` whose lease lapsed (stale entries dropped)."""
        heap = self._leases.get(queue)
        # keyed by seq: a heartbeat that repeats an expiry leaves twin heap entries
        found: dict[int, _Row] = {}
        while heap and heap[0][0] <= now:
            expires, seq, claim_no = heapq.heappop(heap)
            row = self._rows.get(seq)
            if row is None or row.state is not RUNNING:
                continue
            if row.claim_no == claim_no and row.lease_expires_at == expires:
                found[seq] = row
        return list(found.values())

    def _bury(self, row: _Row, drop: frozenset[str], now: datetime) -> Job:
        self._error(row, LEASE_LAPSED_FINAL, lease_lapsed_final_text(row.attempt, row.max_attempts), now)
        self._finish(row, FAILED if row.name in drop else DEAD, now)
        return row.job()

    def _release_lapsed(self, row: _Row, now: datetime) -> None:
        """Record the lost attempt of a lapsed row with attempts left (C07); a held one lost nothing (F04)."""
        if row.held:
            row.held = False
        else:
            self._error(row, LEASE_EXPIRED, LEASE_EXPIRED_TEXT, now)

    def _begin(self, row: _Row, now: datetime) -> None:
        """Start the held attempt of ``row`` (F04): it counts from here."""
        if row.held:
            row.held = False
            row.attempt += 1
            row.attempted_at = now

    def _peek_due(self, queue: str, now: datetime) -> _Row | None:
        later = self._later.get(queue)
        while later and later[0][0] <= now:
            _, seq = heapq.heappop(later)
            row = self._rows.get(seq)
            if row is not None and row.state in _CLAIMABLE and row.run_at <= now:
                heapq.heappush(self._due.setdefault(queue, []), (-row.priority, row.run_at, row.seq))
        heap = self._due.get(queue)
        while heap:
            neg_priority, run_at, seq = heap[0]
            row = self._rows.get(seq)
            live = row is not None and row.state in _CLAIMABLE
            if not live or (row.run_at, row.priority) != (run_at, -neg_priority):  # type: ignore[union-attr]
                heapq.heappop(heap)
                continue
            if run_at > now:  # the clock was set back: not due after all
                heapq.heappop(heap)
                heapq.heappush(self._later.setdefault(queue, []), (run_at, seq))
                continue
            return row
        return None

    def _take(self, row: _Row, worker: str, expires: datetime, now: datetime, start: bool) -> Claimed:
        row.state = RUNNING
        row.worker_id = worker
        row.claim_no += 1
        row.progress = None  # progress belongs to an attempt: a new claim starts without (G04)
        row.held = not start
        if start:
            row.attempt += 1
            row.attempted_at = now
        row.lease_expires_at = expires
        heapq.heappush(self._leases.setdefault(row.queue, []), (row.lease_expires_at, row.seq, row.claim_no))
        job = row.job(started=None if start else now)
        return Claimed.positional(job, ClaimToken.positional(job.id, worker, job.claim_no))

    def _wake(self, queues: Iterable[str]) -> None:
        """Tell subscribers of ``queues`` (call without the lock held)."""
        wanted = set(queues)
        with self._lock:
            targets = [(q, cb) for names, cb in self._subscribers for q in wanted & names]
        for queue, callback in targets:
            callback(queue)

    # -- the backend verbs: arguments arrive checked ---------------------------------------

    def insert(self, jobs: Sequence[v.StoreTimedJob], connection: Any) -> list[Job]:
        with self._lock:
            now = self._now()
            if len(jobs) == 1:  # the common case: one job, one possible wake-up
                row, duplicate = self._insert(jobs[0], now)
                job = row.job(duplicate=duplicate)
                answers = [job]
            else:
                answers = [row.job(duplicate=dup) for row, dup in (self._insert(new, now) for new in jobs)]
        if len(answers) == 1:
            if not job.duplicate and job.state is READY:
                self._wake((job.queue,))
        else:
            self._wake({j.queue for j in answers if j.state is READY and not j.duplicate})
        return answers

    def claim(
        self, queues: tuple[str, ...], worker_id: str, limit: int, lease: timedelta, *, drop: frozenset[str],
        start: bool,
    ) -> ClaimResult:
        names, worker, size, span, begin = queues, worker_id, limit, lease, start
        with self._lock:
            now = self._now()
            expires = to_millis(now + span)
            buried: list[Job] = []
            reclaim: list[_Row] = []
            for queue in names:
                for row in self._lapsed(queue, now):
                    if row.attempt >= row.max_attempts and not row.held:
                        buried.append(self._bury(row, drop, now))
                    else:
                        reclaim.append(row)
            reclaim.sort(key=lambda r: (-r.priority, r.run_at, r.seq))
            claimed: list[Claimed] = []
            for row in reclaim:
                if len(claimed) < size:
                    self._release_lapsed(row, now)
                    claimed.append(self._take(row, worker, expires, now, begin))
                else:  # not taken this time: keep it findable by the next claim
                    assert row.lease_expires_at is not None
                    heapq.heappush(self._leases[row.queue], (row.lease_expires_at, row.seq, row.claim_no))
            while len(claimed) < size:
                best: _Row | None = None
                for queue in names:
                    due = self._peek_due(queue, now)
                    if due is not None and (
                        best is None or (-due.priority, due.run_at, due.seq) < (-best.priority, best.run_at, best.seq)
                    ):
                        best = due
                if best is None:
                    break
                heapq.heappop(self._due[best.queue])
                claimed.append(self._take(best, worker, expires, now, begin))
            return ClaimResult(claimed=tuple(claimed), buried=tuple(buried))

    def heartbeat(self, token: ClaimToken, lease: timedelta) -> bool:
        return self.heartbeat_many([token], lease)[0]

    def heartbeat_many(self, tokens: list[ClaimToken], lease: timedelta) -> list[bool]:
        with self._lock:
            expires = to_millis(self._now() + lease)
            answers = []
            for token in tokens:
                row = self._current(token)
                if row is not None:
                    row.lease_expires_at = expires
                    heapq.heappush(self._leases.setdefault(row.queue, []), (expires, row.seq, row.claim_no))
                answers.append(row is not None)
            return answers

    def progress(self, token: ClaimToken, value: float | None, message: str | None) -> bool:
        with self._lock:
            row = self._current(token)
            if row is None:
                return False
            row.progress = Progress(value=value, message=message, updated_at=self._now())
            return True

    def start(self, tokens: list[ClaimToken]) -> list[bool]:
        with self._lock:
            now = self._now()
            answers = []
            for token in tokens:
                row = self._current(token)
                if row is not None:
                    self._begin(row, now)
                answers.append(row is not None)
            return answers

    def ack_many(self, items: list[tuple[ClaimToken, str | None]], landed_only: bool) -> list[Any]:
        answers: list[Any] = []
        with self._lock:
            now = self._now()
            for token, text in items:
                row = self._current(token)
                if row is None:
                    answers.append(False if landed_only else None)
                    continue
                self._begin(row, now)
                row.result = text
                self._finish(row, DONE, now)
                answers.append(True if landed_only else row.job())
        self._wake_released()
        return answers

    def nack(
        self, token: ClaimToken, type_name: str, message: str, retry_at: datetime | None, *,
        dead_letter: bool, fail: bool, counts_as_attempt: bool, park: bool,
    ) -> Job | None:
        with self._lock:
            now = self._now()
            row = self._current(token)
            if row is None:
                return None
            self._begin(row, now)
            self._error(row, type_name, message, now)
            if not counts_as_attempt:
                row.attempt -= 1
            row.lease_expires_at = None
            row.worker_id = None
            if fail:
                self._finish(row, FAILED, now)
            elif park:
                row.state = SUSPENDED
            elif row.attempt >= row.max_attempts:
                self._finish(row, DEAD if dead_letter else FAILED, now)
            else:
                row.state = SCHEDULED
                row.run_at = now if retry_at is None else retry_at
                self._schedule(row, now)
            job = row.job()
        if job.state is SCHEDULED and job.run_at <= now:
            self._wake((job.queue,))
        self._wake_released()
        return job

    def subscribe(self, queues: frozenset[str], callback: Callable[[str], None]) -> _Subscription:
        entry = (queues, callback)
        with self._lock:
            self._subscribers.append(entry)
        return _Subscription(self, entry)

    def watch(self, seq: int, wake: Callable[[], None]) -> _Watch:
        """Call ``wake()`` whenever job ``seq`` finishes (A02), under the store's lock, until closed."""
        with self._lock:
            self._watchers.setdefault(seq, []).append(wake)
        return _Watch(self, seq, wake)

    def migrate(self, dry_run: bool) -> Migration:
        """Nothing to install in memory."""
        return Migration(before=None, after=None, latest=None, applied=not dry_run)

    def close(self) -> None:
        with self._lock:
            self._subscribers.clear()
            self._watchers.clear()

    def __repr__(self) -> str:
        return f"jobs={len(self._rows)}, clock={self.clock!r}"


def _seq_of(job_id: object) -> int | None:
    """The sequence an id this driver made names, or None (O09).

    Only ASCII digits in canonical form: ``int()`` alone would also take a fullwidth
    digit, "+1", " 1" or "1_0" and answer some other job, and raises on a superscript.
    """
    if not isinstance(job_id, str) or not (job_id.isascii() and job_id.isdigit()) or len(job_id) > 19:
        return None
    return int(job_id) if job_id == str(int(job_id)) else None

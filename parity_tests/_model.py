"""A small, obviously correct reference model of one job store, for the stateful parity test.

It is written from RULES.md and the protocol docstrings alone and shares no code with
any driver: a dict of plain job records, scanned in full on every call, with no
indexes, heaps or caches that could go stale. Time is an argument of every call (the
test reads it from the ManualClock it also gives the driver). Ids are the model's own
enqueue sequence numbers; the test maps them to the driver's opaque ids.

Every state change goes through :meth:`Model._move`, which refuses (``KeyError``) a move
that :data:`jobcore.states.TRANSITIONS` does not list and counts the ones it makes
(``Model.moves``), so the stateful test can fail a run that never took an edge. Times
are truncated to the millisecond here (:func:`millis`), not by any driver helper.

Refusals are raised as :class:`Refused` carrying the error class name and code the
driver must raise. Error history entries whose message no rule pins (the burial text,
the default cancel reason) keep ``None`` as their message and are compared by type,
time and attempt only.
"""

from __future__ import annotations

import collections
import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

from jobcore.states import NEW, Transition, transition

__all__ = ["LEASE_EXPIRED_TEXT", "MError", "MJob", "MToken", "Model", "Refused", "millis"]

LIVE = frozenset({"scheduled", "ready", "running", "suspended"})
FINISHED = frozenset({"done", "failed", "dead", "cancelled"})
LEASE_EXPIRED_TEXT = "lease expired before the attempt finished"


def millis(value: datetime) -> datetime:
    """``value`` in UTC, truncated (not rounded) to the millisecond every store keeps."""
    value = value.astimezone(timezone.utc)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


class Refused(Exception):
    """The call must be refused with the named jobcore error class and code."""

    def __init__(self, name: str, code: str) -> None:
        super().__init__(f"{name} ({code})")
        self.name = name
        self.code = code


@dataclasses.dataclass(frozen=True)
class MError:
    """One error history entry; ``message`` is ``None`` where no rule pins the text."""

    type: str
    message: str | None
    at: datetime
    attempt: int


@dataclasses.dataclass(frozen=True)
class MToken:
    """A claim token in model terms: (model id, worker, claim number)."""

    seq: int
    worker: str
    claim_no: int


@dataclasses.dataclass
class MJob:
    """One job as the rules say the store must hold it."""

    seq: int
    name: str
    queue: str
    payload: Any
    priority: int
    max_attempts: int
    key: str | None
    run_at: datetime
    created_at: datetime
    state: str
    attempt: int = 0
    claim_no: int = 0
    attempted_at: datetime | None = None
    finished_at: datetime | None = None
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    result: Any = None
    errors: list[MError] = dataclasses.field(default_factory=list)
    held: bool = False  # claimed with start=False, not started yet (F04)

    def copy(self) -> MJob:
        return dataclasses.replace(self, errors=list(self.errors))


class Model:
    """The whole store: ``jobs`` by model id, in enqueue order."""

    def __init__(self) -> None:
        self.jobs: dict[int, MJob] = {}
        self._next = 1
        self.moves: collections.Counter[Transition] = collections.Counter()
        """How often each listed transition happened."""
        self.removed: collections.Counter[str] = collections.Counter()
        """Jobs deleted, by verb (``remove``, ``remove_many``, ``prune``)."""

    def _move(self, job: MJob, target: str, trigger: str) -> None:
        """Move ``job`` to ``target``: only along an edge of the state machine table."""
        self.moves[transition(job.state, target, trigger)] += 1
        job.state = target

    def _delete(self, job: MJob, verb: str) -> None:
        del self.jobs[job.seq]
        self.removed[verb] += 1

    # -- helpers ---------------------------------------------------------------------

    def _key_holder(self, name: str, key: str) -> MJob | None:
        for job in self.jobs.values():
            if job.name == name and job.key == key and job.state in LIVE:
                return job
        return None

    def current(self, token: MToken) -> MJob | None:
        """The job ``token`` still holds (L01-L03), else ``None``."""
        job = self.jobs.get(token.seq)
        if job is None or job.state != "running":
            return None
        if job.worker_id != token.worker or job.claim_no != token.claim_no:
            return None
        return job

    @staticmethod
    def _begin(job: MJob, now: datetime) -> None:
        """F04: a held attempt starts (and counts) here."""
        if job.held:
            job.held = False
            job.attempt += 1
            job.attempted_at = now

    def _finish(self, job: MJob, state: str, now: datetime, trigger: str) -> None:
        job.held = False
        self._move(job, state, trigger)
        job.finished_at = now
        job.worker_id = None
        job.lease_expires_at = None

    @staticmethod
    def _lapsed(job: MJob, now: datetime) -> bool:
        return job.state == "running" and job.lease_expires_at is not None and job.lease_expires_at <= now

    @staticmethod
    def _order(job: MJob) -> tuple[int, datetime, int]:
        return (-job.priority, job.run_at, job.seq)

    def _bury(self, job: MJob, dropped: bool, now: datetime, verb: str) -> None:
        job.errors.append(MError("LeaseLapsedFinalAttempt", None, now, job.attempt))
        if dropped:
            self._finish(job, "failed", now, f"{verb}: burial, dropped")
        else:
            self._finish(job, "dead", now, f"{verb}: burial")

    # -- the verbs -------------------------------------------------------------------

    def enqueue(
        self, now: datetime, *, name: str, queue: str, payload: Any, priority: int,
        due: datetime, max_attempts: int, key: str | None,
    ) -> tuple[int, bool]:
        """E01/E02: the new (or holding) job's id and whether it was a duplicate."""
        if key is not None:
            holder = self._key_holder(name, key)
            if holder is not None:
                return holder.seq, True
        seq = self._next
        self._next += 1
        job = self.jobs[seq] = MJob(
            seq=seq, name=name, queue=queue, payload=payload, priority=priority,
            max_attempts=max_attempts, key=key, run_at=due, created_at=now, state=NEW,
        )
        if due <= now:
            self._move(job, "ready", "enqueue: due now")
        else:
            self._move(job, "scheduled", "enqueue: run_at in the future")
        return seq, False

    def claim(
        self, now: datetime, *, queues: tuple[str, ...], worker: str, limit: int, lease: timedelta,
        drop: frozenset[str], start: bool = True,
    ) -> tuple[list[MToken], list[int]]:
        """C01-C08, F04: tokens handed out, in order, and the ids buried by this claim."""
        mine = [j for j in self.jobs.values() if j.queue in queues]
        buried: list[int] = []
        reclaim: list[MJob] = []
        for job in mine:
            if self._lapsed(job, now):
                if job.attempt >= job.max_attempts and not job.held:
                    self._bury(job, job.name in drop, now, "claim")
                    buried.append(job.seq)
                else:
                    reclaim.append(job)
        reclaim.sort(key=self._order)
        due = sorted(
            (j for j in mine if j.state in ("ready", "scheduled") and j.run_at <= now), key=self._order
        )
        tokens: list[MToken] = []
        for job in (reclaim + due)[:limit]:
            if job.state == "running" and not job.held:
                job.errors.append(MError("LeaseExpired", LEASE_EXPIRED_TEXT, now, job.attempt))
            trigger = {"running": "claim: lease lapsed, reclaimed", "scheduled": "claim: once due"}
            self._move(job, "running", trigger.get(job.state, "claim"))
            job.worker_id = worker
            job.claim_no += 1
            job.held = not start
            if start:
                job.attempt += 1
                job.attempted_at = now
            job.lease_expires_at = now + lease
            tokens.append(MToken(job.seq, worker, job.claim_no))
        return tokens, buried

    @staticmethod
    def answered(job: MJob, now: datetime) -> MJob:
        """How a claim answers ``job``: a held one as its attempt will stand once started (F04)."""
        if not job.held:
            return job
        view = job.copy()
        view.attempt += 1
        view.attempted_at = now
        return view

    def start(self, now: datetime, tokens: list[MToken]) -> list[bool]:
        """F04: each current token's held attempt starts; True per current token."""
        answers = []
        for token in tokens:
            job = self.current(token)
            if job is not None:
                self._begin(job, now)
            answers.append(job is not None)
        return answers

    def heartbeat(self, now: datetime, token: MToken, lease: timedelta) -> bool:
        """L01-L03."""
        job = self.current(token)
        if job is None:
            return False
        job.lease_expires_at = now + lease
        return True

    def ack(self, now: datetime, token: MToken, result: Any) -> int | None:
        """S01, fenced as L02/L03."""
        job = self.current(token)
        if job is None:
            return None
        self._begin(job, now)
        job.result = result
        self._finish(job, "done", now, "ack")
        return job.seq

    def nack(
        self, now: datetime, token: MToken, *, type_name: str, message: str, retry_at: datetime | None,
        dead_letter: bool, fail: bool, counts_as_attempt: bool, park: bool,
    ) -> int | None:
        """S02-S05, fenced as L02/L03; fail and park together are refused first."""
        if fail and park:
            raise Refused("OptionInvalid", "JC_OPTION_INVALID")
        job = self.current(token)
        if job is None:
            return None
        self._begin(job, now)
        job.errors.append(MError(type_name, message, now, job.attempt))
        if not counts_as_attempt:
            job.attempt -= 1
        job.worker_id = None
        job.lease_expires_at = None
        if fail:
            self._finish(job, "failed", now, "nack: fail")
        elif park:
            self._move(job, "suspended", "nack: park")
        elif job.attempt >= job.max_attempts:
            if dead_letter:
                self._finish(job, "dead", now, "nack: attempts used up")
            else:
                self._finish(job, "failed", now, "nack: attempts used up, dropped")
        else:
            self._move(job, "scheduled", "nack: attempts left" if counts_as_attempt else "nack: attempt given back")
            job.run_at = now if retry_at is None else retry_at
        return job.seq

    def cancel(self, now: datetime, seq: int | None, reason: str | None) -> int | None:
        """O01."""
        job = self.jobs.get(seq) if seq is not None else None
        if job is None or job.state not in LIVE:
            return None
        job.errors.append(MError("Cancelled", reason, now, job.attempt))
        self._finish(job, "cancelled", now, "cancel")
        return job.seq

    def _existing(self, seq: int | None) -> MJob:
        job = self.jobs.get(seq) if seq is not None else None
        if job is None:
            raise Refused("JobNotFound", "JC_JOB_NOT_FOUND")
        return job

    def requeue(self, now: datetime, seq: int | None) -> int:
        """O02."""
        job = self._existing(seq)
        if job.state not in FINISHED:
            raise Refused("JobNotRequeueable", "JC_JOB_NOT_REQUEUEABLE")
        if job.key is not None and self._key_holder(job.name, job.key) is not None:
            raise Refused("JobDuplicate", "JC_JOB_DUPLICATE")
        self._reopen(job, now, now)
        return job.seq

    def _reopen(self, job: MJob, now: datetime, due: datetime) -> None:
        """O02/O06: a finished job live again, due at ``due``, its attempts and result cleared."""
        if due <= now:
            self._move(job, "ready", "requeue")
        else:
            self._move(job, "scheduled", "requeue_many: spread")
        job.attempt, job.run_at = 0, due
        job.finished_at, job.result = None, None

    def remove(self, seq: int | None) -> MJob | None:
        """O03: the job as it was, or ``None`` when unknown."""
        job = self.jobs.get(seq) if seq is not None else None
        if job is None:
            return None
        if job.state == "running":
            raise Refused("JobNotRemovable", "JC_JOB_NOT_REMOVABLE")
        self._delete(job, "remove")
        return job

    def promote(self, now: datetime, seq: int | None) -> int:
        """O04."""
        job = self._existing(seq)
        if job.state != "scheduled":
            raise Refused("JobNotPromotable", "JC_JOB_NOT_PROMOTABLE")
        self._move(job, "ready", "promote")
        job.run_at = now
        return job.seq

    def resume(self, now: datetime, seq: int | None) -> int:
        """S05: a parked job back to ready, due now, with at least one attempt left."""
        job = self._existing(seq)
        if job.state != "suspended":
            raise Refused("JobNotResumable", "JC_JOB_NOT_RESUMABLE")
        self._move(job, "ready", "resume")
        job.run_at = now
        job.attempt = min(job.attempt, job.max_attempts - 1)
        return job.seq

    def bulk(
        self,
        now: datetime,
        verb: str,
        *,
        queue: str | None,
        name: str | None,
        states: frozenset[str] | None,
        limit: int,
        reason: str | None = None,
    ) -> tuple[int, int]:
        """O05: cancel_many / promote_many / remove_many, oldest first; (affected, remaining)."""
        guard = {"cancel": LIVE, "promote": frozenset({"scheduled"}), "remove": (LIVE | FINISHED) - {"running"}}[verb]
        eligible = [
            job
            for job in self.jobs.values()
            if job.state in guard
            and (queue is None or job.queue == queue)
            and (name is None or job.name == name)
            and (states is None or job.state in states)
        ]
        chosen = eligible[:limit]
        for job in chosen:
            if verb == "cancel":
                job.errors.append(MError("Cancelled", reason, now, job.attempt))
                self._finish(job, "cancelled", now, "cancel")
            elif verb == "promote":
                self._move(job, "ready", "promote")
                job.run_at = now
            else:
                self._delete(job, "remove_many")
        return len(chosen), len(eligible) - len(chosen)

    def requeueable(self, queue: str | None, name: str | None, states: frozenset[str] | None) -> list[MJob]:
        """O06: finished rows the filter names, minus those whose key a live job holds,
        and of rows sharing a name and key only the oldest."""
        rows, keys = [], set()
        for job in self.jobs.values():
            if job.state not in FINISHED or (queue is not None and job.queue != queue):
                continue
            if (name is not None and job.name != name) or (states is not None and job.state not in states):
                continue
            if job.key is not None:
                if self._key_holder(job.name, job.key) is not None or (job.name, job.key) in keys:
                    continue
                keys.add((job.name, job.key))
            rows.append(job)
        return rows

    def requeue_many(
        self, now: datetime, *, queue: str | None, name: str | None, states: frozenset[str] | None,
        limit: int, spread: timedelta | None,
    ) -> tuple[int, int]:
        """O05/O06: (affected, remaining). Row ``i`` of ``n`` is due at ``now + spread * i / n``."""
        chosen = self.requeueable(queue, name, states)[:limit]
        count = len(chosen)
        if spread is None:
            spread = min(timedelta(milliseconds=10 * count), timedelta(seconds=30))
        spread_ms = spread // timedelta(milliseconds=1)
        for index, job in enumerate(chosen):
            offset = spread_ms * index // count if count > 1 else 0
            self._reopen(job, now, now + timedelta(milliseconds=offset))
        return count, len(self.requeueable(queue, name, states))

    def rescue(self, now: datetime) -> tuple[int, list[int]]:
        """C10: (how many requeued, ids buried)."""
        requeued, buried = 0, []
        for job in self.jobs.values():
            if not self._lapsed(job, now):
                continue
            if job.attempt >= job.max_attempts and not job.held:
                self._bury(job, False, now, "rescue")
                buried.append(job.seq)
            else:
                if not job.held:
                    job.errors.append(MError("LeaseExpired", LEASE_EXPIRED_TEXT, now, job.attempt))
                job.held = False
                self._move(job, "ready", "rescue: lease lapsed")
                job.worker_id, job.lease_expires_at, job.run_at = None, None, now
                requeued += 1
        return requeued, buried

    def prune(
        self, now: datetime, ages: dict[str, timedelta | None], limit: int
    ) -> tuple[dict[str, int], dict[str, int]]:
        """R01: delete up to ``limit`` finished jobs at or past their state's age, oldest
        finished first; (removed, still eligible) per finished state."""
        eligible = sorted(
            (
                job for job in self.jobs.values()
                if job.state in FINISHED and job.finished_at is not None
                and (age := ages[job.state]) is not None and job.finished_at <= now - age
            ),
            key=lambda job: (job.finished_at, job.seq),
        )
        removed, remaining = dict.fromkeys(sorted(FINISHED), 0), dict.fromkeys(sorted(FINISHED), 0)
        for job in eligible[:limit]:
            removed[job.state] += 1
            self._delete(job, "prune")
        for job in eligible[limit:]:
            remaining[job.state] += 1
        return removed, remaining

    # -- reads -----------------------------------------------------------------------

    def counts(self) -> dict[str, dict[str, int]]:
        """O08: non-zero counts per (queue, state)."""
        out: dict[str, dict[str, int]] = {}
        for job in self.jobs.values():
            per_queue = out.setdefault(job.queue, {})
            per_queue[job.state] = per_queue.get(job.state, 0) + 1
        return out

    def oldest_due_age(self, now: datetime) -> dict[str, timedelta]:
        """O08: per queue, the age of the oldest due ready/scheduled job."""
        oldest: dict[str, datetime] = {}
        for job in self.jobs.values():
            if job.state in ("ready", "scheduled") and job.run_at <= now:
                oldest[job.queue] = min(oldest.get(job.queue, job.run_at), job.run_at)
        return {queue: now - at for queue, at in oldest.items()}

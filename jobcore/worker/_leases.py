"""Keeping leases: the keeper (local deadlines, timeouts) and the beater (renewals).

The **keeper** makes no store call: it holds each attempt to its local deadline (F02:
when the last landed claim or renewal was sent, plus the lease, minus the safety
margin, on this host's monotonic clock) and calls the handler off the moment it
passes, whatever any store call is doing; it also enforces handler timeouts. The
**beater** renews each held lease every ``heartbeat_interval``; a renewal the store
refuses calls the attempt off (W02). It also stores each running handler's latest
``ctx.progress`` report (rules G), at most once per ``progress_interval`` per job; a job
that reports nothing costs nothing here.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, cast

from jobcore import events
from jobcore.driver import BatchHeartbeats
from jobcore.errors import BackendLocked, JobTimeout, NotSupported
from jobcore.worker._attempt import KEPT, RENEWED, TO_SETTLE, Attempt, AttemptStatus, end_span
from jobcore.worker._claiming import BatchSizer
from jobcore.worker._execution import error_type, handler_error
from jobcore.worker._settling import RETRY_CAP

if TYPE_CHECKING:
    from jobcore.worker import Worker

S = AttemptStatus

RENEWAL_BUDGET = 0.1
"""Share of the lease one ``heartbeat_many`` call should take (:class:`~._claiming.BatchSizer`).
Each of its leases counts as renewed from when the call was sent, so a call slow per lease it
renews (a store that updates one document at a time) would make every lease in it wait for
the whole batch; in smaller calls each waits only for its own."""

FIRST_RENEWAL_BATCH = 4
"""Leases in a worker's first ``heartbeat_many`` call, before the store's cost was measured.
Too small costs a few round trips once; too large, on a store slow per lease, every lease of it."""

RENEW_EARLY = 0.25
"""Share of ``heartbeat_interval`` by which a lease may be renewed early, to go in the same
``heartbeat_many`` call as the leases due now. Jobs claimed at different moments fall due at
different moments; without it a worker holding many long jobs sent a call for each group,
every interval. With it calls go out at most every quarter interval, each lease renewed
every 0.75 to 1 interval (its row written up to a third more often)."""

SLOW_ROUND_EVERY = 60.0
"""Seconds between two warnings that a round of renewals took too long (:meth:`Leases._check_round`)."""


class Leases:
    """Holds every attempt of a worker to its lease: the keeper and beater threads."""

    def __init__(self, worker: Worker) -> None:
        self._w = worker
        self.keeper_wake = threading.Event()
        self.beater_wake = threading.Event()
        self.stopped = False
        self.locked_rows: set[str] = set()
        """Jobs whose last renewal met their row locked by another session (said once each)."""
        self._slow_said = -SLOW_ROUND_EVERY  # when a slow round of renewals was last warned about
        self.renewal_cap = FIRST_RENEWAL_BATCH  # most leases the next heartbeat_many renews
        self._sizer = BatchSizer()

    def stop(self) -> None:
        """End the keeper and the beater."""
        self.stopped = True
        self.keeper_wake.set()
        self.beater_wake.set()

    def deadline(self, attempt: Attempt) -> float:
        """The attempt's local deadline (F02): last landed renewal sent + lease - margin."""
        return attempt.renewed_at + self._w._lease_s - self._w._margin_s

    def time_left(self, ref: weakref.ReferenceType[Attempt]) -> float:
        """Seconds to the attempt's local deadline (its context's ``lease_left``); 0 once it is gone.

        The context holds the attempt weakly: the attempt holds its context, and a cycle
        between them would leave every finished attempt (its job, claim, logger and
        context) to the cyclic garbage collector, whose passes then cost more than the
        rest of a short job's bookkeeping.
        """
        attempt = ref()
        return 0.0 if attempt is None else self.deadline(attempt) - self._w._timer()

    def keeper(self) -> None:
        """Hold every attempt to its local deadline (F02) and its handler timeout.

        It never calls the store, so a store call that hangs cannot delay a call-off.
        """
        w = self._w
        cap = min(1.0, w.heartbeat_interval, w._margin_s / 2)
        while not self.stopped:
            with w._attempts.lock:
                attempts = list(w._attempts.active.values())
            now, local = time.monotonic(), w._timer()
            wait = cap
            for attempt in attempts:
                if w._killed:
                    return
                if attempt.status in KEPT:
                    left = self.deadline(attempt) - local
                    if left <= 0:
                        self.lose(
                            attempt, f"no renewal landed within lease - margin ({w._lease_s - w._margin_s:g}s)",
                            give_back=attempt.status is S.QUEUED,
                        )
                        continue
                    wait = min(wait, left)
                if attempt.status is S.RUNNING and attempt.deadline is not None:
                    if now >= attempt.deadline:
                        try:
                            self.time_out(attempt)
                        except Exception:
                            attempt.log.exception("timing out job %s failed", attempt.job.id)
                    else:
                        wait = min(wait, attempt.deadline - now)
            self.keeper_wake.wait(max(0.0, wait))
            self.keeper_wake.clear()

    def beater(self) -> None:
        """Renew every lease this worker holds, each every ``heartbeat_interval`` (W01).

        The leases due in a round go out in ``heartbeat_many`` calls where the driver offers
        it (else one ``heartbeat`` each), each of as many leases as the store renews within
        :data:`RENEWAL_BUDGET` of the lease (:attr:`renewal_cap`): all of them in one call on
        a quick or far-away store, a few at a time on one slow per lease. Leases due within
        :data:`RENEW_EARLY` of the interval go with them.
        """
        w = self._w
        while not self.stopped:
            with w._attempts.lock:
                attempts = list(w._attempts.active.values())
            next_wake = time.monotonic() + min(1.0, w.heartbeat_interval, w.progress_interval)
            round_began, renewed = time.monotonic(), 0
            batched = "heartbeat_many" in w.driver.capabilities
            early = w.heartbeat_interval * RENEW_EARLY if batched else 0.0
            # Soonest due first; one that falls due while a long round goes on is renewed in it.
            queue = sorted((a for a in attempts if a.status in RENEWED), key=lambda a: a.next_beat)
            at = 0
            while at < len(queue):
                if w._killed or self.stopped:
                    return
                now, size = time.monotonic(), self.renewal_cap if batched else 1
                part: list[Attempt] = []
                while at < len(queue) and len(part) < size and queue[at].next_beat <= now + early:
                    if queue[at].status in RENEWED:  # one settled meanwhile is not renewed for nothing
                        part.append(queue[at])
                    at += 1
                if not part:
                    break
                renewed += len(part)
                try:
                    self._beat(part)
                except Exception:  # a bug here must not stop every other heartbeat
                    part[0].log.exception(
                        "heartbeat of job %s (and %d more) failed unexpectedly", part[0].job.id, len(part) - 1,
                    )
                    for attempt in part:
                        attempt.next_beat = time.monotonic() + w.heartbeat_interval
            for attempt in attempts:
                if attempt.status in RENEWED:
                    next_wake = min(next_wake, attempt.next_beat)
            self._check_round(renewed, time.monotonic() - round_began, batched)
            # Progress after every renewal due: a slow progress write never delays a heartbeat of this round.
            for attempt in () if w._progress_off else attempts:
                if attempt.ctx.progress_seq != attempt.progress_sent and attempt.status is S.RUNNING:
                    if w._killed or self.stopped:
                        return
                    if time.monotonic() >= attempt.progress_due:
                        self.send_progress(attempt)
                    next_wake = min(next_wake, attempt.progress_due)
            self.beater_wake.wait(max(0.0, next_wake - time.monotonic()))
            self.beater_wake.clear()

    def _check_round(self, renewed: int, took: float, batched: bool) -> None:
        """Warn (at most every :data:`SLOW_ROUND_EVERY`) when a round of renewals took longer
        than the heartbeat interval and half of ``lease - margin``: each lease waits a round
        for its renewal, and once a round passes ``lease - margin`` handlers are called off
        while the store still answers."""
        w = self._w
        if renewed < 2 or took <= max(w.heartbeat_interval, (w._lease_s - w._margin_s) / 2):
            return
        now = time.monotonic()
        if now - self._slow_said < SLOW_ROUND_EVERY:
            return
        self._slow_said = now
        how = (
            "in heartbeat_many batches" if batched
            else "one call at a time (this driver has no heartbeat_many)"
        )
        w.log.warning(
            "renewing %d leases took %.2fs, more than half of lease - margin (%gs), %s: once a round passes "
            "lease - margin handlers are called off even while the store answers; lower concurrency (and "
            "prefetch) or lengthen the lease",
            renewed, took, w._lease_s - w._margin_s, how,
        )

    def send_progress(self, attempt: Attempt) -> None:
        """Store the attempt's latest ``ctx.progress`` report when it moved since the last
        write (rules G); the next one may go ``progress_interval`` later. A failed write is
        logged and tried again then; a driver without the verb is asked no more."""
        w = self._w
        ctx = attempt.ctx
        with w._progress_lock:  # the beater and the settler: the later write carries the later report
            seq = ctx.progress_seq  # read before the values: ctx.progress moves it after them
            if seq == attempt.progress_sent or w._progress_off:
                return
            value, message = ctx.progress_value, ctx.progress_message
            attempt.progress_sent = seq
            attempt.progress_due = time.monotonic() + w.progress_interval
            try:
                w.driver.progress(attempt.claimed.token, value, message)
                w._recovered("progress")
            except NotSupported:
                w._progress_off = True
                w.log.info("this driver cannot store progress; ctx.progress is kept in the process only")
            except Exception:
                attempt.progress_sent = -1  # not stored: send the latest again at the next chance
                w._log_failure("progress", attempt.log)

    def _beat(self, attempts: list[Attempt]) -> None:
        """Renew ``attempts``' leases: one ``heartbeat``, or one ``heartbeat_many`` for several
        (whose time sizes the next such call). A row another session holds locked is said
        once and tried again soon; a failed call is tried again soon (the keeper calls a
        handler off if no renewal lands in time, F02)."""
        w = self._w
        sent, began = w._timer(), time.monotonic()
        try:
            if len(attempts) == 1:
                answers = [w.driver.heartbeat(attempts[0].claimed.token, w.lease)]
            else:
                answers = cast(BatchHeartbeats, w.driver).heartbeat_many([a.claimed.token for a in attempts], w.lease)
                took = time.monotonic() - began
                self.renewal_cap = self._sizer.after(
                    len(attempts), took, RENEWAL_BUDGET * w._lease_s, w.heartbeat_interval,
                )
        except BackendLocked as exc:
            answered = time.monotonic()
            for index, attempt in enumerate(attempts):
                if exc.answers is None or index in exc.locked:
                    self._locked(attempt, exc)
                else:
                    self._answered(attempt, bool(exc.answers[index]), sent, answered)
            return
        except Exception:
            w._log_failure("heartbeat", attempts[0].log)
            retry = time.monotonic() + min(w.heartbeat_interval, RETRY_CAP)
            for attempt in attempts:
                attempt.next_beat = retry
            return
        w._recovered("heartbeat")
        answered = time.monotonic()
        for attempt, kept in zip(attempts, answers, strict=True):
            self._answered(attempt, kept, sent, answered)

    def _locked(self, attempt: Attempt, exc: BackendLocked) -> None:
        """Another session holds the job's row: nothing is wrong with the store, and the other
        renewals land. Said once per job; the keeper calls it off if none lands in time."""
        w = self._w
        if attempt.job.id not in self.locked_rows:
            self.locked_rows.add(attempt.job.id)
            attempt.log.warning(
                "could not renew the lease of job %s (%s): another session holds its row locked (an open "
                "transaction); trying again, and its handler is called off if no renewal lands within lease "
                "- margin (%s)", attempt.job.id, attempt.job.name, exc.fix,
            )
        attempt.next_beat = time.monotonic() + min(w.heartbeat_interval, RETRY_CAP)

    def _answered(self, attempt: Attempt, kept: bool, sent: float, answered: float) -> None:
        """The store answered the renewal sent at ``sent`` (the worker's timer), at ``answered``
        (the monotonic clock): on ``False`` the lease is lost, else its local deadline moves and
        its concurrency slot is renewed. The next renewal is due ``heartbeat_interval`` after
        this answer, not after the sending: on a store slower per call than the interval, a
        lease renewed again as soon as it was answered would keep its row written without a
        pause, and the job's own settle would meet that write (a write conflict on the MongoDB
        stand-in) time after time."""
        w = self._w
        if self.locked_rows:
            self.locked_rows.discard(attempt.job.id)
        attempt.next_beat = answered + w.heartbeat_interval
        if not kept:
            if attempt.status in TO_SETTLE:
                # Its settle is in flight and may have just landed (a settled token no
                # longer heartbeats); the settle's own answer says whether it was lost.
                return
            self.lose(attempt, "its lease was lost (reclaimed, cancelled or removed)")
            return
        attempt.renewed_at = max(attempt.renewed_at, sent)
        if attempt.slot_key is not None:
            leases = w.driver.leases
            try:
                if not leases.renew(attempt.slot_key, attempt.slot_holder, w.lease):
                    # The slot lapsed (a long pause); take it again if room remains, else run on.
                    assert attempt.handle is not None
                    assert attempt.handle.concurrency is not None
                    leases.acquire(attempt.slot_key, attempt.handle.concurrency, attempt.slot_holder, w.lease)
            except Exception:
                attempt.log.warning("could not renew concurrency slot %s", attempt.slot_key, exc_info=True)

    def lose(self, attempt: Attempt, reason: str, *, give_back: bool = False) -> None:
        """The lease is gone (or may be): call the handler off and record nothing of this
        attempt (W02, F02). ``give_back``: the attempt never started (it is still queued),
        and the store may still take it back at once, at no cost (F03); else it lapses."""
        w = self._w
        book = w._attempts
        self.locked_rows.discard(attempt.job.id)
        with book.lock:
            # A give-back only while it is still queued; one that started meanwhile is lost.
            give_back = give_back and book.move(attempt, S.FINISHING, only_from=(S.QUEUED,))
            if not give_back:
                if not book.move(attempt, S.LOST):
                    return
                book.active.pop(attempt.job.id, None)
        w._count("lost", 1)
        if give_back:
            error = error_type("StaleClaim")(f"not started: its lease ran out in worker {w.worker_id}")
            w._settling.nack(attempt, error, {"counts_as_attempt": False})
            w._claiming.release_slot(attempt)
            w._wake.set()
            return
        end_span(attempt, "called_off")
        events.emit(
            "lease_lost", attempt.job, "job %s (%s) attempt %d called off: %s; its outcome will not be recorded",
            attempt.job.id, attempt.job.name, attempt.job.attempt, reason, level=logging.WARNING,
            outcome="called_off", duration_s=time.monotonic() - attempt.started_at, worker_id=w.worker_id,
        )
        w._running.call_off(attempt, reason)
        w._claiming.release_slot(attempt)
        w._wake.set()

    def time_out(self, attempt: Attempt) -> None:
        """The handler ran past its timeout: cancel it, then fail the attempt."""
        w = self._w
        assert attempt.handle is not None
        assert attempt.handle.timeout is not None
        if not w._attempts.move(attempt, S.TIMED_OUT):
            return
        w._count("timed_out", 1)
        job = attempt.job
        reason = f"the attempt ran longer than its timeout of {attempt.handle.timeout:g}s"
        w._running.call_off(attempt, reason, timed_out=True)
        error = JobTimeout(f"job {job.id} ({job.name}) attempt {job.attempt}: {reason}", "raise timeout or split it")
        if attempt.span is not None:
            attempt.span.record(error)
        attempt.log.warning("job %s (%s) timed out after %gs", job.id, job.name, attempt.handle.timeout)
        options = w._retry_options(attempt.handle, job, error)
        w._settling.nack(attempt, handler_error(error), options)
        w._wake.set()

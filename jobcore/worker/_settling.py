"""The settler: settles finished attempts with their claim token, retries, reports endings.

Acks go batched through ``ack_many`` (S07); a settle the store did not answer is
retried (F05) until it answers, the lease has surely lapsed, or the drain ends; each
ending that landed is logged, counted, emitted and given to ``on_settled`` (W06).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue as queue_mod
import time
from typing import TYPE_CHECKING, Any, cast

from jobcore import events
from jobcore import validate as v
from jobcore.driver import JobDriver, LandedAcks
from jobcore.errors import BackendLocked, ConfigurationError, InvalidInput
from jobcore.records import Job, JobState
from jobcore.registry import job_logger
from jobcore.worker._attempt import TO_SETTLE, Attempt, AttemptStatus, end_span
from jobcore.worker._execution import handler_error, logger, unstorable

if TYPE_CHECKING:
    from jobcore.worker import Worker

ON_SETTLED_TRIES = 3
"""How many times an ``on_settled`` callback that raises is called for one ending."""

SETTLE_BATCH = 500
"""Most settles one settler round sends (acks go in one ``ack_many``)."""

RETRY_FIRST, RETRY_CAP = 0.05, 0.5
"""Seconds before the first retry of a call the store did not answer (a claim, a start, a
settle), doubling up to the cap: so a worker claims again within about half a second of
the store's return (F06)."""


def takes_landed_only(driver: JobDriver) -> bool:
    """Whether to ack ``landed_only``: the driver declares ``ack_landed_only``."""
    return "ack_landed_only" in driver.capabilities


def transient(exc: BaseException) -> bool:
    """Whether a failed store call may succeed when tried again (not a refusal of its input)."""
    return not isinstance(exc, InvalidInput | ConfigurationError)


class Settle:
    """One settle for the settler: an ack with ``result`` or a nack with ``error`` and options.

    ``tries`` counts the calls that failed without an answer; after one, a settle that
    answers "did not land" may have landed on an earlier try (its reply was lost), so
    the settler looks the job up before calling it lost (F05). ``locked``: the store's last
    answer was that another session holds the job's row (``JC_DB_LOCKED``): nothing of it
    changed, and nobody can take the job while it is held, so the settle is tried again
    until it lands or is refused, whatever its lease, and apart from other settles.
    """

    __slots__ = ("attempt", "error", "kind", "locked", "options", "result", "tries")

    def __init__(
        self, attempt: Attempt, kind: str, *, result: Any = None, error: BaseException | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.attempt, self.kind, self.result, self.error = attempt, kind, result, error
        self.options = options or {}
        self.tries = 0
        self.locked = False

    def landed_earlier(self, job: Job | None) -> bool:
        """Whether ``job`` (read after a retry answered "did not land") shows this settle landed before."""
        token = self.attempt.claimed.token
        if job is None or job.claim_no != token.claim_no or job.state is JobState.RUNNING:
            return False
        if self.kind == "ack":
            return job.state is JobState.DONE
        sent = v.error_entry(self.error or "failed")
        last = job.last_error
        return last is not None and (last.type, last.message) == sent


class Stop:
    """Tells the settler (or the marker) to finish: retries end at ``at`` (monotonic), the drain's end."""

    def __init__(self, at: float) -> None:
        self.at = at


class Settler:
    """Settles what the worker's other parts queue (:meth:`ack`, :meth:`nack`), in its own thread."""

    def __init__(self, worker: Worker) -> None:
        self._w = worker
        self._queue: queue_mod.SimpleQueue[Settle | Stop] = queue_mod.SimpleQueue()
        self._lean_acks: bool | None = None  # ack landed_only? (decided on the first ack batch)

    def ack(self, attempt: Attempt, result: Any) -> None:
        """Queue the ack of a finished attempt."""
        self._queue.put(Settle(attempt, "ack", result=result))

    def nack(self, attempt: Attempt, error: BaseException, options: dict[str, Any]) -> None:
        """Queue the nack of an attempt (a failure, or a give-back with ``counts_as_attempt=False``)."""
        self._queue.put(Settle(attempt, "nack", error=error, options=options))

    def stop(self, at: float) -> None:
        """Finish once the queue is empty; retries end at ``at`` (monotonic)."""
        self._queue.put(Stop(at))

    def run(self) -> None:
        """The settler thread."""
        w = self._w
        retries: list[tuple[float, int, Settle]] = []  # (due, tie-breaker, settle), a heap
        order = itertools.count()
        stop_at: float | None = None
        while True:
            timeout = None if not retries else max(0.0, retries[0][0] - time.monotonic())
            if stop_at is not None:
                timeout = max(0.0, min(timeout if timeout is not None else 0.0, stop_at - time.monotonic()))
            batch: list[Settle] = []
            try:
                entry = self._queue.get(timeout=timeout)
                while True:
                    if isinstance(entry, Stop):
                        stop_at = entry.at
                    else:
                        batch.append(entry)
                    if len(batch) >= SETTLE_BATCH:
                        break
                    entry = self._queue.get_nowait()
            except queue_mod.Empty:
                pass
            now = time.monotonic()
            while retries and retries[0][0] <= now and len(batch) < SETTLE_BATCH:
                batch.append(heapq.heappop(retries)[2])
            failed: list[Settle] = []
            if batch:
                try:
                    failed = self._settle_batch(batch)
                except Exception:  # a bug here must not stop settling for good
                    w.log.exception("settling a batch of %d failed; their leases will lapse", len(batch))
            for item in failed:
                if not self._given_up(item, stop_at):
                    item.tries += 1
                    delay = min(RETRY_CAP, RETRY_FIRST * 2 ** (item.tries - 1)) * w._rng.uniform(0.8, 1.2)
                    heapq.heappush(retries, (time.monotonic() + delay, next(order), item))
            if stop_at is not None and (not retries or time.monotonic() >= stop_at) and self._queue.empty():
                for _, _, item in retries:
                    self._given_up(item, stop_at, force=True)
                return

    def _given_up(self, item: Settle, stop_at: float | None, *, force: bool = False) -> bool:
        """Whether to stop retrying a settle (F05): the worker was killed or is past its
        drain, or the lease has surely lapsed (lease - margin passed a lease ago with no
        renewal landing). The job then runs again after its lease lapses."""
        w = self._w
        attempt = item.attempt
        late = not item.locked and w._timer() > w._leases.deadline(attempt) + w._lease_s
        if not (force or w._killed or late or (stop_at is not None and time.monotonic() >= stop_at)):
            return False
        end_span(attempt, "settle_abandoned")
        w._count("settle_abandoned", 1)
        attempt.log.error(
            "gave up settling job %s (%s) after %d tries; its lease will lapse and it will run again",
            attempt.job.id, attempt.job.name, item.tries + 1,
        )
        self.forget(attempt)
        return True

    def _settle_batch(self, batch: list[Settle]) -> list[Settle]:
        """Settle what the batch holds; answers the settles to try again (the store did not answer)."""
        w = self._w
        acks: list[Settle] = []
        nacks: list[Settle] = []
        book = w._attempts
        with book.lock:
            # "settling": a heartbeat answering False no longer calls the attempt off (a landed
            # ack makes the next heartbeat answer False); the settle's answer decides.
            live = [i for i in batch if i.attempt.status in TO_SETTLE]
            for item in live:
                if item.attempt.status is not AttemptStatus.SETTLING:
                    book.move(item.attempt, AttemptStatus.SETTLING)
        for item in live:
            if not item.tries and item.attempt.ctx.progress_seq and not w._progress_off:
                # The last report before the settle (rules G): stored while the token is still current.
                # Whenever the handler reported at all, through send_progress's lock: a write the
                # heartbeat thread has in flight (its report already marked sent) lands before
                # this settle is sent, never after it, where its fence would drop it.
                w._leases.send_progress(item.attempt)
        for item in live:
            if item.kind == "ack":
                if item.tries:  # a retry was checked
                    acks.append(item)
                    continue
                bad = unstorable(item.result)
                if bad is not None:  # W07: an unstorable result fails the attempt readably
                    item.attempt.log.warning("job %s returned a result that cannot be stored", item.attempt.job.id)
                    options = w._retry_options(item.attempt.handle, item.attempt.job, bad)
                    nacks.append(Settle(item.attempt, "nack", error=handler_error(bad), options=options))
                    continue
                acks.append(item)
            else:
                nacks.append(item)
        retry: list[Settle] = []
        # Acks whose rows another session held last time go apart: each try of theirs may wait
        # the driver's lock bound, which the other acks must not.
        fresh = [i for i in acks if not i.locked]
        for group in (fresh, [i for i in acks if i.locked]) if len(fresh) < len(acks) else (acks,):
            retry += self._ack(group)
        driver = w.driver
        for item in nacks:
            try:
                answer = driver.nack(item.attempt.claimed.token, item.error or "failed", **item.options)
            except BackendLocked as exc:
                retry += self._held([item], exc, "with its failure")
            except Exception as exc:
                retry += self._settle_failed([item], exc, "with its failure")
            else:
                w._recovered("settle")
                item.locked = False
                retry += self._answered(item, answer is not None, answer)
        return retry

    def _ack(self, acks: list[Settle]) -> list[Settle]:
        """Ack ``acks`` in one ``ack_many``; answers the settles to try again."""
        if not acks:
            return []
        w = self._w
        driver = w.driver
        if self._lean_acks is None:
            self._lean_acks = takes_landed_only(driver)
        # Nothing here needs the settled jobs back without an on_settled: the completion event
        # and metrics take the claimed job. Reading them back was most of the batch.
        lean = w.on_settled is None and self._lean_acks
        pairs = [(i.attempt.claimed.token, i.result) for i in acks]
        try:
            if lean:
                landed = cast(LandedAcks, driver).ack_many(pairs, landed_only=True)
                answers: list[Job | None] = [None] * len(acks)
            else:
                answers = driver.ack_many(pairs)
                landed = [a is not None for a in answers]
        except BackendLocked as exc:
            if exc.answers is None:  # nothing was carried out
                return self._held(acks, exc, "done")
            # The other items were carried out: report them, try the locked ones again.
            held = set(exc.locked)
            free = [i for i in range(len(acks)) if i not in held]
            got = exc.answers
            return self._held([acks[i] for i in sorted(held)], exc, "done") + self._acked(
                [acks[i] for i in free],
                [None] * len(free) if lean else [got[i] for i in free],
                [bool(got[i]) if lean else got[i] is not None for i in free],
            )
        except Exception as exc:
            return self._settle_failed(acks, exc, "done")
        return self._acked(acks, answers, landed)

    def _acked(self, acks: list[Settle], answers: list[Job | None], landed: list[bool]) -> list[Settle]:
        """Report an ``ack_many``'s answers; answers the settles to try again."""
        self._w._recovered("settle")
        retry: list[Settle] = []
        done: list[tuple[Settle, Job | None]] = []
        for item, answer, ok in zip(acks, answers, landed, strict=True):
            item.locked = False
            if ok:
                done.append((item, answer))
            else:
                retry += self._answered(item, ok, answer)
        self._completed(done)
        return retry

    def _held(self, items: list[Settle], exc: BackendLocked, what: str) -> list[Settle]:
        """Settles whose rows another session holds (``JC_DB_LOCKED``): nothing of them changed,
        and nobody else can take those jobs meanwhile. Each is logged once and tried again
        (apart from the other settles) until it lands or is refused."""
        for item in items:
            if not item.locked:
                item.attempt.log.warning(
                    "could not settle job %s (%s) %s: another session holds its row locked (an open transaction); "
                    "retrying until that session lets it go (%s)", item.attempt.job.id, item.attempt.job.name,
                    what, exc.fix,
                )
            item.locked = True
        self._w._count("settle_errors", len(items))
        return items

    def _settle_failed(self, items: list[Settle], exc: Exception, what: str) -> list[Settle]:
        """A settle call raised: the settles to retry (F05), or none when the store refused them."""
        w = self._w
        w._count("settle_errors", len(items))
        for item in items:
            item.locked = False  # no longer the lock: given up as any settle once its lease has surely lapsed
        if not transient(exc):
            for item in items:
                item.attempt.log.error(
                    "could not settle job %s (%s) %s: %s; its lease will lapse and it will run again",
                    item.attempt.job.id, item.attempt.job.name, what, exc,
                )
                self.forget(item.attempt)
            return []
        if w._failing.get("settle") is None:  # the first failure of a run: each job, once
            for item in items:
                if not item.tries:
                    item.attempt.log.warning(
                        "could not settle job %s (%s) %s: %s; retrying", item.attempt.job.id, item.attempt.job.name,
                        what, exc,
                    )
        w._log_failure("settle")
        return items

    def _answered(self, item: Settle, landed: bool, answer: Job | None) -> list[Settle]:
        """A settle answered: report it. After a try the store did not answer, "did not
        land" may mean "landed before": the job says which (F05). Answers it to retry
        when even that read fails."""
        if not landed and item.tries:
            try:
                found = self._w.driver.introspect.get(item.attempt.job.id)
            except Exception:
                return [item]
            if item.landed_earlier(found):
                landed, answer = True, found
        self._landed(item, landed, answer)
        return []

    def _completed(self, done: list[tuple[Settle, Job | None]]) -> None:
        """Report acks that landed, as :meth:`_landed` does one, with one lock round trip and
        one count for the batch; ``answer`` is the settled job (None when acked ``landed_only``)."""
        if not done:
            return
        w = self._w
        book = w._attempts
        active = book.active
        with book.lock:
            for item, _ in done:
                attempt = item.attempt
                if active.get(attempt.job.id) is attempt:
                    del active[attempt.job.id]
        for item, _ in done:
            if item.attempt.slot_key is not None:
                w._claiming.release_slot(item.attempt)
        w._count("completed", len(done))
        now = time.monotonic()
        for item, answer in done:
            attempt = item.attempt
            job = attempt.job
            if attempt.span is not None:
                end_span(attempt, "completed")
            events.emit(
                "settled", job, "job %s (%s) %s", job.id, job.name, "completed", level=logging.INFO,
                outcome="completed", error_type=None, duration_s=now - attempt.started_at, worker_id=w.worker_id,
            )
            if answer is not None:  # None: acked landed_only, as no on_settled was set
                self.fire(answer, "completed")

    def forget(self, attempt: Attempt) -> None:
        """The worker holds ``attempt`` no more: drop it and release its fleet slot."""
        book = self._w._attempts
        with book.lock:  # nobody waits on the active attempts alone: room and drain count slots (busy)
            if book.active.get(attempt.job.id) is attempt:
                del book.active[attempt.job.id]
        if attempt.slot_key is not None:
            self._w._claiming.release_slot(attempt)

    def _landed(self, item: Settle, landed: bool, answer: Job | None) -> None:
        """Log, count and report one settle; ``answer`` is the settled job, or None when
        it did not land or an ack was sent ``landed_only`` (nothing needed it)."""
        w = self._w
        attempt = item.attempt
        self.forget(attempt)
        job = attempt.job
        if not landed:
            end_span(attempt, "not_landed")
            w._count("not_landed", 1)
            events.emit(
                "lease_lost", job,
                "settle of job %s (%s) did not land: its lease was lost (reclaimed, cancelled or removed)",
                job.id, job.name, level=logging.WARNING, outcome="not_landed",
                duration_s=time.monotonic() - attempt.started_at, worker_id=w.worker_id,
            )
            return
        fields: dict[str, Any] = {
            "error_type": type(item.error).__name__ if item.kind == "nack" and item.error is not None else None,
            "duration_s": time.monotonic() - attempt.started_at, "worker_id": w.worker_id,
        }
        outcome: str | None
        if item.kind == "ack":
            outcome = "completed"
        elif answer is None:  # a landed nack always answers its job
            raise AssertionError(f"nack of job {job.id} landed without an answer")
        elif answer.state is JobState.DEAD:
            outcome = "dead_lettered"
        elif answer.state is JobState.FAILED:
            outcome = "failed" if item.options.get("fail") else "dropped"
        else:
            outcome = None
            if answer.state is JobState.SCHEDULED:
                w._count("retried", 1)
                # An attempt given back (not counted) is "released"; a failed one is a "retry".
                given_back = item.options.get("counts_as_attempt") is False
                end_span(attempt, "released" if given_back else "retry")
                events.emit(
                    "settled", job, "job %s (%s) will retry at %s (attempt %d of %d failed)", job.id, job.name,
                    answer.run_at.isoformat(), answer.attempt, answer.max_attempts,
                    outcome="released" if given_back else "retry", **fields,
                )
            else:
                end_span(attempt, JobState(answer.state).value)
                events.emit(
                    "settled", job, "job %s (%s) settled %s", job.id, job.name, JobState(answer.state).value,
                    outcome=JobState(answer.state).value, **fields,
                )
        if outcome is not None:
            end_span(attempt, outcome)
            w._count(outcome)
            level = logging.INFO if outcome == "completed" else logging.ERROR
            events.emit(
                "settled", job, "job %s (%s) %s", job.id, job.name, outcome.replace("_", " "), level=level,
                outcome=outcome, **fields,
            )
            if answer is not None:  # None: acked landed_only, as no on_settled was set
                self.fire(answer, outcome)

    def fire(self, job: Job, outcome: str) -> None:
        """Call ``on_settled`` for one landed ending; its errors are logged, retried, contained (W06)."""
        on_settled = self._w.on_settled
        if on_settled is None:
            return
        for attempt_no in range(1, ON_SETTLED_TRIES + 1):
            try:
                on_settled(job, outcome)
                return
            except Exception:
                job_logger(logger, job).exception(
                    "on_settled(%s) raised for job %s (try %d of %d)", outcome, job.id, attempt_no, ON_SETTLED_TRIES
                )

"""Claiming: the claim loop, the backlog (prefetch), and starting claimed attempts.

The claim loop claims batches sized to the worker's free slots plus a backlog of what
the slots run in one claim round trip, wakes on the driver's notifications where it
has them and polls otherwise, announces buried jobs (C08) and runs
``introspect.rescue()`` periodically (C10). Jobs are claimed *held* where the driver
offers it (``deferred_start``, F04): a job waiting in the backlog has not started, so a
worker that dies, stalls or never gets a claim's reply spends no attempt of it. Each
attempt is started in the store (``driver.start``, batched across runners) right
before its handler runs, and only while its local deadline is at least a margin ahead
(F03); it takes its fleet concurrency slot first.
"""

from __future__ import annotations

import collections
import functools
import logging
import queue as queue_mod
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from jobcore import _tracing, events
from jobcore import validate as v
from jobcore.clock import to_millis
from jobcore.driver import DeferredStart, JobDriver
from jobcore.errors import BackendLocked, JobNotRegistered, SchemaOutdated
from jobcore.records import Claimed, ClaimToken, Job, JobState
from jobcore.registry import JobContext, JobHandle, job_logger
from jobcore.worker._attempt import Attempt, AttemptStatus
from jobcore.worker._execution import error_type, find_handler, logger
from jobcore.worker._settling import RETRY_CAP, RETRY_FIRST, Stop, transient

if TYPE_CHECKING:
    from jobcore.worker import Worker

S = AttemptStatus

MARK_LINGER = 0.005
"""Seconds the marker waits, after the first start of a round, before recording the starts
of the handlers still running (F04); those that ended meanwhile are started by their settles."""

BACKLOG_ROUND_TRIPS = 2
"""Claim round trips of work the backlog holds for quick handlers (:meth:`Claimer.backlog_target`),
within ``prefetch``."""

CLAIM_BUDGET = 0.1
"""Share of the lease one claim's round trip should take (:meth:`Claimer.next_cap`). Its jobs'
leases run from when the claim was sent, and on a store whose claim time grows with the
batch, a backlog sized to the round trip would otherwise ask for ever larger, ever slower
claims until their jobs arrived too late to start (F03)."""

CLAIM_SAMPLES = 16
"""Recent claims (jobs, seconds) that :func:`claim_cost` fits the store's cost to."""


def claim_cost(samples: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """The store's (seconds per claimed job, seconds per claim), fitted by least squares to
    claims' ``(jobs, seconds)``; each at least 0. Claims all of one size cannot tell the two
    apart: all their time is then put down to the jobs, the cautious reading."""
    count = len(samples)
    mean_jobs = sum(jobs for jobs, _ in samples) / count
    mean_took = sum(took for _, took in samples) / count
    spread = sum((jobs - mean_jobs) ** 2 for jobs, _ in samples)
    if not spread:
        return mean_took / mean_jobs, 0.0
    per_job = max(0.0, sum((jobs - mean_jobs) * (took - mean_took) for jobs, took in samples) / spread)
    return per_job, max(0.0, mean_took - per_job * mean_jobs)


class BatchSizer:
    """How many items a batched store call (a claim, a round's renewals) should carry to answer
    within a time budget, from what the last :data:`CLAIM_SAMPLES` such calls took."""

    def __init__(self) -> None:
        self._seen: collections.deque[tuple[int, float]] = collections.deque(maxlen=CLAIM_SAMPLES)

    def after(self, size: int, took: float, budget: float, wider: float) -> int:
        """The most items for the next call, after one of ``size`` items took ``took`` seconds.

        As many as fit in ``budget`` seconds at the store's cost per item, beside its cost per
        call whatever the size (:func:`claim_cost`); never below 1 nor above
        ``MAX_CLAIM_BATCH``. A store whose cost per call alone passes ``budget`` (a far-away
        one) is given ``wider`` instead: a smaller call would not be quicker.
        """
        self._seen.append((size, took))
        per_item, per_call = claim_cost(self._seen)
        if per_item <= 0:
            return v.MAX_CLAIM_BATCH
        if per_call >= budget:
            budget = wider
        return max(1, min(v.MAX_CLAIM_BATCH, int((budget - per_call) / per_item)))


CONCURRENCY_RETRY = 1.0
"""Seconds (jittered) before a job held back by its concurrency limit is offered again."""


def takes_start(driver: JobDriver) -> bool:
    """Whether to claim held and start in the store (F04): the driver declares ``deferred_start``."""
    return "deferred_start" in driver.capabilities


class Starter:
    """Starts held attempts in the store, many runners' in one ``driver.start`` call (F04).

    Flat combining: a runner that finds no call in flight sends one for every start
    waiting (its own and those queued meanwhile); the others wait for its answer. So a
    start costs one round trip per batch, and no thread is added.
    """

    def __init__(self, start: Callable[[list[ClaimToken]], list[bool]]) -> None:
        self._start = start
        self._cond = threading.Condition()
        self._waiting: list[list[Any]] = []  # [token, answer, error, done]
        self._sending = False

    def start(self, tokens: list[ClaimToken]) -> list[bool | BaseException]:
        """Each token's answer: True (started), False (not current), or the exception of the call."""
        mine = [[token, False, None, False] for token in tokens]
        with self._cond:
            self._waiting.extend(mine)
            while not all(entry[3] for entry in mine):
                if self._sending:
                    self._cond.wait()
                    continue
                batch, self._waiting = self._waiting, []
                self._sending = True
                self._cond.release()
                error: BaseException | None = None
                answers: list[bool] | None = None
                locked: frozenset[int] = frozenset()
                try:
                    answers = self._start([entry[0] for entry in batch])
                except BackendLocked as exc:
                    # Rows another session holds were not started; the batch's others were.
                    error, answers, locked = exc, exc.answers, frozenset(exc.locked)
                except BaseException as exc:  # every waiter learns it; a non-Exception is raised on below
                    error = exc
                finally:
                    for index, entry in enumerate(batch):
                        if answers is not None and index not in locked:
                            entry[1], entry[2] = bool(answers[index]), None
                        else:
                            entry[1], entry[2] = False, error if error is not None else RuntimeError("no answer")
                        entry[3] = True
                    self._cond.acquire()
                    self._sending = False
                    self._cond.notify_all()
                if error is not None and not isinstance(error, Exception):
                    raise error
        return [cast("BaseException", entry[2]) if entry[2] is not None else bool(entry[1]) for entry in mine]


class Claimer:
    """Claims jobs for one worker, keeps its backlog, and starts attempts into free slots."""

    def __init__(self, worker: Worker) -> None:
        self._w = worker
        self.starter: Starter | None = None  # set at start when the driver holds claims (F04)
        self._marks: queue_mod.SimpleQueue[Attempt | Stop] = queue_mod.SimpleQueue()  # starts to record (F04)
        self.claim_rtt = 0.0  # seconds per claim round trip (moving average)
        self.claim_cap = v.MAX_CLAIM_BATCH  # most jobs the next claim asks for (next_cap)
        self._sizer = BatchSizer()

    # -- the claim loop --------------------------------------------------------------

    def loop(self) -> None:
        """Claim until the worker stops (W03, F06: nothing a handler or the store does ends it)."""
        w = self._w
        book = w._attempts
        next_rescue = time.monotonic() if w.rescue_interval is not None else None
        failures = 0
        held = self.starter is not None
        while not w._stopping.is_set():
            if next_rescue is not None and time.monotonic() >= next_rescue:
                assert w.rescue_interval is not None
                next_rescue = time.monotonic() + w.rescue_interval
                self._rescue()
            self.pump()
            with book.cond:
                target = self.backlog_target()
                room = w.concurrency - book.busy + target - len(book.backlog)
                # With jobs still waiting, top the backlog up in halves, not a job at a time.
                if room <= 0 or (book.backlog and room < max(1, target // 2)):
                    book.cond.wait(w.poll_interval)
                    continue
            w._wake.clear()
            if w._stopping.is_set():
                break
            try:
                sent, local = time.monotonic(), w._timer()
                options: dict[str, Any] = {"start": False} if held else {}
                limit = min(room, self.claim_cap)
                result = w.driver.claim(
                    w.queues, worker_id=w.worker_id, limit=limit, lease=w.lease,
                    drop_exhausted=w.registry.drop_exhausted(), **options,
                )
                took = time.monotonic() - sent
                self.claim_rtt += (took - self.claim_rtt) / 8
                self.claim_cap = self.next_cap(took, len(result.claimed))
            except SchemaOutdated:
                raise  # no retry mends it: someone must run `jobcore migrate` (or upgrade jobcore)
            except Exception:
                # F06: try again soon (within RETRY_CAP of the store's return), log sparingly.
                w._log_failure("claim")
                delay = min(w.poll_interval, RETRY_CAP, RETRY_FIRST * 2**failures)
                failures += 1
                w._stopping.wait(delay * w._rng.uniform(0.8, 1.2))
                continue
            if failures:
                failures = 0
                w._recovered("claim")
            for job in result.buried:
                self.announce_buried(job)
            if result.claimed:
                w._count("claimed", len(result.claimed))
                self._launch_all(result.claimed, local, held)
            self.pump()
            if len(result.claimed) < room:
                w._wake.wait(w.poll_interval)

    def next_cap(self, took: float, got: int) -> int:
        """The most jobs the next claim asks for, after one that brought ``got`` in ``took`` seconds.

        As many as fit in :data:`CLAIM_BUDGET` of the lease at the store's cost per claimed
        job, beside its cost per claim whatever the size (:func:`claim_cost`, over the last
        :data:`CLAIM_SAMPLES` claims); never below 1 nor above ``MAX_CLAIM_BATCH``. A store
        whose cost per claim alone passes that budget (a far-away one, against a short lease)
        is given up to the heartbeat interval instead: a smaller claim would not be quicker.
        A claim that brought nothing (an empty queue, a store away) leaves the cap. On a
        quick store the cap does not bite: 100 jobs in a millisecond, against 3 s of the
        default lease, is the batch limit.
        """
        if not got:
            return self.claim_cap
        w = self._w
        return self._sizer.after(got, took, CLAIM_BUDGET * w._lease_s, w.heartbeat_interval)

    def backlog_target(self) -> int:
        """Jobs to hold claimed beyond the free slots: what the slots run in two claim round trips.

        The backlog is topped up once half of it is gone (see :meth:`loop`), so a claim goes
        out with a round trip's work still waiting and its answer lands as the slots would run
        dry; with one round trip's work as the target, each refill started with half a round
        trip left, slots waited on every claim, and claims were half as large (measured: a
        no-op drain on PostgreSQL claimed 50 to 60 jobs a call instead of about 94, at 10-20% more
        client CPU per job). A handler that takes longer than the slots need to cover a claim
        round trip gets no prefetch at all, so a worker never sits on jobs another worker could
        be running.
        """
        w = self._w
        run_time = w._running.run_time
        if run_time is None or not w.prefetch:
            return 0
        wanted = w.concurrency * self.claim_rtt / max(run_time, 1e-6)
        if wanted < 1:
            return 0
        return min(w.prefetch, int(BACKLOG_ROUND_TRIPS * wanted))

    def pump(self) -> None:
        """Start claimed jobs waiting in the backlog while slots are free, their store starts in one call."""
        w = self._w
        while True:
            reserved = self._reserve(w.concurrency)
            if not reserved:
                return
            w._running.dispatch(self._start(reserved))

    def next_inline(self) -> Attempt | None:
        """The next backlog attempt a runner thread that just finished one should run, started; None when none."""
        while True:
            reserved = self._reserve()
            if not reserved:
                return None
            runnable = self._start(reserved)
            if runnable:
                return runnable[0]

    def _reserve(self, most: int = 1) -> list[Attempt]:
        """Take up to ``most`` waiting attempts and a slot for each (status ``starting``)."""
        w = self._w
        book = w._attempts
        taken: list[Attempt] = []
        with book.lock:
            while len(taken) < most and book.backlog and book.busy < w.concurrency and not w._stopping.is_set():
                attempt = book.backlog.popleft()
                if book.move(attempt, S.STARTING):  # not lost while it waited
                    taken.append(attempt)
        return taken

    def _rescue(self) -> None:
        w = self._w
        try:
            rescued = w.driver.introspect.rescue()
        except Exception as exc:
            if transient(exc):  # the store is away: logged as the claim's failures are, once a run
                w._log_failure("rescue sweep")
            else:
                w.log.exception("rescue sweep failed")
            return
        w._recovered("rescue sweep")
        if rescued.requeued:
            events.emit(
                "rescued", None, "rescue put %d jobs with lapsed leases back to ready", rescued.requeued,
                outcome="requeued", count=rescued.requeued, worker_id=w.worker_id,
            )
        for job in rescued.buried:
            self.announce_buried(job)

    def announce_buried(self, job: Job) -> None:
        """Count, log and report a job whose lease lapsed on its final attempt (C08)."""
        w = self._w
        w._count("buried", 1)
        events.emit(
            "buried", job,
            "job %s (%s) buried %s: its lease lapsed on the final attempt %d of %d (the worker likely crashed)",
            job.id, job.name, job.state, job.attempt, job.max_attempts, level=logging.ERROR,
            outcome=JobState(job.state).value, error_type=job.errors[-1].type if job.errors else None,
            worker_id=w.worker_id,
        )
        w._settling.fire(job, "buried")

    def _launch_all(self, claimed: Sequence[Claimed], renewed_at: float, held: bool) -> None:
        """Queue a claim's jobs in the backlog: the common case (a registered handler, no
        earlier attempt of the job held here) in one locked step for the whole batch."""
        w = self._w
        book = w._attempts
        made: list[Attempt] = []
        for one in claimed:
            try:
                made.append(self._attempt(one, renewed_at, held))
            except Exception:  # W03: one job's trouble never ends the loop; its lease lapses
                job_logger(logger, one.job).exception("could not start job %s", one.job.id)
        rest: list[Attempt] = []
        # A queued attempt is leased and heartbeated while it waits for a slot.
        with book.lock:
            active = book.active
            for attempt in made:
                job_id = attempt.job.id
                if attempt.handle is not None and job_id not in active:
                    if not w._killed:
                        active[job_id] = attempt
                        book.backlog.append(attempt)
                else:
                    rest.append(attempt)
        for attempt in rest:
            try:
                self._launch(attempt)
            except Exception:  # W03, as above
                attempt.log.exception("could not start job %s", attempt.job.id)

    def _attempt(self, claimed: Claimed, renewed_at: float, held: bool) -> Attempt:
        """A claimed job's attempt (status queued), its handler looked up (None when unregistered)."""
        w = self._w
        job = claimed.job
        log = job_logger(logger, job)
        handle, _missing = find_handler(w.registry, job, log)
        ctx = JobContext(job, claimed.token, log=log)
        attempt = Attempt(claimed, handle, ctx, log, renewed_at=renewed_at, held=held)
        ctx.lease_left = functools.partial(w._leases.time_left, weakref.ref(attempt))  # no cycle: see time_left
        attempt.next_beat = attempt.started_at + w.heartbeat_interval
        return attempt

    def _launch(self, attempt: Attempt) -> None:
        """Queue an attempt the batch step left: its job unregistered, or an earlier attempt of it held here."""
        w = self._w
        book = w._attempts
        job = attempt.job
        handle = attempt.handle
        with book.lock:
            stale = book.active.get(job.id)
            if stale is None and handle is not None:
                if not w._killed:
                    book.active[job.id] = attempt
                    book.backlog.append(attempt)
                return
        if stale is not None:
            # This worker reclaimed a job whose earlier attempt it still holds: that lease
            # lapsed and the claim moved its token, so the earlier attempt is called off
            # now (W02) rather than dropped unseen by the keeper.
            w._leases.lose(stale, "its lease lapsed and the job was claimed again")
        if handle is None:
            error = JobNotRegistered(f"no handler is registered for job {job.name!r} in worker {w.worker_id}")
            with book.lock:
                book.move(attempt, S.FINISHING)
                book.active[job.id] = attempt
            w._settling.nack(attempt, error, w._retry_options(None, job, error))
            return
        with book.lock:
            if w._killed:
                return
            book.active[job.id] = attempt
            book.backlog.append(attempt)

    # -- starting attempts -----------------------------------------------------------

    def _fresh(self, attempt: Attempt) -> bool:
        """Whether a reserved attempt may start (F03): its local deadline at least a margin
        ahead. If not, it is given back (where the store answers; else it lapses, at no
        cost while held)."""
        w = self._w
        if w._timer() + w._margin_s <= w._leases.deadline(attempt):
            return True
        error = error_type("StaleClaim")(
            f"not started: less than the {w._margin_s:g}s margin was left of its lease in worker {w.worker_id}"
        )
        self._unstart(attempt, error, {"counts_as_attempt": False})
        return False

    def _start(self, reserved: list[Attempt]) -> list[Attempt]:
        """Start reserved attempts: each only while fresh (F03), with its fleet slot, its
        start recorded in the store first where it was claimed held (F04), its timeout and
        the started event. Answers the sync ones, for runners; async ones are scheduled.
        """
        ready: list[Attempt] = []
        held: list[Attempt] = []
        for attempt in reserved:
            assert attempt.handle is not None
            if self._fresh(attempt) and self._take_slot(attempt, attempt.handle):
                (held if attempt.held else ready).append(attempt)
        if held:
            # A job whose last claim ended without a recorded start (claim_no moved past
            # attempt + 1: a crash in its first milliseconds, or a give-back) is started in
            # the store before it runs, so a handler that kills its worker at once still
            # spends its attempt from then on. The others start now and are recorded
            # right after, many in one call, off the runners' path (F04).
            # (A held claim answers each job as its attempt will stand once started: attempt
            # counts this one, so "claim_no > attempt" means an earlier claim went uncounted.)
            first: list[Attempt] = []
            for attempt in held:
                job = attempt.job
                if self._w.strict_starts or job.claim_no > job.attempt:
                    first.append(attempt)
                    continue
                attempt.held = False
                self._marks.put(attempt)
                ready.append(attempt)
            if first:
                ready += self._begin(first)
        return self._run_started(ready) if ready else []

    def _begin(self, held: list[Attempt]) -> list[Attempt]:
        """Record the start of held attempts in the store (F04), retrying a call the store
        did not answer while the attempts stay fresh; answers those that may run."""
        w = self._w
        assert self.starter is not None
        started: list[Attempt] = []
        pending = held
        delay = RETRY_FIRST
        while pending:
            answers = self.starter.start([attempt.claimed.token for attempt in pending])
            retry: list[Attempt] = []
            for attempt, answer in zip(pending, answers, strict=True):
                if answer is True:
                    attempt.held = False
                    if self._fresh(attempt):  # the call may have taken long: give it back if now stale
                        started.append(attempt)
                elif answer is False:
                    w._leases.lose(attempt, "its lease was lost before it started")
                elif self._fresh(attempt):
                    retry.append(attempt)
            if retry:
                self._start_failed(retry, answers, "starting claimed jobs in the store")
                if w._stopping.wait(delay * w._rng.uniform(0.8, 1.2)):
                    for attempt in retry:
                        self._unstart(attempt, error_type("WorkerStopping")("given back unstarted"), {
                            "counts_as_attempt": False,
                        })
                    break
                delay = min(RETRY_CAP, delay * 2)
            elif pending is not held:
                w._recovered("starting claimed jobs in the store")
            pending = retry
        return started

    def stop_marker(self) -> None:
        """End the marker thread once the starts queued so far are recorded."""
        self._marks.put(Stop(0.0))

    def marker(self) -> None:
        """Record in the store the starts of attempts already running (F04), batched.

        An answer ``False`` means the token was no longer current (the job cancelled or
        taken meanwhile): the handler is called off. A call the store does not answer is
        retried while the attempts' leases can still be current."""
        w = self._w
        assert self.starter is not None
        stop = False
        while not stop:
            entry = self._marks.get()
            batch: list[Attempt] = []
            if not isinstance(entry, Stop):
                time.sleep(MARK_LINGER)  # one wait for the round, not a wake-up per start
            try:
                while True:
                    if isinstance(entry, Stop):
                        stop = True
                    else:
                        batch.append(entry)
                    if len(batch) >= v.MAX_CLAIM_BATCH:
                        break
                    entry = self._marks.get_nowait()
            except queue_mod.Empty:
                pass
            # A handler that already ended needs no start of its own: its settle starts a held
            # job first (F04). For quick jobs that is nearly every one, and each start was a
            # third write of the row.
            batch = [attempt for attempt in batch if attempt.status is S.RUNNING]
            delay = RETRY_FIRST
            while batch and not w._killed:
                answers = self.starter.start([attempt.claimed.token for attempt in batch])
                retry = []
                for attempt, answer in zip(batch, answers, strict=True):
                    if answer is False:
                        w._leases.lose(attempt, "its start was refused: the job was cancelled or taken")
                    elif answer is not True and w._timer() <= w._leases.deadline(attempt) + w._lease_s:
                        retry.append(attempt)
                if not retry:
                    if delay > RETRY_FIRST:
                        w._recovered("recording started jobs")
                    break
                self._start_failed(retry, answers, "recording started jobs")
                time.sleep(delay * w._rng.uniform(0.8, 1.2))
                delay = min(RETRY_CAP, delay * 2)
                batch = retry

    def _start_failed(self, retry: list[Attempt], answers: list[bool | BaseException], what: str) -> None:
        """Log a start call to try again: a store failure as any failed call, once per job a row
        another session holds (``JC_DB_LOCKED``: the rest of the batch was started)."""
        w = self._w
        failures = [a for a in answers if isinstance(a, BaseException)]
        if not failures or not all(isinstance(a, BackendLocked) for a in failures):
            w._log_failure(what)
            return
        said = w._leases.locked_rows
        for attempt in retry:
            if attempt.job.id not in said:
                said.add(attempt.job.id)
                attempt.log.warning(
                    "could not record the start of job %s (%s): another session holds its row locked (an open "
                    "transaction); trying again while its lease lasts (%s)", attempt.job.id, attempt.job.name,
                    cast(BackendLocked, failures[0]).fix,
                )

    def _run_started(self, ready: list[Attempt]) -> list[Attempt]:
        """Mark started attempts running (one locked step for the batch): their timeouts, the
        started events; schedule async handlers. Answers those a runner thread should run
        (sync and not lost meanwhile)."""
        w = self._w
        book = w._attempts
        running: list[Attempt] = []
        lost: list[Attempt] = []
        now = time.monotonic()
        timed = False
        hook = _tracing.hook
        with book.lock:
            for attempt in ready:
                # Lost while taking its fleet slot, or the worker was killed: it does not run.
                if w._killed or not book.move(attempt, S.RUNNING):
                    lost.append(attempt)
                    continue
                if hook is not None:  # under the lock: whoever loses the attempt next finds its span
                    attempt.span = hook.attempt(attempt.job)
                attempt.started_at = now
                timeout = cast(JobHandle, attempt.handle).timeout
                if timeout is not None:
                    attempt.deadline = now + timeout
                    timed = True
                running.append(attempt)
        for attempt in lost:
            self.release_slot(attempt)
        if timed:
            w._leases.keeper_wake.set()
        sync: list[Attempt] = []
        coros: list[Attempt] = []
        for attempt in running:
            job = attempt.job
            events.emit(
                "started", job, "job %s (%s) attempt %d started", job.id, job.name, job.attempt,
                level=logging.DEBUG, outcome="running", worker_id=w.worker_id,
            )
            (coros if cast(JobHandle, attempt.handle).is_async else sync).append(attempt)
        w._running.schedule(coros)  # one hand-off to the event loop for the batch
        return sync

    def _unstart(self, attempt: Attempt, error: BaseException, options: dict[str, Any]) -> None:
        """A reserved attempt cannot start: free its slots and queue its nack."""
        if not self._w._attempts.move(attempt, S.FINISHING, only_from=(S.STARTING,)):
            return  # lost meanwhile: that released the slot
        self.release_slot(attempt)
        self._w._settling.nack(attempt, error, options)

    # -- fleet concurrency slots -----------------------------------------------------

    def _take_slot(self, attempt: Attempt, handle: JobHandle) -> bool:
        """Take the job's fleet concurrency slot, then a start of its rate limit (T01-T03);
        when either is full, give the attempt back for later, no attempt spent."""
        try:
            key = handle.concurrency_slot(attempt.job.payload)
            rate_key = None if handle.rate_limit is None else handle.rate_limit.slot(handle.name, attempt.job.payload)
        except Exception as exc:
            attempt.log.exception("the concurrency or rate limit key of job %s failed", attempt.job.id)
            self._unstart(attempt, exc, {"fail": True, "dead_letter": handle.dead_letter})
            return False
        if key is not None and not self._take_concurrency(attempt, handle, key):
            return False
        return rate_key is None or self._take_rate(attempt, handle, rate_key)

    def _take_concurrency(self, attempt: Attempt, handle: JobHandle, key: str) -> bool:
        w = self._w
        assert handle.concurrency is not None
        holder = f"{w.worker_id}/{attempt.job.id}"[-v.MAX_NAME_LENGTH :]
        try:
            taken = w.driver.leases.acquire(key, handle.concurrency, holder, w.lease)
        except Exception:
            attempt.log.exception("could not take a concurrency slot of %s; retrying later", key)
            taken = False
        if taken:
            attempt.slot_key, attempt.slot_holder = key, holder
            return True
        delay = timedelta(seconds=CONCURRENCY_RETRY * w._rng.uniform(0.5, 1.5))
        w._count("deferred", 1)
        attempt.log.debug("job %s deferred: %s is at its limit of %d", attempt.job.id, key, handle.concurrency)
        error = error_type("ConcurrencyLimited")(f"{key} already runs {handle.concurrency} at once")
        now = w._store_now()
        options: dict[str, Any] = {"counts_as_attempt": False}
        if now is not None:
            options["retry_at"] = to_millis(now + delay)
        self._unstart(attempt, error, options)
        return False

    def _take_rate(self, attempt: Attempt, handle: JobHandle, key: str) -> bool:
        """One start of the job's rate limit: a slot of ``key`` held for the window and never
        released (T01). Over the limit, the job is given back due when the earliest slot
        expires (T02), its concurrency slot freed (T03)."""
        w = self._w
        rate = handle.rate_limit
        assert rate is not None
        job = attempt.job
        holder = f"{w.worker_id}/{job.id}/{job.claim_no}"[-v.MAX_NAME_LENGTH :]
        try:
            if w.driver.leases.acquire(key, rate.limit, holder, rate.per):
                return True
        except Exception:
            attempt.log.exception("could not take a start of rate limit %s; retrying later", key)
        w._count("rate_limited", 1)
        attempt.log.debug("job %s deferred: %s had %d starts in the last %s", job.id, key, rate.limit, rate.per)
        due = None
        try:
            expiries = [slot.expires_at for slot in w.driver.leases.holders(key, v.MAX_PAGE)]
            if expiries:
                due = min(expiries)  # a slot counts until its expiry, not at it (K01)
        except Exception:
            attempt.log.warning("could not read the slots of %s; retrying the job later", key, exc_info=True)
        if due is None:
            now = w._store_now()
            due = None if now is None else to_millis(now + rate.per * w._rng.uniform(0.05, 0.2))
        error = error_type("RateLimited")(f"{key} allows {rate.limit} starts per {rate.per.total_seconds():g}s")
        options: dict[str, Any] = {"counts_as_attempt": False}
        if due is not None:
            options["retry_at"] = to_millis(due)
        self._unstart(attempt, error, options)  # frees the concurrency slot taken first
        return False

    def release_slot(self, attempt: Attempt) -> None:
        """Give back the attempt's fleet concurrency slot, if it holds one."""
        if attempt.slot_key is None:
            return
        key, attempt.slot_key = attempt.slot_key, None
        try:
            self._w.driver.leases.release(key, attempt.slot_holder)
        except Exception:
            attempt.log.warning("could not release concurrency slot %s; it lapses by itself", key, exc_info=True)
        self._w._wake.set()

    def start_starter(self, driver: JobDriver) -> bool:
        """Use held claims when the driver offers them (F04); answers whether it does."""
        if takes_start(driver):
            self.starter = Starter(cast(DeferredStart, driver).start)
        return self.starter is not None

"""The worker: claims jobs, runs their handlers, keeps their leases, settles them.

One :class:`Worker` composes small parts, one module each:

* :mod:`~jobcore.worker._attempt`: the attempts it holds, their status
  (:class:`AttemptStatus`), the moves between statuses allowed in one table, and the
  count of busy slots those moves keep;
* :mod:`~jobcore.worker._claiming`: the **claim loop** (the caller's thread under
  :meth:`Worker.run`, a background one under :meth:`Worker.start`) claims batches
  sized to its free slots plus a backlog (prefetch), wakes on the driver's
  notifications where it has them and polls otherwise, announces buried jobs (C08),
  runs ``introspect.rescue()`` periodically (C10), and starts claimed attempts: held
  claims (F04), freshness (F03), fleet concurrency slots, and the **marker** thread
  that records starts in batches;
* :mod:`~jobcore.worker._running`: one thread per running **sync handler**, and one
  event-loop thread shared by the **async handlers** (under :class:`AsyncWorker`, the
  application's own loop instead);
* :mod:`~jobcore.worker._execution`: calling a handler and turning its outcome into an
  ack or a nack with retry options (W05, W07), shared with :mod:`jobcore.testing`;
* :mod:`~jobcore.worker._leases`: the **keeper**, which makes no store call: it holds
  each attempt to its local deadline (F02: when the last landed claim or renewal was
  sent, plus the lease, minus the safety margin, on this host's monotonic clock) and
  calls the handler off the moment it passes, whatever any store call is doing; it
  also enforces handler timeouts; and the **beater**, which renews each held lease
  every ``lease/3``; a renewal the store refuses calls the attempt off (W02);
* :mod:`~jobcore.worker._settling`: the **settler**, which settles finished attempts
  with their claim token, acks batched through ``ack_many`` (S07), retries a settle
  the store did not answer (F05), and fires ``on_settled`` (W06).

The worker also starts the **pruner** (:mod:`jobcore.retention`), which every
``prune_interval`` deletes finished jobs older than ``retention`` while holding the
fleet-wide prune lease, and the **scheduler** (:mod:`jobcore.scheduler`, on unless
``scheduler=False``), which fires the due occurrences of the store's periodic
schedules (rules P).

Jobs are claimed *held* where the driver offers it (``deferred_start``, F04): a job
waiting in this worker's backlog has not started, so a worker that dies, stalls or
never gets a claim's reply spends no attempt of it. Each attempt is started in the
store (``driver.start``, batched across runners) right before its handler runs, and
only while its local deadline is at least a margin ahead (F03).

Retry times are computed on ``driver.clock`` (the store's time); local deadlines on the
clock's ``monotonic()`` (a ``ManualClock`` in tests moves both); the cadence of the
loops (polling, heartbeats, handler timeouts) is real time. Nothing a handler or the
store does ends the claim loop (W03, F06): only :meth:`Worker.stop`,
:meth:`Worker.request_stop` or :meth:`Worker.kill` do.

:class:`AsyncWorker` (:mod:`~jobcore.worker._aworker`) runs this same engine inside an
application's event loop: an async driver's I/O awaited on that loop through
:class:`~jobcore._bridge.SyncBridge`, async handlers as tasks on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobcore import validate as v
from jobcore._signals import STOP_SIGNALS, at_default, on_stop_signals
from jobcore.clock import monotonic_of, to_millis
from jobcore.current import get_job_driver
from jobcore.driver import Duration, JobDriver, Subscription
from jobcore.errors import OptionInvalid, SchemaOutdated
from jobcore.records import Job, RetentionPolicy
from jobcore.registry import JobHandle, Registry, default_registry, job_logger
from jobcore.retention import DEFAULT_PRUNE_INTERVAL, Pruner
from jobcore.scheduler import Scheduler
from jobcore.worker._attempt import Attempt, Attempts, AttemptStatus, end_span
from jobcore.worker._claiming import Claimer
from jobcore.worker._execution import call_handler, error_type, handler_error, logger, retry_options, retry_policy
from jobcore.worker._leases import Leases
from jobcore.worker._running import Runners
from jobcore.worker._settling import ON_SETTLED_TRIES as ON_SETTLED_TRIES
from jobcore.worker._settling import RETRY_CAP, RETRY_FIRST, Settler

if TYPE_CHECKING:
    from jobcore.worker._aworker import AsyncWorker

__all__ = ["OUTCOMES", "TRACEBACKS", "AsyncWorker", "Worker", "call_handler", "handler_error", "retry_policy"]

S = AttemptStatus

OUTCOMES = ("completed", "failed", "dead_lettered", "dropped", "buried")
"""Endings ``on_settled`` reports: done; failed at once (terminal); dead; failed when
exhausted with ``dead_letter=False``; lease lapsed on the final attempt (C08)."""

TRACEBACKS = ("final", "always", "never")
"""``tracebacks=``: log a failed attempt's traceback only when the job will not run again, always, never."""

SUMMARY_COUNTS = ("completed", "retried", "failed", "dead_lettered", "buried", "lost", "timed_out")
"""What the periodic summary line counts (keys of ``Worker.counts``)."""

LOG_REPEAT = 30.0
"""Seconds between two log records of the same failing call (the first is logged at once)."""

DEFAULT_RETENTION = RetentionPolicy()
"""The policy workers prune by unless told otherwise (``retention=None`` turns pruning off)."""


def _drain_seconds(value: Duration) -> float:
    """A drain timeout in seconds: finite, from 0 (abandon at once) to 7 days; a negative or NaN
    one used to be taken as 0 without a word."""
    return v.check_duration(value, "drain_timeout", hi=v.MAX_LEASE).total_seconds()


class Worker:
    """Runs the handlers of jobs claimed from ``queues``.

    Args:
        queues: Queue names (a list, or one comma-separated string).
        concurrency: Handlers running at once in this worker.
        lease: How long a claim holds a job without renewal (seconds or timedelta);
            renewed every ``lease/3``.
        margin: The safety margin (seconds or timedelta, default ``lease/5``, smaller
            than ``lease``). A handler is called off once ``lease - margin`` has passed
            on this host's monotonic clock since the last renewal that landed was sent
            (F02), and a claimed job is started only while at least ``margin`` of that
            is left (F03). It is the time a called-off handler has to stop before
            another worker may take its job.
        strict_starts: Record every start in the store before its handler runs (one
            round trip before each job), so that even a handler that kills its worker in
            its first milliseconds spends its attempt: a poison job then runs exactly
            ``max_attempts`` times. By default a start is recorded right after its handler
            began, many in one call, and only a job whose last claim ended with no
            recorded start is started first; a poison job then runs at most once more.
        driver: The store (default: the process-wide one, read at start).
        registry: Where handlers are looked up (default: ``@job``'s default registry).
        poll_interval: Seconds between claims when idle and no wake-up arrives.
        drain_timeout: Seconds :meth:`stop` waits for in-flight handlers (0 to 7 days; 0: none).
        worker_id: This worker's id in claims (default ``host:pid:random``).
        on_settled: ``fn(job, outcome)`` for each ending that landed (see :data:`OUTCOMES`).
        rescue_interval: Seconds between ``introspect.rescue()`` sweeps (``None``: never).
        prefetch: Most jobs claimed ahead of free slots (default ``max(16 * concurrency, 128)``, at most 1000;
            0: claim only for free slots). The worker prefetches only what its slots will
            run within two claim round trips (measured), so slow jobs are never hoarded;
            prefetched jobs are leased and heartbeated, and given back unstarted on stop.
            One claim asks for no more jobs than fit in a tenth of the lease at the store's
            measured cost per claimed job, so a store slow per claimed job never gets claims
            so large that their jobs arrive too stale to start (F03).
        heartbeat_interval: Seconds between renewals of one lease (default ``lease/3``). One not
            shorter than ``lease - margin`` is logged as a WARNING when the worker is made: a
            handler would be called off between two renewals even while the store answers.
        seed: Seeds the jitter of retry delays (tests).
        retention: Finished jobs older than this policy are pruned (``None``: never);
            one worker of the fleet at a time does it (:mod:`jobcore.retention`).
        prune_interval: Seconds between pruning runs (the first comes one interval in).
        scheduler: Run a :class:`~jobcore.scheduler.Scheduler` thread that declares the
            registry's schedules and fires due occurrences (any number may run at once).
        tracebacks: When a failed attempt's traceback is logged: ``"final"`` (default: only
            when the job will not run again, failed or dead-lettered; a retry logs one line
            with the error), ``"always"`` or ``"never"``.
        summary_interval: Seconds between one-line INFO summaries of what the worker did
            (``None``: none).
        progress_interval: Seconds between two stores of one job's ``ctx.progress``
            (default 1.0): a handler may report as often as it likes, the store sees at
            most one write per job per interval (the latest report), plus one before the
            attempt settles when the report changed since (rules G, docs/worker.md).
    """

    def __init__(
        self,
        queues: Sequence[str] | str,
        *,
        concurrency: int = 4,
        lease: Duration = 30.0,
        margin: Duration | None = None,
        strict_starts: bool = False,
        driver: JobDriver | None = None,
        registry: Registry | None = None,
        poll_interval: float = 1.0,
        drain_timeout: float = 30.0,
        worker_id: str | None = None,
        on_settled: Callable[[Job, str], Any] | None = None,
        rescue_interval: float | None = 60.0,
        heartbeat_interval: float | None = None,
        seed: int | None = None,
        retention: RetentionPolicy | None = DEFAULT_RETENTION,
        prune_interval: float = DEFAULT_PRUNE_INTERVAL,
        scheduler: bool = True,
        prefetch: int | None = None,
        tracebacks: str = "final",
        summary_interval: float | None = 60.0,
        progress_interval: float = 1.0,
    ) -> None:
        if isinstance(queues, str):
            names = [q.strip() for q in queues.split(",")]
        elif isinstance(queues, Iterable):
            names = list(queues)
        else:
            raise OptionInvalid(
                f"queues must be queue names, got {type(queues).__name__} {queues!r:.40}",
                'pass a list of names, or one comma-separated string: Worker(["default", "mail"]) or "default,mail"',
            )
        self.queues = tuple(q for q in names if q)
        self.concurrency = v.check_int(concurrency, "concurrency", 1, v.MAX_CLAIM_BATCH)
        self.lease = v.check_lease(lease)
        self.margin = self.lease / 5 if margin is None else v.check_lease(margin, "margin")
        if self.margin >= self.lease:
            raise OptionInvalid(
                f"margin={self.margin} is not smaller than lease={self.lease}",
                "pass a margin smaller than the lease (default lease/5)",
            )
        self.strict_starts = v.check_bool(strict_starts, "strict_starts")
        self._lease_s = self.lease.total_seconds()
        self._margin_s = self.margin.total_seconds()
        if driver is not None and not callable(getattr(driver, "claim", None)):
            raise OptionInvalid(
                f"driver must be a jobcore driver, got {type(driver).__name__} {driver!r:.40}",
                "pass jobcore.connect(url), or leave driver out for the process-wide one (set_job_driver)",
            )
        self._driver = driver
        if registry is not None and not isinstance(registry, Registry):
            raise OptionInvalid(
                f"registry must be a jobcore Registry, got {type(registry).__name__}",
                "pass the Registry your @registry.job handlers are declared on, or leave it out for @job's",
            )
        self.registry = registry if registry is not None else default_registry
        self.poll_interval = v.check_seconds(poll_interval, "poll_interval")
        self.drain_timeout = _drain_seconds(drain_timeout)
        self.worker_id = v.check_name(
            worker_id if worker_id is not None else f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            "worker_id",
        )
        if on_settled is not None and not callable(on_settled):
            raise OptionInvalid(
                f"on_settled must be callable, got {type(on_settled).__name__}",
                "pass a function taking (job, outcome), or leave it out",
            )
        self.on_settled = on_settled
        self.rescue_interval = None if rescue_interval is None else v.check_seconds(rescue_interval, "rescue_interval")
        beat = self.lease.total_seconds() / 3 if heartbeat_interval is None else heartbeat_interval
        self.heartbeat_interval = v.check_seconds(beat, "heartbeat_interval")
        if self.heartbeat_interval >= self._lease_s - self._margin_s:
            logger.warning(
                "heartbeat_interval %gs is not shorter than lease - margin (%gs): a handler running longer than "
                "that is called off even while the store answers; leave heartbeat_interval out (lease/3)",
                self.heartbeat_interval, self._lease_s - self._margin_s,
            )
        self.retention = None if retention is None else v.check_prune(retention, 1, 1)[0]
        self.prune_interval = v.check_seconds(prune_interval, "prune_interval")
        self._pruner: Pruner | None = None
        self.scheduler: Scheduler | None = (
            Scheduler(driver, registry=self.registry, scheduler_id=self.worker_id)
            if v.check_bool(scheduler, "scheduler") else None
        )
        self.counts: Counter[str] = Counter()
        """Running totals: claimed, completed, retried, failed, dead_lettered, dropped,
        buried, lost, timed_out, settle_errors, abandoned, ..."""
        self.log = job_logger(logger, None)
        if tracebacks not in TRACEBACKS:
            raise OptionInvalid(
                f"tracebacks={tracebacks!r} is not one of {', '.join(TRACEBACKS)}",
                'pass tracebacks="final" (the default), "always" or "never"',
            )
        self.tracebacks = tracebacks
        self.summary_interval = (
            None if summary_interval is None else v.check_seconds(summary_interval, "summary_interval")
        )
        self.progress_interval = v.check_seconds(progress_interval, "progress_interval")
        self._progress_lock = threading.Lock()
        self._progress_off = False  # the driver answered JC_NOT_SUPPORTED: keep progress in the process
        self.prefetch = v.check_int(
            min(max(16 * self.concurrency, 128), v.MAX_CLAIM_BATCH) if prefetch is None else prefetch, "prefetch", 0,
            v.MAX_CLAIM_BATCH,
        )
        self._rng = random.Random(seed)
        self._attempts = Attempts()  # the attempts held, the backlog, the busy slots
        self._lock = self._attempts.lock
        self._claiming = Claimer(self)
        self._running = Runners(self)
        self._leases = Leases(self)
        self._settling = Settler(self)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._killed = False
        self._done = threading.Event()
        self._given_back_at_stop: list[tuple[Attempt, BaseException]] = []
        self._timer: Callable[[], float] = time.monotonic  # local deadlines (F02); set from the driver at start
        self._failing: dict[str, float] = {}  # call -> when its failure was last logged
        self._drain_override: float | None = None
        self._drained = True
        self._thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._subscription: Subscription | None = None
        self._run_ident: int | None = None
        self._started = False

    # -- public control --------------------------------------------------------------

    @property
    def driver(self) -> JobDriver:
        """The store this worker claims from."""
        if self._driver is None:
            self._driver = get_job_driver()
        return self._driver

    @property
    def in_flight(self) -> int:
        """Handlers running now."""
        with self._lock:
            return self._attempts.busy

    def progress(self) -> dict[str, float | None]:
        """Latest progress each running handler reported, by job id."""
        with self._lock:
            return {
                jid: a.ctx.progress_value for jid, a in self._attempts.active.items() if a.status is S.RUNNING
            }

    def start(self) -> Worker:
        """Run the worker in background threads; answers itself. Stop it with :meth:`stop`."""
        with self._lock:
            if self._started:
                raise RuntimeError("this worker was already started; make a new one")
            self._started = True
        self._thread = threading.Thread(target=self._run, name=f"jobcore-worker-{self.worker_id}", daemon=True)
        self._thread.start()
        return self

    def run(self, *, stop_signals: bool = True) -> None:
        """Run the claim loop in this thread until stopped, then drain (W04).

        In the main thread, each of SIGINT and SIGTERM whose handling the program left as it
        was (not handled by the program, not ignored: a shell starts a background job with
        SIGINT ignored) drains the worker, and a second signal abandons in-flight jobs
        (:meth:`stop_on_signals`); ``stop_signals=False`` leaves signals alone.
        """
        with self._lock:
            if self._started:
                raise RuntimeError("this worker was already started; make a new one")
            self._started = True
        chosen = at_default() if stop_signals else ()
        restore = self.stop_on_signals(chosen) if chosen else None
        try:
            self._run()
        finally:
            if restore is not None:
                restore()

    def stop_on_signals(self, signals: Iterable[signal.Signals] = STOP_SIGNALS) -> Callable[[], None]:
        """Make ``signals`` (default SIGTERM and SIGINT) drain this worker and a second one
        abandon in-flight jobs (the main thread only; elsewhere nothing is installed). Answers a
        function putting the previous handlers back."""
        received: list[signal.Signals] = []

        def on_signal(sig: signal.Signals) -> None:
            received.append(sig)
            if len(received) == 1:
                self.log.warning("%s received: draining (send it again to stop at once)", sig.name)
                self.request_stop()
            else:
                self.log.warning("%s received again: abandoning in-flight jobs", sig.name)
                self.request_stop(drain_timeout=0)

        return on_stop_signals(on_signal, signals)

    def request_stop(self, drain_timeout: float | None = None) -> None:
        """Ask the worker to stop claiming and drain; returns at once (safe in signal handlers).

        Asked again with a ``drain_timeout`` while a drain is under way, it moves that
        drain's end (counted from when the drain began): ``request_stop(drain_timeout=0)``
        abandons the handlers still running at once. A ``drain_timeout`` that is negative,
        not finite or over 7 days is refused with ``JC_OPTION_INVALID`` and nothing changes.
        """
        if drain_timeout is not None:
            self._drain_override = _drain_seconds(drain_timeout)
        self._stopping.set()
        self._wake.set()
        with self._attempts.cond:
            self._attempts.cond.notify_all()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop claiming, let in-flight handlers finish within ``timeout`` (default
        ``drain_timeout``), abandon the rest (their leases lapse for reclaim), and wait
        for the worker to end. Answers ``True`` when nothing had to be abandoned (W04).
        """
        self.request_stop(timeout)
        if not self._started or threading.get_ident() == self._run_ident:
            return self._drained
        budget = (self.drain_timeout if timeout is None else max(0.0, timeout)) + 15.0
        self._done.wait(budget)
        return self._drained and self._done.is_set()

    def kill(self) -> None:
        """Stop at once as a crash would: nothing more is settled or renewed (tests, demos).

        Running handlers are told to stop; their jobs stay ``running`` until their
        leases lapse and another worker reclaims them.
        """
        book = self._attempts
        with self._lock:
            self._killed = True
            for attempt in book.active.values():
                if book.move(attempt, S.ABANDONED):
                    end_span(attempt, "abandoned")
                    self._running.call_off(attempt, "the worker was killed")
            book.active.clear()
            book.backlog.clear()
        self.request_stop(0.0)
        if self._started and threading.get_ident() != self._run_ident:
            self._done.wait(15.0)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the worker has ended; answers whether it did within ``timeout``."""
        return self._done.wait(timeout)

    # -- running the parts -----------------------------------------------------------

    def _run(self) -> None:
        self._run_ident = threading.get_ident()
        try:
            self._startup()
            self._claiming.loop()
        except SchemaOutdated as exc:
            self.log.error(  # noqa: TRY400 - the cause and fix say it all; a traceback would bury them
                "worker %s cannot run on this store: %s (fix: %s)", self.worker_id, exc.cause, exc.fix
            )
            raise
        except BaseException:
            self.log.exception("worker %s stopped by an unexpected error", self.worker_id)
            raise
        finally:
            self._shutdown()

    def _startup(self) -> None:
        if not self.queues:
            v.check_claim(self.queues, self.worker_id, 1, self.lease, ())  # raises JC_CLAIM_QUEUES_EMPTY
        driver = self.driver
        self._timer = monotonic_of(driver.clock)
        capabilities = self._retrying("reading the store's capabilities", lambda: driver.capabilities)
        if capabilities is None:  # stopped before the store answered
            return
        parts: list[tuple[Callable[[], None], str]] = [
            (self._leases.keeper, "keeper"), (self._leases.beater, "beater"), (self._settling.run, "settler"),
        ]
        if self._claiming.start_starter(driver):
            parts.append((self._claiming.marker, "marker"))
        for target, name in parts:
            thread = threading.Thread(target=target, name=f"jobcore-{name}-{self.worker_id}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.retention is not None:
            self._pruner = Pruner(
                driver, holder=self.worker_id, policy=self.retention, interval=self.prune_interval
            ).start()
        if "notify" in capabilities:
            try:
                self._subscription = driver.subscribe(self.queues, self._on_notify)
            except Exception:
                self.log.exception("could not subscribe to wake-ups; polling every %ss", self.poll_interval)
        if self.summary_interval is not None:
            thread = threading.Thread(target=self._summaries, name=f"jobcore-summary-{self.worker_id}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.log.info(
            "worker %s started on %s (concurrency %d, lease %ss, prefetch %d; driver %r)", self.worker_id,
            ",".join(self.queues), self.concurrency, self.lease.total_seconds(), self.prefetch, driver,
        )
        if self.scheduler is not None:
            self.scheduler.start()

    def _summaries(self) -> None:
        """Every ``summary_interval``: one INFO line of what happened since the last one."""
        interval = self.summary_interval
        assert interval is not None
        last = Counter(self.counts)
        while not self._stopping.wait(interval):
            now = Counter(self.counts)
            done = {name: now[name] - last[name] for name in SUMMARY_COUNTS}
            last = now
            with self._lock:
                running, waiting = self._attempts.busy, len(self._attempts.backlog)
            self.log.info(
                "worker %s, last %gs: %s; %d running, %d waiting", self.worker_id, interval,
                ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in done.items()), running, waiting,
            )

    def _on_notify(self, _queue: str) -> None:
        self._wake.set()

    # -- shared by the parts ---------------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def _retrying(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()``, tried again after failures (backing off up to RETRY_CAP) until it
        answers or the worker stops (then None)."""
        delay = RETRY_FIRST
        while True:
            try:
                answer = call()
            except Exception:
                self._log_failure(what)
                if self._stopping.wait(delay * self._rng.uniform(0.8, 1.2)):
                    return None
                delay = min(RETRY_CAP, delay * 2)
                continue
            self._recovered(what)
            return answer

    def _log_failure(self, what: str, log: logging.LoggerAdapter[Any] | None = None) -> None:
        """Log a failed store call with its traceback: at once, then once per LOG_REPEAT while it keeps failing."""
        now = time.monotonic()
        with self._lock:
            last = self._failing.get(what)
            if last is not None and now - last < LOG_REPEAT:
                return
            self._failing[what] = now
        (log or self.log).warning(
            "%s failed%s; retrying", what, "" if last is None else " again", exc_info=True,
        )

    def _recovered(self, what: str) -> None:
        if what in self._failing:  # unlocked read first: this runs once per call
            with self._lock:
                if self._failing.pop(what, None) is not None:
                    self.log.warning("%s works again", what)

    def _store_now(self) -> datetime | None:
        """The store's time as the driver's clock tells it, or None when it cannot be had."""
        try:
            return to_millis(self.driver.clock.now())
        except Exception:
            return None

    def _retry_options(self, handle: JobHandle | None, job: Job, raised: BaseException) -> dict[str, Any]:
        """``nack`` options for a failed attempt, its retry time on the store's clock (F01)."""
        return retry_options(self._store_now(), handle, job, raised, self._rng)

    # -- shutdown --------------------------------------------------------------------

    def _give_back(self) -> None:
        """Prefetched jobs that never started go back to the queue at once, no attempt spent (W04).

        So do the attempts a shutdown signal ended (W07), with that signal as their error.
        """
        book = self._attempts
        with self._lock:
            signalled, self._given_back_at_stop = self._given_back_at_stop, []
        for attempt, error in signalled:
            self._settling.nack(attempt, error, {"counts_as_attempt": False})
        with self._lock:
            waiting = [a for a in book.backlog if book.move(a, S.FINISHING, only_from=(S.QUEUED,))]
            book.backlog.clear()
        for attempt in waiting:
            error = error_type("WorkerStopping")("given back unstarted: the worker stopped")
            self._settling.nack(attempt, error, {"counts_as_attempt": False})

    def _shutdown(self) -> None:
        book = self._attempts
        began = time.monotonic()
        timeout = self.drain_timeout if self._drain_override is None else self._drain_override
        self._give_back()
        with book.cond:
            while book.busy > 0 and not self._killed:
                # A later request_stop(drain_timeout=...) (a second SIGTERM) moves the end of
                # a drain already under way: it counts from when the drain began.
                if self._drain_override is not None:
                    timeout = self._drain_override
                remaining = began + timeout - time.monotonic()
                if remaining <= 0:
                    break
                book.cond.wait(remaining)
            abandoned = [
                a for a in list(book.active.values()) if book.move(a, S.ABANDONED, only_from=(S.STARTING, S.RUNNING))
            ]
            for attempt in abandoned:
                book.active.pop(attempt.job.id, None)
        for attempt in abandoned:
            end_span(attempt, "abandoned")
            self._count("abandoned", 1)
            attempt.log.warning(
                "job %s (%s) abandoned after the %gs drain timeout; its lease will lapse for reclaim",
                attempt.job.id, attempt.job.name, timeout,
            )
            self._running.call_off(attempt, "the worker is shutting down")
        deadline = began + timeout
        self._drained = not abandoned and not self._killed
        self._running.close()
        if self._pruner is not None:
            self._pruner.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        self._claiming.stop_marker()  # recorded before their settles: a settle starts a held job anyway
        self._settling.stop(max(deadline, time.monotonic()) + 1.0)
        for thread in self._threads:
            if thread.name.startswith("jobcore-settler"):
                thread.join(10.0)
        self._leases.stop()
        for thread in self._threads:
            thread.join(5.0)
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                self._subscription.close()
        self._running.stop_loop()
        self.log.info(
            "worker %s stopped (%s)", self.worker_id,
            "drained" if self._drained else f"{len(abandoned)} abandoned" if not self._killed else "killed",
        )
        self._done.set()


def __getattr__(name: str) -> Any:
    if name == "AsyncWorker":  # its module imports this one
        from jobcore.worker._aworker import AsyncWorker  # noqa: PLC0415

        return AsyncWorker
    raise AttributeError(f"module 'jobcore.worker' has no attribute {name!r}")

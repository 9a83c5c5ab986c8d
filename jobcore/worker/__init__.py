"""The worker: claims jobs, runs their handlers, keeps their leases, settles them.

One :class:`Worker` runs these threads:

* the **claim loop** (the caller's thread under :meth:`Worker.run`, a background one
  under :meth:`Worker.start`) claims batches sized to its free slots, wakes on the
  driver's notifications where it has them and polls otherwise, announces buried jobs
  (C08) and runs ``introspect.rescue()`` periodically (C10);
* one thread per running **sync handler**, and one event-loop thread shared by the
  **async handlers**;
* the **keeper**, which makes no store call: it holds each attempt to its local
  deadline (F02: when the last landed claim or renewal was sent, plus the lease, minus
  the safety margin, on this host's monotonic clock) and calls the handler off the
  moment it passes, whatever any store call is doing; it also enforces handler timeouts;
* the **beater**, which renews each held lease every ``lease/3``; a renewal the store
  refuses calls the attempt off (W02);
* the **settler**, which settles finished attempts with their claim token, acks
  batched through ``ack_many`` (S07), retries a settle the store did not answer (F05),
  and fires ``on_settled`` (W06);
* the **pruner** (:mod:`jobcore.retention`), which every ``prune_interval`` deletes
  finished jobs older than ``retention`` while holding the fleet-wide prune lease;
* the **scheduler** (:mod:`jobcore.scheduler`, on unless ``scheduler=False``), which
  fires the due occurrences of the store's periodic schedules (rules P).

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
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import inspect
import itertools
import logging
import os
import queue as queue_mod
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from jobcore import events
from jobcore import validate as v
from jobcore.backoff import DEFAULT_BACKOFF
from jobcore.clock import monotonic_of, to_millis
from jobcore.current import get_job_driver
from jobcore.driver import DeferredStart, Duration, JobDriver, LandedAcks, Subscription
from jobcore.errors import (
    ConfigurationError,
    InvalidInput,
    JobNotRegistered,
    JobTimeout,
    OptionInvalid,
    PayloadInvalid,
    SchemaOutdated,
)
from jobcore.records import Claimed, ClaimToken, Job, JobState, RetentionPolicy
from jobcore.registry import JobContext, JobHandle, Registry, default_registry, job_logger
from jobcore.retention import DEFAULT_PRUNE_INTERVAL, Pruner
from jobcore.scheduler import Scheduler

__all__ = ["OUTCOMES", "Worker", "call_handler", "handler_error", "retry_policy"]

logger = logging.getLogger("jobcore.worker")

OUTCOMES = ("completed", "failed", "dead_lettered", "dropped", "buried")
"""Endings ``on_settled`` reports: done; failed at once (terminal); dead; failed when
exhausted with ``dead_letter=False``; lease lapsed on the final attempt (C08)."""

SHUTDOWN_SIGNALS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)
"""Raised by a handler, these stop the worker and give the attempt back instead of failing it."""

ON_SETTLED_TRIES = 3
"""How many times an ``on_settled`` callback that raises is called for one ending."""

SETTLE_BATCH = 500
"""Most settles one settler round sends (acks go in one ``ack_many``)."""

MARK_LINGER = 0.005
"""Seconds the marker waits, after the first start of a round, before recording the starts
of the handlers still running (F04); those that ended meanwhile are started by their settles."""

CONCURRENCY_RETRY = 1.0
"""Seconds (jittered) before a job held back by its concurrency limit is offered again."""

RETRY_FIRST, RETRY_CAP = 0.05, 0.5
"""Seconds before the first retry of a call the store did not answer (a claim, a start, a
settle), doubling up to the cap: so a worker claims again within about half a second of
the store's return (F06)."""

LOG_REPEAT = 30.0
"""Seconds between two log records of the same failing call (the first is logged at once)."""

DEFAULT_RETENTION = RetentionPolicy()
"""The policy workers prune by unless told otherwise (``retention=None`` turns pruning off)."""

_error_types: dict[str, type[Exception]] = {}
_error_types_lock = threading.Lock()


def _error_type(name: str) -> type[Exception]:
    """An exception class carrying ``name``, so a rewritten message keeps its type name."""
    with _error_types_lock:
        cls = _error_types.get(name)
        if cls is None:
            cls = type(name if name.isidentifier() else "HandlerError", (Exception,), {})
            _error_types[name] = cls
        return cls


def handler_error(raised: object) -> Exception:
    """What to record for whatever a handler raised or produced (W07).

    The answer carries the original type name and a readable message that every driver
    stores: NUL characters and unpaired surrogates removed, cut to
    :data:`~jobcore.validate.MAX_ERROR_TEXT_BYTES`. An exception with an empty text
    is described by its ``repr``; a non-exception value by its type and ``repr``.
    """
    if isinstance(raised, BaseException):
        type_name = type(raised).__name__
        try:
            message = str(raised)
        except Exception:
            message = f"<unprintable {type_name}>"
        if not message:
            try:
                message = repr(raised)
            except Exception:
                message = type_name
    else:
        type_name = "NonExceptionRaised"
        try:
            message = f"handler produced a {type(raised).__name__}, not an exception: {raised!r}"
        except Exception:
            message = f"handler produced a {type(raised).__name__}, not an exception"
    message = message.replace("\x00", "")
    data = message.encode("utf-8", "replace")  # unpaired surrogates become '?'
    limit = v.MAX_ERROR_TEXT_BYTES
    if len(data) > limit:
        marker = b" ... [truncated]"
        data = data[: limit - len(marker)] + marker
    text = data.decode("utf-8", "ignore")
    return _error_type(type_name)(text)


def retry_policy(
    handle: JobHandle | None, job: Job, raised: BaseException, now: datetime, rng: random.Random | None = None
) -> dict[str, Any]:
    """``nack`` keyword arguments for an attempt of ``job`` that raised ``raised``.

    Terminal types fail at once (S04, W05); otherwise the job retries after the
    handle's backoff (the driver dead-letters or drops it when attempts ran out).
    """
    if handle is None:
        return {"retry_at": to_millis(now + DEFAULT_BACKOFF.delay(job.attempt, rng))}
    if handle.terminal and isinstance(raised, handle.terminal):
        return {"fail": True, "dead_letter": handle.dead_letter}
    return {"retry_at": to_millis(now + handle.backoff.delay(job.attempt, rng)), "dead_letter": handle.dead_letter}


def call_handler(handle: JobHandle, job: Job, ctx: JobContext) -> Any:
    """Call the handler with the payload (and ``ctx=`` when it asks); a coroutine for async ones."""
    if handle.wants_ctx:
        return handle.fn(job.payload, ctx=ctx)
    return handle.fn(job.payload)


def _seconds(value: Duration, name: str) -> float:
    return v.check_lease(value, name).total_seconds()


class _Attempt:
    """One claimed job while this worker holds it. Status changes under the worker's lock.

    Status: ``queued`` (claimed, waiting in the backlog; held where the driver offers it)
    -> ``starting`` (a slot reserved, its start on its way to the store) -> ``running``
    (handler busy, holds a slot) -> ``finishing`` (outcome queued for the settler) or
    ``timed_out`` -> ``settling``; any of those -> ``lost`` (lease gone, nothing
    recorded) or ``abandoned`` (shutdown/kill); the settler removes it when done.
    """

    __slots__ = (
        "claimed", "ctx", "deadline", "handle", "held", "job", "log", "next_beat", "renewed_at", "slot_holder",
        "slot_key", "started_at", "status", "task",
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
        self.status = "running"
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


def _takes_landed_only(driver: JobDriver) -> bool:
    """Whether to ack ``landed_only``: the driver declares ``ack_landed_only`` and its
    ``ack_many`` takes the keyword (a wrapper passing ``capabilities`` through may not)."""
    if "ack_landed_only" not in driver.capabilities:
        return False
    try:
        params = inspect.signature(driver.ack_many).parameters.values()
    except (TypeError, ValueError):  # no signature to read: ask nothing new of it
        return False
    return any(p.name == "landed_only" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _takes_start(driver: JobDriver) -> bool:
    """Whether to claim held and start in the store (F04): the driver declares
    ``deferred_start`` and offers ``start`` (a wrapper may pass ``capabilities`` through)."""
    return "deferred_start" in driver.capabilities and callable(getattr(driver, "start", None))


def _transient(exc: BaseException) -> bool:
    """Whether a failed store call may succeed when tried again (not a refusal of its input)."""
    return not isinstance(exc, InvalidInput | ConfigurationError)


class _Settle:
    """One settle for the settler: an ack with ``result`` or a nack with ``error`` and options.

    ``tries`` counts the calls that failed without an answer; after one, a settle that
    answers "did not land" may have landed on an earlier try (its reply was lost), so
    the settler looks the job up before calling it lost (F05).
    """

    __slots__ = ("attempt", "error", "kind", "options", "result", "tries")

    def __init__(
        self, attempt: _Attempt, kind: str, *, result: Any = None, error: BaseException | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.attempt, self.kind, self.result, self.error = attempt, kind, result, error
        self.options = options or {}
        self.tries = 0

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


class _Starter:
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
                try:
                    answers = self._start([entry[0] for entry in batch])
                except BaseException as exc:  # every waiter learns it; a non-Exception is raised on below
                    error = exc
                finally:
                    for index, entry in enumerate(batch):
                        entry[1] = bool(answers[index]) if answers is not None else False
                        entry[2] = error if error is not None or answers is not None else RuntimeError("no answer")
                        entry[3] = True
                    self._cond.acquire()
                    self._sending = False
                    self._cond.notify_all()
                if error is not None and not isinstance(error, Exception):
                    raise error
        return [cast("BaseException", entry[2]) if entry[2] is not None else bool(entry[1]) for entry in mine]


class _Stop:
    """Tells the settler to finish: retries end at ``at`` (monotonic), the drain's end."""

    def __init__(self, at: float) -> None:
        self.at = at


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
        drain_timeout: Seconds :meth:`stop` waits for in-flight handlers.
        worker_id: This worker's id in claims (default ``host:pid:random``).
        on_settled: ``fn(job, outcome)`` for each ending that landed (see :data:`OUTCOMES`).
        rescue_interval: Seconds between ``introspect.rescue()`` sweeps (``None``: never).
        prefetch: Most jobs claimed ahead of free slots (default ``max(16 * concurrency, 128)``, at most 1000;
            0: claim only for free slots). The worker prefetches only what its slots will
            run within one claim round trip (measured), so slow jobs are never hoarded;
            prefetched jobs are leased and heartbeated, and given back unstarted on stop.
        heartbeat_interval: Seconds between renewals of one lease (default ``lease/3``).
        seed: Seeds the jitter of retry delays (tests).
        retention: Finished jobs older than this policy are pruned (``None``: never);
            one worker of the fleet at a time does it (:mod:`jobcore.retention`).
        prune_interval: Seconds between pruning runs (the first comes one interval in).
        scheduler: Run a :class:`~jobcore.scheduler.Scheduler` thread that declares the
            registry's schedules and fires due occurrences (any number may run at once).
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
    ) -> None:
        names = [q.strip() for q in queues.split(",")] if isinstance(queues, str) else list(queues)
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
        self._driver = driver
        self.registry = registry if registry is not None else default_registry
        self.poll_interval = _seconds(poll_interval, "poll_interval")
        self.drain_timeout = max(0.0, float(drain_timeout))
        self.worker_id = v.check_name(
            worker_id if worker_id is not None else f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            "worker_id",
        )
        self.on_settled = on_settled
        self.rescue_interval = None if rescue_interval is None else _seconds(rescue_interval, "rescue_interval")
        beat = self.lease.total_seconds() / 3 if heartbeat_interval is None else heartbeat_interval
        self.heartbeat_interval = _seconds(beat, "heartbeat_interval")
        self.retention = None if retention is None else v.check_prune(retention, 1, 1)[0]
        self.prune_interval = _seconds(prune_interval, "prune_interval")
        self._pruner: Pruner | None = None
        self.scheduler: Scheduler | None = (
            Scheduler(driver, registry=self.registry, scheduler_id=self.worker_id) if scheduler else None
        )
        self.counts: Counter[str] = Counter()
        """Running totals: claimed, completed, retried, failed, dead_lettered, dropped,
        buried, lost, timed_out, settle_errors, abandoned, ..."""
        self.log = job_logger(logger, None)
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._active: dict[str, _Attempt] = {}
        self._busy = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._killed = False
        self._done = threading.Event()
        self._keeper_wake = threading.Event()
        self._settles: queue_mod.SimpleQueue[Any] = queue_mod.SimpleQueue()
        self._runq: queue_mod.SimpleQueue[_Attempt | None] = queue_mod.SimpleQueue()
        self.prefetch = v.check_int(
            min(max(16 * self.concurrency, 128), v.MAX_CLAIM_BATCH) if prefetch is None else prefetch, "prefetch", 0,
            v.MAX_CLAIM_BATCH,
        )
        self._backlog: collections.deque[_Attempt] = collections.deque()
        self._given_back_at_stop: list[tuple[_Attempt, BaseException]] = []
        self._claim_rtt = 0.0  # seconds per claim round trip (moving average)
        self._run_time: float | None = None  # seconds per handler run (moving average)
        self._lean_acks: bool | None = None  # ack landed_only? (decided on the first ack batch)
        self._timer: Callable[[], float] = time.monotonic  # local deadlines (F02); set from the driver at start
        self._starter: _Starter | None = None  # set at start when the driver holds claims (F04)
        self._marks: queue_mod.SimpleQueue[Any] = queue_mod.SimpleQueue()  # starts to record (F04)
        self._beater_wake = threading.Event()
        self._failing: dict[str, float] = {}  # call -> when its failure was last logged
        self._idle_runners = 0
        self._runners_closed = False
        self._drain_override: float | None = None
        self._drained = True
        self._thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._subscription: Subscription | None = None
        self._run_ident: int | None = None
        self._keeper_stop = False
        self._started = False

    # -- public control --------------------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

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
            return self._busy

    def progress(self) -> dict[str, float | None]:
        """Latest progress each running handler reported, by job id."""
        with self._lock:
            return {jid: a.ctx.progress_value for jid, a in self._active.items() if a.status == "running"}

    def start(self) -> Worker:
        """Run the worker in background threads; answers itself. Stop it with :meth:`stop`."""
        with self._lock:
            if self._started:
                raise RuntimeError("this worker was already started; make a new one")
            self._started = True
        self._thread = threading.Thread(target=self._run, name=f"jobcore-worker-{self.worker_id}", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """Run the claim loop in this thread until stopped, then drain (W04)."""
        with self._lock:
            if self._started:
                raise RuntimeError("this worker was already started; make a new one")
            self._started = True
        self._run()

    def request_stop(self, drain_timeout: float | None = None) -> None:
        """Ask the worker to stop claiming and drain; returns at once (safe in signal handlers).

        Asked again with a ``drain_timeout`` while a drain is under way, it moves that
        drain's end (counted from when the drain began): ``request_stop(drain_timeout=0)``
        abandons the handlers still running at once.
        """
        if drain_timeout is not None:
            self._drain_override = max(0.0, float(drain_timeout))
        self._stopping.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()

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
        with self._lock:
            self._killed = True
            for attempt in self._active.values():
                if attempt.status != "abandoned":
                    if attempt.status in ("starting", "running"):
                        self._busy -= 1
                    attempt.status = "abandoned"
                    self._call_off(attempt, "the worker was killed")
            self._active.clear()
            self._backlog.clear()
        self.request_stop(0.0)
        if self._started and threading.get_ident() != self._run_ident:
            self._done.wait(15.0)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the worker has ended; answers whether it did within ``timeout``."""
        return self._done.wait(timeout)

    # -- the claim loop --------------------------------------------------------------

    def _run(self) -> None:
        self._run_ident = threading.get_ident()
        try:
            self._startup()
            self._claim_loop()
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
        if _takes_start(driver):
            self._starter = _Starter(cast(DeferredStart, driver).start)
        parts = [(self._keeper, "keeper"), (self._beater, "beater"), (self._settler, "settler")]
        if self._starter is not None:
            parts.append((self._marker, "marker"))
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
        self.log.info(
            "worker %s started on %s (concurrency %d, lease %ss)", self.worker_id, ",".join(self.queues),
            self.concurrency, self.lease.total_seconds(),
        )
        if self.scheduler is not None:
            self.scheduler.start()

    def _on_notify(self, _queue: str) -> None:
        self._wake.set()

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

    def _claim_loop(self) -> None:
        next_rescue = time.monotonic() if self.rescue_interval is not None else None
        failures = 0
        held = self._starter is not None
        while not self._stopping.is_set():
            if next_rescue is not None and time.monotonic() >= next_rescue:
                assert self.rescue_interval is not None
                next_rescue = time.monotonic() + self.rescue_interval
                self._rescue()
            self._pump()
            with self._cond:
                target = self._backlog_target()
                room = self.concurrency - self._busy + target - len(self._backlog)
                # With jobs still waiting, top the backlog up in halves, not a job at a time.
                if room <= 0 or (self._backlog and room < max(1, target // 2)):
                    self._cond.wait(self.poll_interval)
                    continue
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                sent, local = time.monotonic(), self._timer()
                options: dict[str, Any] = {"start": False} if held else {}
                result = self.driver.claim(
                    self.queues, worker_id=self.worker_id, limit=min(room, v.MAX_CLAIM_BATCH), lease=self.lease,
                    drop_exhausted=self.registry.drop_exhausted(), **options,
                )
                self._claim_rtt += (time.monotonic() - sent - self._claim_rtt) / 8
            except SchemaOutdated:
                raise  # no retry mends it: someone must run `jobcore migrate` (or upgrade jobcore)
            except Exception:
                # F06: try again soon (within RETRY_CAP of the store's return), log sparingly.
                self._log_failure("claim")
                delay = min(self.poll_interval, RETRY_CAP, RETRY_FIRST * 2**failures)
                failures += 1
                self._stopping.wait(delay * self._rng.uniform(0.8, 1.2))
                continue
            if failures:
                failures = 0
                self._recovered("claim")
            for job in result.buried:
                self._announce_buried(job)
            if result.claimed:
                self._count("claimed", len(result.claimed))
            for claimed in result.claimed:
                try:
                    self._launch(claimed, local, held)
                except Exception:  # W03: one job's trouble never ends the loop; its lease lapses
                    job_logger(logger, claimed.job).exception("could not start job %s", claimed.job.id)
            self._pump()
            if len(result.claimed) < room:
                self._wake.wait(self.poll_interval)

    def _backlog_target(self) -> int:
        """Jobs to hold claimed beyond the free slots: what the slots run in one claim round trip.

        A handler that takes longer than a claim round trip gets no prefetch at all, so a
        worker never sits on jobs another worker could be running.
        """
        if self._run_time is None or not self.prefetch:
            return 0
        wanted = self.concurrency * self._claim_rtt / max(self._run_time, 1e-6)
        return min(self.prefetch, int(wanted))

    def _pump(self) -> None:
        """Start claimed jobs waiting in the backlog while slots are free, their store starts in one call."""
        while True:
            reserved = self._reserve(self.concurrency)
            if not reserved:
                return
            for attempt in self._start(reserved):
                self._dispatch(attempt)

    def _reserve(self, most: int = 1) -> list[_Attempt]:
        """Take up to ``most`` waiting attempts and a slot for each (status ``starting``)."""
        taken: list[_Attempt] = []
        with self._lock:
            while (
                len(taken) < most and self._backlog and self._busy < self.concurrency
                and not self._stopping.is_set()
            ):
                attempt = self._backlog.popleft()
                if attempt.status == "queued":  # not lost while it waited
                    attempt.status = "starting"
                    self._busy += 1
                    taken.append(attempt)
        return taken

    def _rescue(self) -> None:
        try:
            rescued = self.driver.introspect.rescue()
        except Exception:
            self.log.exception("rescue sweep failed")
            return
        if rescued.requeued:
            events.emit(
                "rescued", None, "rescue put %d jobs with lapsed leases back to ready", rescued.requeued,
                outcome="requeued", count=rescued.requeued, worker_id=self.worker_id,
            )
        for job in rescued.buried:
            self._announce_buried(job)

    def _announce_buried(self, job: Job) -> None:
        self._count("buried", 1)
        events.emit(
            "buried", job,
            "job %s (%s) buried %s: its lease lapsed on the final attempt %d of %d (the worker likely crashed)",
            job.id, job.name, job.state, job.attempt, job.max_attempts, level=logging.ERROR,
            outcome=JobState(job.state).value, error_type=job.errors[-1].type if job.errors else None,
            worker_id=self.worker_id,
        )
        self._fire(job, "buried")

    # -- running handlers ------------------------------------------------------------

    def _launch(self, claimed: Claimed, renewed_at: float, held: bool) -> None:
        job = claimed.job
        log = job_logger(logger, job)
        try:
            handle: JobHandle | None = self.registry.get(job.name)
        except JobNotRegistered as exc:
            handle = None
            log.error("job %s: %s", job.id, exc.cause)  # noqa: TRY400 - the traceback says nothing more
        ctx = JobContext(job, claimed.token, log=log)
        attempt = _Attempt(claimed, handle, ctx, log, renewed_at=renewed_at, held=held)
        ctx.lease_left = lambda: self._deadline(attempt) - self._timer()
        attempt.next_beat = time.monotonic() + self.heartbeat_interval
        if handle is not None:
            attempt.status = "queued"  # leased and heartbeated while it waits for a slot
        with self._lock:
            stale = self._active.get(job.id)
            if stale is None and handle is not None:  # the common case: queued in this one locked step
                if not self._killed:
                    self._active[job.id] = attempt
                    self._backlog.append(attempt)
                return
        if stale is not None:
            # This worker reclaimed a job whose earlier attempt it still holds: that lease
            # lapsed and the claim moved its token, so the earlier attempt is called off
            # now (W02) rather than dropped unseen by the keeper.
            self._lose(stale, "its lease lapsed and the job was claimed again")
        if handle is None:
            error = JobNotRegistered(f"no handler is registered for job {job.name!r} in worker {self.worker_id}")
            self._queue_nack(attempt, error, self._retry_options(None, job, error))
            return
        with self._lock:
            if self._killed:
                return
            self._active[job.id] = attempt
            self._backlog.append(attempt)

    def _deadline(self, attempt: _Attempt) -> float:
        """The attempt's local deadline (F02): last landed renewal sent + lease - margin."""
        return attempt.renewed_at + self._lease_s - self._margin_s

    def _fresh(self, attempt: _Attempt) -> bool:
        """Whether a reserved attempt may start (F03): its local deadline at least a margin
        ahead. If not, it is given back (where the store answers; else it lapses, at no
        cost while held)."""
        if self._timer() + self._margin_s <= self._deadline(attempt):
            return True
        error = _error_type("StaleClaim")(
            f"not started: less than the {self._margin_s:g}s margin was left of its lease in worker {self.worker_id}"
        )
        self._unstart(attempt, error, {"counts_as_attempt": False})
        return False

    def _start(self, reserved: list[_Attempt]) -> list[_Attempt]:
        """Start reserved attempts: each only while fresh (F03), with its fleet slot, its
        start recorded in the store first where it was claimed held (F04), its timeout and
        the started event. Answers the sync ones, for runners; async ones are scheduled.
        """
        ready: list[_Attempt] = []
        held: list[_Attempt] = []
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
            first: list[_Attempt] = []
            for attempt in held:
                job = attempt.job
                if self.strict_starts or job.claim_no > job.attempt:
                    first.append(attempt)
                    continue
                attempt.held = False
                self._marks.put(attempt)
                ready.append(attempt)
            if first:
                ready += self._begin(first)
        return [attempt for attempt in ready if self._run_started(attempt)]

    def _begin(self, held: list[_Attempt]) -> list[_Attempt]:
        """Record the start of held attempts in the store (F04), retrying a call the store
        did not answer while the attempts stay fresh; answers those that may run."""
        assert self._starter is not None
        started: list[_Attempt] = []
        pending = held
        delay = RETRY_FIRST
        while pending:
            answers = self._starter.start([attempt.claimed.token for attempt in pending])
            retry: list[_Attempt] = []
            for attempt, answer in zip(pending, answers, strict=True):
                if answer is True:
                    attempt.held = False
                    if self._fresh(attempt):  # the call may have taken long: give it back if now stale
                        started.append(attempt)
                elif answer is False:
                    self._lose(attempt, "its lease was lost before it started")
                elif self._fresh(attempt):
                    retry.append(attempt)
            if retry:
                self._log_failure("starting claimed jobs in the store")
                if self._stopping.wait(delay * self._rng.uniform(0.8, 1.2)):
                    for attempt in retry:
                        self._unstart(attempt, _error_type("WorkerStopping")("given back unstarted"), {
                            "counts_as_attempt": False,
                        })
                    break
                delay = min(RETRY_CAP, delay * 2)
            elif pending is not held:
                self._recovered("starting claimed jobs in the store")
            pending = retry
        return started

    def _marker(self) -> None:
        """Record in the store the starts of attempts already running (F04), batched.

        An answer ``False`` means the token was no longer current (the job cancelled or
        taken meanwhile): the handler is called off. A call the store does not answer is
        retried while the attempts' leases can still be current."""
        assert self._starter is not None
        stop = False
        while not stop:
            entry = self._marks.get()
            batch: list[_Attempt] = []
            if not isinstance(entry, _Stop):
                time.sleep(MARK_LINGER)  # one wait for the round, not a wake-up per start
            try:
                while True:
                    if isinstance(entry, _Stop):
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
            batch = [attempt for attempt in batch if attempt.status == "running"]
            delay = RETRY_FIRST
            while batch and not self._killed:
                answers = self._starter.start([attempt.claimed.token for attempt in batch])
                retry = []
                for attempt, answer in zip(batch, answers, strict=True):
                    if answer is False:
                        self._lose(attempt, "its start was refused: the job was cancelled or taken")
                    elif answer is not True and self._timer() <= self._deadline(attempt) + self._lease_s:
                        retry.append(attempt)
                if not retry:
                    if delay > RETRY_FIRST:
                        self._recovered("recording started jobs")
                    break
                self._log_failure("recording started jobs")
                time.sleep(delay * self._rng.uniform(0.8, 1.2))
                delay = min(RETRY_CAP, delay * 2)
                batch = retry

    def _store_now(self) -> datetime | None:
        """The store's time as the driver's clock tells it, or None when it cannot be had."""
        try:
            return to_millis(self.driver.clock.now())
        except Exception:
            return None

    def _run_started(self, attempt: _Attempt) -> bool:
        """Mark a started attempt running: its timeout, the started event; schedule an async
        handler. Answers whether a runner thread should run it (sync and not lost meanwhile)."""
        handle = attempt.handle
        assert handle is not None
        job = attempt.job
        with self._lock:
            if attempt.status != "starting" or self._killed:  # lost while taking its fleet slot
                lost = True
            else:
                lost = False
                attempt.status = "running"
                attempt.started_at = time.monotonic()
                if handle.timeout is not None:
                    attempt.deadline = attempt.started_at + handle.timeout
        if lost:
            self._release_slot(attempt)
            return False
        if handle.timeout is not None:
            self._keeper_wake.set()
        events.emit(
            "started", job, "job %s (%s) attempt %d started", job.id, job.name, job.attempt,
            level=logging.DEBUG, outcome="running", worker_id=self.worker_id,
        )
        if handle.is_async:
            loop = self._ensure_loop()
            asyncio.run_coroutine_threadsafe(self._run_async(attempt), loop)
            return False
        return True

    def _unstart(self, attempt: _Attempt, error: BaseException, options: dict[str, Any]) -> None:
        """A reserved attempt cannot start: free its slots and queue its nack."""
        with self._cond:
            if attempt.status != "starting":  # lost meanwhile: that released the slot
                return
            attempt.status = "finishing"
            self._busy -= 1
            self._cond.notify_all()
        self._release_slot(attempt)
        self._settles.put(_Settle(attempt, "nack", error=error, options=options))

    def _dispatch(self, attempt: _Attempt) -> None:
        """Hand a sync attempt to an idle runner thread, or start a runner when none is idle.

        Runners are reused: starting a thread per job cost more than a short handler. A
        runner still inside a called-off handler is not idle, so it never delays the next job.
        """
        with self._lock:
            reuse = self._idle_runners > 0
            if reuse:
                self._idle_runners -= 1  # reserved: exactly one idle runner takes this put
        if reuse:
            self._runq.put(attempt)
        else:
            name = f"jobcore-runner-{self.worker_id}"
            threading.Thread(target=self._runner, args=(attempt,), name=name, daemon=True).start()

    def _runner(self, attempt: _Attempt | None) -> None:
        while attempt is not None:
            self._run_sync(attempt)
            attempt = self._next_inline()
            if attempt is not None:  # the next backlog job runs on this thread: no hand-off
                continue
            with self._lock:
                if self._runners_closed:
                    return
                self._idle_runners += 1
            attempt = self._runq.get()

    def _next_inline(self) -> _Attempt | None:
        """The next backlog attempt this runner thread should run, started; None when none."""
        while True:
            reserved = self._reserve()
            if not reserved:
                return None
            runnable = self._start(reserved)
            if runnable:
                return runnable[0]

    def _take_slot(self, attempt: _Attempt, handle: JobHandle) -> bool:
        """Take the job's fleet concurrency slot; when full, give the attempt back for later."""
        try:
            key = handle.concurrency_slot(attempt.job.payload)
        except Exception as exc:
            attempt.log.exception("concurrency_key failed for job %s", attempt.job.id)
            self._unstart(attempt, exc, {"fail": True, "dead_letter": handle.dead_letter})
            return False
        if key is None:
            return True
        assert handle.concurrency is not None
        holder = f"{self.worker_id}/{attempt.job.id}"[-v.MAX_NAME_LENGTH :]
        try:
            taken = self.driver.leases.acquire(key, handle.concurrency, holder, self.lease)
        except Exception:
            attempt.log.exception("could not take a concurrency slot of %s; retrying later", key)
            taken = False
        if taken:
            attempt.slot_key, attempt.slot_holder = key, holder
            return True
        delay = timedelta(seconds=CONCURRENCY_RETRY * self._rng.uniform(0.5, 1.5))
        self._count("deferred", 1)
        attempt.log.debug("job %s deferred: %s is at its limit of %d", attempt.job.id, key, handle.concurrency)
        error = _error_type("ConcurrencyLimited")(f"{key} already runs {handle.concurrency} at once")
        now = self._store_now()
        options: dict[str, Any] = {"counts_as_attempt": False}
        if now is not None:
            options["retry_at"] = to_millis(now + delay)
        self._unstart(attempt, error, options)
        return False

    def _run_sync(self, attempt: _Attempt) -> None:
        assert attempt.handle is not None
        try:
            result = call_handler(attempt.handle, attempt.job, attempt.ctx)
        except SHUTDOWN_SIGNALS as exc:
            self._finished(attempt, None, exc)
        except BaseException as exc:  # W07: whatever the handler raised is the attempt's error
            self._finished(attempt, None, exc)
        else:
            self._finished(attempt, result, None)

    async def _run_async(self, attempt: _Attempt) -> None:
        assert attempt.handle is not None
        attempt.task = asyncio.current_task()
        if attempt.status != "running":  # called off before it got to start
            return
        try:
            result = await call_handler(attempt.handle, attempt.job, attempt.ctx)
        except BaseException as exc:  # W07, including a CancelledError the handler raised itself
            self._finished(attempt, None, exc)
        else:
            self._finished(attempt, result, None)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._loop_main, args=(loop,), name=f"jobcore-async-{self.worker_id}", daemon=True
                )
                self._loop, self._loop_thread = loop, thread
                thread.start()
            return self._loop

    @staticmethod
    def _loop_main(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def _finished(self, attempt: _Attempt, result: Any, raised: BaseException | None) -> None:
        """A handler returned or raised: queue its settle, unless the attempt was called off."""
        with self._cond:
            if attempt.status != "running":
                attempt.log.info(
                    "job %s (%s) handler ended after the attempt was %s; its outcome is not recorded",
                    attempt.job.id, attempt.job.name, attempt.status,
                )
                return
            attempt.status = "finishing"
            self._busy -= 1
            ran = time.monotonic() - attempt.started_at
            self._run_time = ran if self._run_time is None else self._run_time + (ran - self._run_time) / 8
            self._cond.notify_all()
        if not self._wake.is_set():  # once per job: Event.set takes a lock even when set
            self._wake.set()
        if raised is None:
            self._settles.put(_Settle(attempt, "ack", result=result))
            return
        job = attempt.job
        if isinstance(raised, SHUTDOWN_SIGNALS):
            attempt.log.warning("job %s (%s) raised %s: stopping the worker", job.id, job.name, type(raised).__name__)
            # The give-back is queued once the claim loop has ended (in _shutdown): landed
            # earlier, a claim already in flight could hand this worker the job again.
            with self._lock:
                self._given_back_at_stop.append((attempt, handler_error(raised)))
            self.request_stop()
            return
        attempt.log.warning(
            "job %s (%s) attempt %d failed: %s", job.id, job.name, job.attempt, type(raised).__name__,
            exc_info=(type(raised), raised, raised.__traceback__),
        )
        options = self._retry_options(attempt.handle, job, raised)
        self._queue_nack(attempt, handler_error(raised), options, queued=True)

    def _queue_nack(
        self, attempt: _Attempt, error: BaseException, options: dict[str, Any], *, queued: bool = False
    ) -> None:
        if not queued:
            with self._lock:
                attempt.status = "finishing"
                self._active[attempt.job.id] = attempt
        self._settles.put(_Settle(attempt, "nack", error=error, options=options))

    def _call_off(self, attempt: _Attempt, reason: str, *, timed_out: bool = False) -> None:
        attempt.ctx.cancel(reason, timed_out=timed_out)
        task, loop = attempt.task, self._loop
        if task is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)

    # -- the keeper: local deadlines and timeouts; the beater: renewals ---------------

    def _keeper(self) -> None:
        """Hold every attempt to its local deadline (F02) and its handler timeout.

        It never calls the store, so a store call that hangs cannot delay a call-off.
        """
        cap = min(1.0, self.heartbeat_interval, self._margin_s / 2)
        while not self._keeper_stop:
            with self._lock:
                attempts = list(self._active.values())
            now, local = time.monotonic(), self._timer()
            wait = cap
            for attempt in attempts:
                if self._killed:
                    return
                if attempt.status in ("queued", "starting", "running"):
                    left = self._deadline(attempt) - local
                    if left <= 0:
                        self._lose(
                            attempt, f"no renewal landed within lease - margin ({self._lease_s - self._margin_s:g}s)",
                            give_back=attempt.status == "queued",
                        )
                        continue
                    wait = min(wait, left)
                if attempt.status == "running" and attempt.deadline is not None:
                    if now >= attempt.deadline:
                        try:
                            self._time_out(attempt)
                        except Exception:
                            attempt.log.exception("timing out job %s failed", attempt.job.id)
                    else:
                        wait = min(wait, attempt.deadline - now)
            self._keeper_wake.wait(max(0.0, wait))
            self._keeper_wake.clear()

    def _beater(self) -> None:
        """Renew every lease this worker holds, each every ``heartbeat_interval`` (W01)."""
        while not self._keeper_stop:
            with self._lock:
                attempts = list(self._active.values())
            next_wake = time.monotonic() + min(1.0, self.heartbeat_interval)
            for attempt in attempts:
                if self._killed or self._keeper_stop:
                    return
                if attempt.status in ("queued", "starting", "running", "finishing", "timed_out", "settling"):
                    if time.monotonic() >= attempt.next_beat:
                        try:
                            self._beat(attempt)
                        except Exception:  # a bug here must not stop every other heartbeat
                            attempt.log.exception("heartbeat of job %s failed unexpectedly", attempt.job.id)
                            attempt.next_beat = time.monotonic() + self.heartbeat_interval
                    next_wake = min(next_wake, attempt.next_beat)
            self._beater_wake.wait(max(0.0, next_wake - time.monotonic()))
            self._beater_wake.clear()

    def _beat(self, attempt: _Attempt) -> None:
        driver = self.driver
        sent = self._timer()
        try:
            kept = driver.heartbeat(attempt.claimed.token, self.lease)
        except Exception:
            # The keeper calls the handler off if no renewal lands in time (F02); try again soon.
            self._log_failure("heartbeat", attempt.log)
            attempt.next_beat = time.monotonic() + min(self.heartbeat_interval, RETRY_CAP)
            return
        self._recovered("heartbeat")
        attempt.next_beat = time.monotonic() + self.heartbeat_interval
        if not kept:
            if attempt.status in ("finishing", "timed_out", "settling"):
                # Its settle is in flight and may have just landed (a settled token no
                # longer heartbeats); the settle's own answer says whether it was lost.
                return
            self._lose(attempt, "its lease was lost (reclaimed, cancelled or removed)")
            return
        attempt.renewed_at = max(attempt.renewed_at, sent)
        if attempt.slot_key is not None:
            try:
                if not driver.leases.renew(attempt.slot_key, attempt.slot_holder, self.lease):
                    # The slot lapsed (a long pause); take it again if room remains, else run on.
                    assert attempt.handle is not None
                    assert attempt.handle.concurrency is not None
                    driver.leases.acquire(attempt.slot_key, attempt.handle.concurrency, attempt.slot_holder, self.lease)
            except Exception:
                attempt.log.warning("could not renew concurrency slot %s", attempt.slot_key, exc_info=True)

    def _lose(self, attempt: _Attempt, reason: str, *, give_back: bool = False) -> None:
        """The lease is gone (or may be): call the handler off and record nothing of this
        attempt (W02, F02). ``give_back``: the attempt never started, and the store may
        still take it back at once, at no cost (F03); else it lapses."""
        with self._cond:
            if attempt.status not in ("queued", "starting", "running", "finishing", "timed_out"):
                return
            if attempt.status in ("starting", "running"):
                self._busy -= 1
                self._cond.notify_all()
            attempt.status = "finishing" if give_back else "lost"
            if not give_back:
                self._active.pop(attempt.job.id, None)
        if give_back:
            self._count("lost", 1)
            error = _error_type("StaleClaim")(f"not started: its lease ran out in worker {self.worker_id}")
            self._settles.put(_Settle(attempt, "nack", error=error, options={"counts_as_attempt": False}))
            self._release_slot(attempt)
            self._wake.set()
            return
        self._count("lost", 1)
        events.emit(
            "lease_lost", attempt.job, "job %s (%s) attempt %d called off: %s; its outcome will not be recorded",
            attempt.job.id, attempt.job.name, attempt.job.attempt, reason, level=logging.WARNING,
            outcome="called_off", duration_s=time.monotonic() - attempt.started_at, worker_id=self.worker_id,
        )
        self._call_off(attempt, reason)
        self._release_slot(attempt)
        self._wake.set()

    def _time_out(self, attempt: _Attempt) -> None:
        """The handler ran past its timeout: cancel it, then fail the attempt."""
        assert attempt.handle is not None
        assert attempt.handle.timeout is not None
        with self._cond:
            if attempt.status != "running":
                return
            attempt.status = "timed_out"
            self._busy -= 1
            self._cond.notify_all()
        self._count("timed_out", 1)
        job = attempt.job
        reason = f"the attempt ran longer than its timeout of {attempt.handle.timeout:g}s"
        self._call_off(attempt, reason, timed_out=True)
        error = JobTimeout(f"job {job.id} ({job.name}) attempt {job.attempt}: {reason}", "raise timeout or split it")
        attempt.log.warning("job %s (%s) timed out after %gs", job.id, job.name, attempt.handle.timeout)
        options = self._retry_options(attempt.handle, job, error)
        self._settles.put(_Settle(attempt, "nack", error=handler_error(error), options=options))
        self._wake.set()

    # -- the settler -----------------------------------------------------------------

    def _settler(self) -> None:
        retries: list[tuple[float, int, _Settle]] = []  # (due, tie-breaker, settle), a heap
        order = itertools.count()
        stop_at: float | None = None
        while True:
            timeout = None if not retries else max(0.0, retries[0][0] - time.monotonic())
            if stop_at is not None:
                timeout = max(0.0, min(timeout if timeout is not None else 0.0, stop_at - time.monotonic()))
            batch: list[_Settle] = []
            try:
                entry = self._settles.get(timeout=timeout)
                while True:
                    if isinstance(entry, _Stop):
                        stop_at = entry.at
                    else:
                        batch.append(entry)
                    if len(batch) >= SETTLE_BATCH:
                        break
                    entry = self._settles.get_nowait()
            except queue_mod.Empty:
                pass
            now = time.monotonic()
            while retries and retries[0][0] <= now and len(batch) < SETTLE_BATCH:
                batch.append(heapq.heappop(retries)[2])
            failed: list[_Settle] = []
            if batch:
                try:
                    failed = self._settle_batch(batch)
                except Exception:  # a bug here must not stop settling for good
                    self.log.exception("settling a batch of %d failed; their leases will lapse", len(batch))
            for item in failed:
                if not self._given_up(item, stop_at):
                    item.tries += 1
                    delay = min(RETRY_CAP, RETRY_FIRST * 2 ** (item.tries - 1)) * self._rng.uniform(0.8, 1.2)
                    heapq.heappush(retries, (time.monotonic() + delay, next(order), item))
            if stop_at is not None and (not retries or time.monotonic() >= stop_at) and self._settles.empty():
                for _, _, item in retries:
                    self._given_up(item, stop_at, force=True)
                return

    def _given_up(self, item: _Settle, stop_at: float | None, *, force: bool = False) -> bool:
        """Whether to stop retrying a settle (F05): the worker was killed or is past its
        drain, or the lease has surely lapsed (lease - margin passed a lease ago with no
        renewal landing). The job then runs again after its lease lapses."""
        attempt = item.attempt
        late = self._timer() > self._deadline(attempt) + self._lease_s
        if not (force or self._killed or late or (stop_at is not None and time.monotonic() >= stop_at)):
            return False
        self._count("settle_abandoned", 1)
        attempt.log.error(
            "gave up settling job %s (%s) after %d tries; its lease will lapse and it will run again",
            attempt.job.id, attempt.job.name, item.tries + 1,
        )
        self._forget(attempt)
        return True

    def _settle_batch(self, batch: list[_Settle]) -> list[_Settle]:
        """Settle what the batch holds; answers the settles to try again (the store did not answer)."""
        acks: list[_Settle] = []
        nacks: list[_Settle] = []
        with self._lock:
            # "settling": a heartbeat answering False no longer calls the attempt off (a landed
            # ack makes the next heartbeat answer False); the settle's answer decides.
            live = [i for i in batch if i.attempt.status in ("finishing", "timed_out", "settling")]
            for item in live:
                item.attempt.status = "settling"
        for item in live:
            if item.kind == "ack":
                if item.result is None or item.tries:  # None is always storable; a retry was checked
                    acks.append(item)
                    continue
                try:
                    v.encode_json(item.result, "result")
                except PayloadInvalid as exc:  # W07: an unstorable result fails the attempt readably
                    item.attempt.log.warning("job %s returned a result that cannot be stored", item.attempt.job.id)
                    options = self._retry_options(item.attempt.handle, item.attempt.job, exc)
                    nacks.append(_Settle(item.attempt, "nack", error=handler_error(exc), options=options))
                    continue
                acks.append(item)
            else:
                nacks.append(item)
        retry: list[_Settle] = []
        if acks:
            pairs = [(i.attempt.claimed.token, i.result) for i in acks]
            try:
                answers: list[Job | None]
                if self._lean_acks is None:
                    self._lean_acks = _takes_landed_only(self.driver)
                if self.on_settled is None and self._lean_acks:
                    # Nothing here needs the settled jobs back: the completion event and
                    # metrics take the claimed job. Reading them back was most of the batch.
                    landed = cast(LandedAcks, self.driver).ack_many(pairs, landed_only=True)
                    answers = [None] * len(acks)
                else:
                    answers = self.driver.ack_many(pairs)
                    landed = [a is not None for a in answers]
            except Exception as exc:
                retry += self._settle_failed(acks, exc, "done")
            else:
                self._recovered("settle")
                for item, answer, ok in zip(acks, answers, landed, strict=True):
                    retry += self._answered(item, ok, answer)
        for item in nacks:
            try:
                answer = self.driver.nack(item.attempt.claimed.token, item.error or "failed", **item.options)
            except Exception as exc:
                retry += self._settle_failed([item], exc, "with its failure")
            else:
                self._recovered("settle")
                retry += self._answered(item, answer is not None, answer)
        return retry

    def _settle_failed(self, items: list[_Settle], exc: Exception, what: str) -> list[_Settle]:
        """A settle call raised: the settles to retry (F05), or none when the store refused them."""
        self._count("settle_errors", len(items))
        if not _transient(exc):
            for item in items:
                item.attempt.log.error(
                    "could not settle job %s (%s) %s: %s; its lease will lapse and it will run again",
                    item.attempt.job.id, item.attempt.job.name, what, exc,
                )
                self._forget(item.attempt)
            return []
        if self._failing.get("settle") is None:  # the first failure of a run: each job, once
            for item in items:
                if not item.tries:
                    item.attempt.log.warning(
                        "could not settle job %s (%s) %s: %s; retrying", item.attempt.job.id, item.attempt.job.name,
                        what, exc,
                    )
        self._log_failure("settle")
        return items

    def _answered(self, item: _Settle, landed: bool, answer: Job | None) -> list[_Settle]:
        """A settle answered: report it. After a try the store did not answer, "did not
        land" may mean "landed before": the job says which (F05). Answers it to retry
        when even that read fails."""
        if not landed and item.tries:
            try:
                found = self.driver.introspect.get(item.attempt.job.id)
            except Exception:
                return [item]
            if item.landed_earlier(found):
                landed, answer = True, found
        self._landed(item, landed, answer)
        return []

    def _retry_options(self, handle: JobHandle | None, job: Job, raised: BaseException) -> dict[str, Any]:
        """``nack`` options for a failed attempt, its retry time on the store's clock (F01).

        When the store's time cannot be had, the retry is due at once (the store's now)."""
        now = self._store_now()
        if now is None:
            options = retry_policy(handle, job, raised, datetime.now(timezone.utc), self._rng)
            options.pop("retry_at", None)
            return options
        return retry_policy(handle, job, raised, now, self._rng)

    def _forget(self, attempt: _Attempt) -> None:
        with self._lock:  # nobody waits on _active alone: room and drain count slots (_busy)
            if self._active.get(attempt.job.id) is attempt:
                del self._active[attempt.job.id]
        if attempt.slot_key is not None:
            self._release_slot(attempt)

    def _release_slot(self, attempt: _Attempt) -> None:
        if attempt.slot_key is None:
            return
        key, attempt.slot_key = attempt.slot_key, None
        try:
            self.driver.leases.release(key, attempt.slot_holder)
        except Exception:
            attempt.log.warning("could not release concurrency slot %s; it lapses by itself", key, exc_info=True)
        self._wake.set()

    def _landed(self, item: _Settle, landed: bool, answer: Job | None) -> None:
        """Log, count and report one settle; ``answer`` is the settled job, or None when
        it did not land or an ack was sent ``landed_only`` (nothing needed it)."""
        attempt = item.attempt
        self._forget(attempt)
        job = attempt.job
        if not landed:
            self._count("not_landed", 1)
            events.emit(
                "lease_lost", job,
                "settle of job %s (%s) did not land: its lease was lost (reclaimed, cancelled or removed)",
                job.id, job.name, level=logging.WARNING, outcome="not_landed",
                duration_s=time.monotonic() - attempt.started_at, worker_id=self.worker_id,
            )
            return
        fields: dict[str, Any] = {
            "error_type": type(item.error).__name__ if item.kind == "nack" and item.error is not None else None,
            "duration_s": time.monotonic() - attempt.started_at, "worker_id": self.worker_id,
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
                self._count("retried", 1)
                # An attempt given back (not counted) is "released"; a failed one is a "retry".
                given_back = item.options.get("counts_as_attempt") is False
                events.emit(
                    "settled", job, "job %s (%s) will retry at %s (attempt %d of %d failed)", job.id, job.name,
                    answer.run_at.isoformat(), answer.attempt, answer.max_attempts,
                    outcome="released" if given_back else "retry", **fields,
                )
            else:
                events.emit(
                    "settled", job, "job %s (%s) settled %s", job.id, job.name, JobState(answer.state).value,
                    outcome=JobState(answer.state).value, **fields,
                )
        if outcome is not None:
            self._count(outcome)
            level = logging.INFO if outcome == "completed" else logging.ERROR
            events.emit(
                "settled", job, "job %s (%s) %s", job.id, job.name, outcome.replace("_", " "), level=level,
                outcome=outcome, **fields,
            )
            if answer is not None:  # None: acked landed_only, as no on_settled was set
                self._fire(answer, outcome)

    def _fire(self, job: Job, outcome: str) -> None:
        """Call ``on_settled`` for one landed ending; its errors are logged, retried, contained (W06)."""
        if self.on_settled is None:
            return
        for attempt_no in range(1, ON_SETTLED_TRIES + 1):
            try:
                self.on_settled(job, outcome)
                return
            except Exception:
                job_logger(logger, job).exception(
                    "on_settled(%s) raised for job %s (try %d of %d)", outcome, job.id, attempt_no, ON_SETTLED_TRIES
                )

    # -- shutdown --------------------------------------------------------------------

    def _give_back(self) -> None:
        """Prefetched jobs that never started go back to the queue at once, no attempt spent (W04).

        So do the attempts a shutdown signal ended (W07), with that signal as their error.
        """
        with self._lock:
            signalled, self._given_back_at_stop = self._given_back_at_stop, []
        for attempt, error in signalled:
            self._queue_nack(attempt, error, {"counts_as_attempt": False}, queued=True)
        with self._lock:
            waiting = [a for a in self._backlog if a.status == "queued"]
            self._backlog.clear()
            for attempt in waiting:
                attempt.status = "finishing"
        for attempt in waiting:
            error = _error_type("WorkerStopping")("given back unstarted: the worker stopped")
            self._settles.put(_Settle(attempt, "nack", error=error, options={"counts_as_attempt": False}))

    def _shutdown(self) -> None:
        began = time.monotonic()
        timeout = self.drain_timeout if self._drain_override is None else self._drain_override
        self._give_back()
        with self._cond:
            while self._busy > 0 and not self._killed:
                # A later request_stop(drain_timeout=...) (a second SIGTERM) moves the end of
                # a drain already under way: it counts from when the drain began.
                if self._drain_override is not None:
                    timeout = self._drain_override
                remaining = began + timeout - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            abandoned = [a for a in self._active.values() if a.status in ("starting", "running")]
            for attempt in abandoned:
                attempt.status = "abandoned"
                self._busy -= 1
                self._active.pop(attempt.job.id, None)
        for attempt in abandoned:
            self._count("abandoned", 1)
            attempt.log.warning(
                "job %s (%s) abandoned after the %gs drain timeout; its lease will lapse for reclaim",
                attempt.job.id, attempt.job.name, timeout,
            )
            self._call_off(attempt, "the worker is shutting down")
        deadline = began + timeout
        self._drained = not abandoned and not self._killed
        with self._lock:
            self._runners_closed = True
            idle, self._idle_runners = self._idle_runners, 0
        for _ in range(idle):
            self._runq.put(None)
        if self._pruner is not None:
            self._pruner.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        self._marks.put(_Stop(0.0))  # recorded before their settles: a settle starts a held job anyway
        self._settles.put(_Stop(max(deadline, time.monotonic()) + 1.0))
        for thread in self._threads:
            if thread.name.startswith("jobcore-settler"):
                thread.join(10.0)
        self._keeper_stop = True
        self._keeper_wake.set()
        self._beater_wake.set()
        for thread in self._threads:
            thread.join(5.0)
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                self._subscription.close()
        loop, loop_thread = self._loop, self._loop_thread
        if loop is not None and loop_thread is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            loop_thread.join(5.0)
        self.log.info(
            "worker %s stopped (%s)", self.worker_id,
            "drained" if self._drained else f"{len(abandoned)} abandoned" if not self._killed else "killed",
        )
        self._done.set()


"""Declaring jobs: ``@job`` registers a handler and answers a handle that enqueues it.

A handler is a plain ``def`` or an ``async def`` taking the job's payload. When it also
declares a parameter named ``ctx``, it receives a :class:`JobContext` (the job, a
cancellation signal, progress reporting). The options given to ``@job`` (queue,
attempts, backoff, dead-lettering, terminal exception types, timeout, fleet-wide
concurrency) are what :class:`~jobcore.worker.Worker` applies when it runs the job.

Handlers land in a :class:`Registry`; the module-level :data:`default_registry` is
where ``@job`` puts them unless told otherwise, and what a worker reads by default.
A registry also holds the periodic schedules declared for its jobs (``@job(schedule=...)``
or :meth:`Registry.schedule`); a scheduler declares them to the store when it starts.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

import attrs

from jobcore import validate as v
from jobcore.backoff import DEFAULT_BACKOFF, Backoff
from jobcore.current import get_async_job_driver, get_job_driver
from jobcore.driver import AsyncJobDriver, Duration, JobDriver
from jobcore.errors import JobNotRegistered, JobTimeout, LeaseLost, OptionInvalid, ScheduleInvalid
from jobcore.payloads import check_model, dump_payload, load_payload
from jobcore.rates import RateLimit
from jobcore.records import ClaimToken, Job, JobSpec
from jobcore.schedules import Cron, Every, ScheduleDefinition

__all__ = ["JobContext", "JobHandle", "Registry", "default_registry", "job"]

F = TypeVar("F", bound=Callable[..., Any])

_log = logging.getLogger("jobcore.job")


_EVENT_MADE = threading.Lock()
"""Makes each context's ``cancelled`` event exactly once when threads race for it."""


class JobContext:
    """What a handler that declares a ``ctx`` parameter receives.

    Attributes:
        job: The job as claimed (``running``; ``attempt`` counts this attempt).
        token: The claim token of this attempt.
        claim_no: This attempt's fencing token: the job's claim counter, which every
            later claim moves. Fence writes to other systems with it (keep the highest
            seen per job and refuse a lower one): a handler that lost its lease, even one
            paused past it, then cannot overwrite the next holder's work.
        cancelled: A ``threading.Event`` set when the attempt is called off: its lease
            was lost (reclaimed, cancelled, not renewed in time), it timed out, or
            the worker abandoned it while shutting down. Nothing the handler does
            afterwards is recorded.
        log: A logger adapter stamping the job's id and name on every record.
    """

    def __init__(self, job: Job, token: ClaimToken | None = None, *, log: logging.LoggerAdapter[Any] | None = None):
        self.job = job
        self.token = token
        self._cancelled: threading.Event | None = None  # made on first use: most handlers never look
        self.reason: str | None = None
        self.progress_value: float | None = None
        self.progress_message: str | None = None
        self.progress_seq = 0
        """How many times :meth:`progress` was called: the worker stores the latest report
        when this moved since its last write (throttled, rules G)."""
        self._timed_out = False
        self.log = log if log is not None else job_logger(_log, job)
        self.lease_left: Callable[[], float] | None = None
        """Seconds left before the worker's local deadline for this attempt (set by the worker)."""

    @property
    def claim_no(self) -> int:
        """This attempt's fencing token (see the class attributes)."""
        return self.token.claim_no if self.token is not None else self.job.claim_no

    def time_left(self) -> float | None:
        """Seconds until this attempt's local deadline (F02), or None outside a worker.

        At zero the attempt is called off: another worker may take the job a margin later.
        """
        return None if self.lease_left is None else max(0.0, self.lease_left())

    @property
    def cancelled(self) -> threading.Event:
        """Set when the attempt is called off (see the class attributes)."""
        event = self._cancelled
        if event is None:
            with _EVENT_MADE:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    @property
    def attempt(self) -> int:
        """This attempt's number (1 for the first)."""
        return self.job.attempt

    def cancel(self, reason: str, *, timed_out: bool = False) -> None:
        """Set the cancellation signal (called by the runtime)."""
        if not self.cancelled.is_set():
            self.reason = reason
            self._timed_out = timed_out
            self.cancelled.set()

    def check(self) -> None:
        """Raise when the attempt was called off: :class:`JobTimeout` or :class:`LeaseLost`.

        Long handlers call this between steps so they stop promptly.
        """
        if self.lease_left is not None and self.lease_left() <= 0:
            # The local deadline passed (F02): no need to wait for the keeper to notice.
            self.cancel("no renewal landed in time: the lease may be lost")
        if self._cancelled is not None and self._cancelled.is_set():
            if self._timed_out:
                raise JobTimeout(f"job {self.job.id} ({self.job.name}) ran past its timeout", self.reason)
            raise LeaseLost(
                f"job {self.job.id} ({self.job.name}) was called off: {self.reason}",
                "stop working on it; another attempt owns the job now",
            )

    def progress(self, value: float | None = None, message: str | None = None) -> None:
        """Report progress: a fraction 0..1 and/or a short message (at most 500 characters).

        ``None`` keeps the previous value (or message). Costs no store call here: a worker
        stores the latest report on the job at most once per ``progress_interval`` (default
        1 s) and once more before the attempt settles when it changed since (rules G), so
        a handler may call this as often as it likes. A value that is not a finite number
        from 0 to 1, or a message that is not text within the limit, is refused
        (``JC_OPTION_INVALID``) and nothing changes. Logged at DEBUG with the job's id.
        """
        fraction, text = v.check_progress(value, message)
        if fraction is not None:
            self.progress_value = fraction
        if text is not None:
            self.progress_message = text
        self.progress_seq += 1  # after the values: a writer reading this first never misses them
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "progress %s %s", "" if fraction is None else f"{fraction:.0%}", text or "",
                extra={"progress": self.progress_value},
            )


def job_logger(logger: logging.Logger, job: Job | None) -> logging.LoggerAdapter[Any]:
    """A logger adapter putting ``job_id`` and ``job_name`` on every record."""
    return _JobLogAdapter(logger, job)


class _JobLogAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Merges the job's fields into each call's own ``extra`` (the stdlib one replaces it).

    Made once per claimed job and rarely used: the fields are built when a record is."""

    def __init__(self, logger: logging.Logger, job: Job | None) -> None:
        self.logger = logger
        self._job = job

    @property
    def extra(self) -> dict[str, Any]:  # type: ignore[override]
        job = self._job
        return {"job_id": job.id if job else "-", "job_name": job.name if job else "-"}

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**self.extra, **kwargs.get("extra", {})}
        return msg, kwargs


def _check_exc_types(value: object) -> tuple[type[BaseException], ...]:
    items = (value,) if isinstance(value, type) else tuple(value)  # type: ignore[arg-type]
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise OptionInvalid(f"terminal must hold exception types, got {item!r}", "terminal=(ValueError,)")
    return items


def _optional_seconds(value: object, name: str) -> float | None:
    if value is None:
        return None
    return v.check_seconds(value, name)


@attrs.frozen(kw_only=True, eq=False)
class JobHandle:
    """A registered handler and its options; ``@job`` answers one.

    Calling the handle calls the handler directly (handy in unit tests). ``.enqueue``
    stores a job for a worker to run.

    Attributes:
        name: The job name stored with each job and used to find this handler.
        fn: The handler.
        queue: Default queue for ``enqueue``.
        max_attempts: Attempts before dead-lettering (``None``: the driver's default, 20).
        backoff: Delay before each retry.
        dead_letter: ``True``: an exhausted job ends ``dead`` (the dead-letter queue);
            ``False``: it is dropped (``failed``).
        terminal: Exception types that fail the job at once, whatever attempts remain.
        timeout: Seconds an attempt may run before it is cancelled and failed.
        concurrency: Most attempts of this job running at once across the fleet.
        concurrency_key: ``fn(payload) -> str``: apply ``concurrency`` per key instead.
        priority: Default priority for ``enqueue``.
        wants_ctx: The handler declares a ``ctx`` parameter.
        is_async: The handler is a coroutine function.
        rate_limit: At most so many starts per window, fleet-wide (:class:`~jobcore.rates.RateLimit`).
        payload_model: The payload's model class (``@job(payload=Order)``), or ``None``:
            payloads are checked against it at enqueue and handed to the handler as it
            (:mod:`jobcore.payloads`).
    """

    name: str
    fn: Callable[..., Any]
    queue: str = "default"
    max_attempts: int | None = None
    backoff: Backoff = DEFAULT_BACKOFF
    dead_letter: bool = True
    terminal: tuple[type[BaseException], ...] = ()
    timeout: float | None = None
    concurrency: int | None = None
    concurrency_key: Callable[[Any], str] | None = None
    priority: int = 0
    wants_ctx: bool = False
    is_async: bool = False
    payload_model: type | None = None
    rate_limit: RateLimit | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def enqueue(
        self,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        key: str | None = None,
        driver: JobDriver | None = None,
        depends_on: Iterable[str | Job] | None = None,
        on_parent_failure: str = "cancel",
    ) -> Job:
        """Store one job of this kind (on ``driver`` or the process-wide one) and answer it.

        ``depends_on``/``on_parent_failure``: it waits for other jobs (rules D, docs/howto/dependencies.md)."""
        target = driver if driver is not None else get_job_driver()
        options = self._options(
            queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts, key=key,
            depends_on=depends_on, on_parent_failure=on_parent_failure,
        )
        return target.enqueue(self.name, self.stored_payload(payload), **options)

    async def enqueue_async(
        self,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        key: str | None = None,
        driver: AsyncJobDriver | None = None,
        depends_on: Iterable[str | Job] | None = None,
        on_parent_failure: str = "cancel",
    ) -> Job:
        """:meth:`enqueue` on an async driver (``driver`` or the process-wide async one)."""
        target = driver if driver is not None else get_async_job_driver()
        options = self._options(
            queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts, key=key,
            depends_on=depends_on, on_parent_failure=on_parent_failure,
        )
        return await target.enqueue(self.name, self.stored_payload(payload), **options)

    def spec(
        self,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        key: str | None = None,
        depends_on: Any = (),
        on_parent_failure: str = "cancel",
    ) -> JobSpec:
        """A :class:`JobSpec` of this kind for ``driver.enqueue_many`` (with this kind's defaults),
        e.g. a group whose last spec depends on the others by position (rules D)."""
        options = self._options(
            queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts, key=key
        )
        wait = options.pop("delay")
        return JobSpec(
            name=self.name, payload=self.stored_payload(payload),
            delay=wait.total_seconds() if isinstance(wait, timedelta) else wait,
            depends_on=depends_on, on_parent_failure=on_parent_failure, **options,
        )

    def enqueue_many(
        self,
        payloads: Iterable[Any],
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        driver: JobDriver | None = None,
    ) -> list[Job]:
        """Store one job per payload in one round trip; answers them in input order."""
        target = driver if driver is not None else get_job_driver()
        return target.enqueue_many(self._specs(
            payloads, queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts
        ))

    async def enqueue_many_async(
        self,
        payloads: Iterable[Any],
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        driver: AsyncJobDriver | None = None,
    ) -> list[Job]:
        """:meth:`enqueue_many` on an async driver (``driver`` or the process-wide async one)."""
        target = driver if driver is not None else get_async_job_driver()
        return await target.enqueue_many(self._specs(
            payloads, queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts
        ))

    def stored_payload(self, payload: Any) -> Any:
        """``payload`` as stored: checked against :attr:`payload_model` and in its JSON form,
        or as given when the job declares no model (``JC_PAYLOAD_INVALID`` before any write)."""
        return payload if self.payload_model is None else dump_payload(self.payload_model, payload)

    def handler_payload(self, stored: Any) -> Any:
        """What the handler receives for a stored payload: the model built from it, when declared."""
        return stored if self.payload_model is None else load_payload(self.payload_model, stored)

    def _options(
        self, *, queue: str | None, priority: int | None, run_at: datetime | None, delay: Duration | None,
        max_attempts: int | None, key: str | None = None, depends_on: Any = None, on_parent_failure: str = "cancel",
    ) -> dict[str, Any]:
        """The enqueue options with this kind's defaults filled in; the dependency options
        (rules D) only when given, so a driver without them is called as before."""
        options: dict[str, Any] = {
            "queue": queue or self.queue, "priority": self.priority if priority is None else priority,
            "run_at": run_at, "delay": delay,
            "max_attempts": self.max_attempts if max_attempts is None else max_attempts, "key": key,
        }
        if depends_on is not None or on_parent_failure != "cancel":
            options.update(depends_on=depends_on, on_parent_failure=on_parent_failure)
        return options

    def _specs(
        self, payloads: Iterable[Any], *, queue: str | None, priority: int | None, run_at: datetime | None,
        delay: Duration | None, max_attempts: int | None,
    ) -> list[JobSpec]:
        """One spec per payload, with this kind's defaults filled in. ``payloads`` is a list or
        other iterable of payloads; a string, bytes, a mapping or a non-iterable is refused (a
        string used to become one job per character, a dict one per key)."""
        if isinstance(payloads, str | bytes | bytearray | Mapping) or not isinstance(payloads, Iterable):
            raise OptionInvalid(
                f"enqueue_many takes an iterable of payloads, got {type(payloads).__name__} {payloads!r:.40}",
                "pass a list, one payload per job: enqueue_many([p1, p2]); for one job, enqueue(payload)",
            )
        delay_value = delay.total_seconds() if isinstance(delay, timedelta) else delay
        name, stored, make = self.name, self.stored_payload, JobSpec.positional  # type: ignore[attr-defined]
        chosen = queue or self.queue
        rank = self.priority if priority is None else priority
        attempts = self.max_attempts if max_attempts is None else max_attempts
        # Positionally, in JobSpec's field order: a spec per payload of a batch of thousands.
        return [
            make(name, stored(payload), chosen, rank, run_at, delay_value, attempts, None, (), "cancel")
            for payload in payloads
        ]

    def concurrency_slot(self, payload: Any) -> str | None:
        """The fleet lease key limiting this job's concurrency, or ``None`` when unlimited."""
        if self.concurrency is None:
            return None
        if self.concurrency_key is None:
            return f"jobcore:job:{self.name}"
        return f"jobcore:job:{self.name}:{self.concurrency_key(payload)}"


class Registry:
    """Job names to handles. Workers look handlers up here by the claimed job's name."""

    def __init__(self) -> None:
        self._handles: dict[str, JobHandle] = {}
        self._schedules: dict[str, ScheduleDefinition] = {}
        self._lock = threading.Lock()

    def __contains__(self, name: object) -> bool:
        return name in self._handles

    def __iter__(self) -> Iterator[JobHandle]:
        return iter(list(self._handles.values()))

    def __len__(self) -> int:
        return len(self._handles)

    def get(self, name: str) -> JobHandle:
        """The handle registered as ``name``, or ``JC_JOB_NOT_REGISTERED``."""
        handle = self._handles.get(name)
        if handle is None:
            raise JobNotRegistered(
                f"no handler is registered for job {name!r}",
                "import the module declaring it with @job before starting the worker",
            )
        return handle

    def add(self, handle: JobHandle) -> JobHandle:
        """Register ``handle``; a name already taken by another function is refused."""
        with self._lock:
            existing = self._handles.get(handle.name)
            if existing is not None and existing.fn is not handle.fn and _origin(existing.fn) != _origin(handle.fn):
                raise OptionInvalid(
                    f"job name {handle.name!r} is already registered to {_origin(existing.fn)}",
                    "give one of them another name with @job(name=...)",
                )
            self._handles[handle.name] = handle
        return handle

    def remove(self, name: str) -> None:
        """Forget ``name`` and the schedules declared for it (tests re-registering handlers use this)."""
        with self._lock:
            self._handles.pop(name, None)
            for key in [k for k, d in self._schedules.items() if d.job == name]:
                del self._schedules[key]

    def schedule(
        self,
        job: JobHandle | str,
        trigger: Cron | Every,
        *,
        payload: Any = None,
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> ScheduleDefinition:
        """Declare a periodic schedule enqueuing ``job`` with ``payload`` at each occurrence of ``trigger``.

        ``registry.schedule(send_report, cron("0 7 * * 1-5", tz="Europe/Warsaw"), payload={"kind": "daily"},
        name="daily-report")``. The schedule is named ``name`` (default the job's name);
        queue, priority and attempts default to the job's. Declaring the same name again
        for the same job replaces it; for another job it is refused. Schedulers declare
        the registry's schedules to the store when they start. Refused with
        ``JC_SCHEDULE_INVALID`` (bad trigger, name) or ``JC_PAYLOAD_INVALID``.
        """
        handle = job if isinstance(job, JobHandle) else self._handles.get(job) if isinstance(job, str) else None
        job_name = handle.name if handle is not None else job
        if not isinstance(job_name, str):
            raise ScheduleInvalid(f"schedule wants a job handle or name, got {job!r:.60}", "pass the @job function")
        if handle is not None:
            payload = handle.stored_payload(payload)  # a declared model checks it now, not at each firing
        definition = ScheduleDefinition(
            name=job_name if name is None else name, trigger=trigger, job=job_name, payload=payload,
            queue=queue if queue is not None else handle.queue if handle is not None else "default",
            priority=priority if priority is not None else handle.priority if handle is not None else 0,
            max_attempts=handle.max_attempts if handle is not None else None,
        )
        with self._lock:
            existing = self._schedules.get(definition.name)
            if existing is not None and existing.job != definition.job:
                raise ScheduleInvalid(
                    f"schedule name {definition.name!r} is already declared for job {existing.job!r}",
                    "give this schedule another name with name=...",
                )
            self._schedules[definition.name] = definition
        return definition

    def schedules(self) -> list[ScheduleDefinition]:
        """Every schedule declared in this registry, by name."""
        with self._lock:
            return [self._schedules[key] for key in sorted(self._schedules)]

    def drop_exhausted(self) -> frozenset[str]:
        """Names of jobs declared ``dead_letter=False`` (a worker passes them to ``claim``)."""
        return frozenset(h.name for h in self._handles.values() if not h.dead_letter)

    def queues(self) -> frozenset[str]:
        """Every queue a registered job enqueues to by default."""
        return frozenset(h.queue for h in self._handles.values())

    @overload
    def job(self, fn: F, /) -> JobHandle: ...

    @overload
    def job(self, fn: None = None, /, **options: Any) -> Callable[[Callable[..., Any]], JobHandle]: ...

    def job(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """``@registry.job`` / ``@registry.job(...)``: like :func:`job`, into this registry."""
        decorate = job(registry=self, **options)
        return decorate(fn) if fn is not None else decorate


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


default_registry = Registry()
"""Where ``@job`` registers handlers unless given ``registry=``."""


def _make_handle(
    fn: Callable[..., Any],
    *,
    name: str | None,
    queue: str,
    max_attempts: int | None,
    backoff: Backoff | None,
    dead_letter: bool,
    terminal: Iterable[type[BaseException]] | type[BaseException],
    timeout: Duration | None,
    concurrency: int | None,
    concurrency_key: Callable[[Any], str] | None,
    priority: int,
    payload: type | None = None,
    rate_limit: RateLimit | None = None,
) -> JobHandle:
    if not callable(fn):
        raise OptionInvalid(f"@job decorates a function, got {fn!r}", "put @job above a def or async def")
    job_name = v.check_name(name if name is not None else _origin(fn), "name")
    if max_attempts is not None:
        max_attempts = v.check_int(max_attempts, "max_attempts", 1, v.MAX_ATTEMPTS)
    if concurrency is not None:
        concurrency = v.check_int(concurrency, "concurrency", 1, 1_000_000)
    if concurrency_key is not None and not callable(concurrency_key):
        raise OptionInvalid("concurrency_key must be a function of the payload", "concurrency_key=lambda p: p['user']")
    if backoff is not None and not isinstance(backoff, Backoff):
        raise OptionInvalid(f"backoff must be a Backoff, got {backoff!r}", "backoff=Backoff(base=1, cap=60)")
    if not isinstance(dead_letter, bool):
        raise OptionInvalid(
            f"dead_letter must be a bool, got {dead_letter!r}", "dead_letter=False drops exhausted jobs"
        )
    params = inspect.signature(fn).parameters
    return JobHandle(
        name=job_name, fn=fn, queue=v.check_name(queue, "queue"), max_attempts=max_attempts,
        backoff=backoff if backoff is not None else DEFAULT_BACKOFF, dead_letter=dead_letter,
        terminal=_check_exc_types(terminal), timeout=_optional_seconds(timeout, "timeout"),
        concurrency=concurrency, concurrency_key=concurrency_key,
        priority=v.check_int(priority, "priority", v.PRIORITY_MIN, v.PRIORITY_MAX),
        wants_ctx="ctx" in params, is_async=inspect.iscoroutinefunction(fn),
        payload_model=None if payload is None else check_model(payload),
        rate_limit=_check_rate_limit(rate_limit),
    )


def _check_rate_limit(value: object) -> RateLimit | None:
    if value is None or isinstance(value, RateLimit):
        return value
    raise OptionInvalid(
        f"rate_limit must be a RateLimit, got {value!r:.60}", "rate_limit=RateLimit(10, per=timedelta(seconds=1))"
    )


@overload
def job(fn: Callable[..., Any], /) -> JobHandle: ...


@overload
def job(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    queue: str = "default",
    max_attempts: int | None = None,
    backoff: Backoff | None = None,
    dead_letter: bool = True,
    terminal: Iterable[type[BaseException]] | type[BaseException] = (),
    timeout: Duration | None = None,
    concurrency: int | None = None,
    concurrency_key: Callable[[Any], str] | None = None,
    priority: int = 0,
    schedule: Cron | Every | Sequence[Cron | Every] | None = None,
    registry: Registry | None = None,
    payload: type | None = None,
    rate_limit: RateLimit | None = None,
) -> Callable[[Callable[..., Any]], JobHandle]: ...


def job(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = "default",
    max_attempts: int | None = None,
    backoff: Backoff | None = None,
    dead_letter: bool = True,
    terminal: Iterable[type[BaseException]] | type[BaseException] = (),
    timeout: Duration | None = None,
    concurrency: int | None = None,
    concurrency_key: Callable[[Any], str] | None = None,
    priority: int = 0,
    schedule: Cron | Every | Sequence[Cron | Every] | None = None,
    registry: Registry | None = None,
    payload: type | None = None,
    rate_limit: RateLimit | None = None,
) -> Any:
    """Declare a job handler; use as ``@job`` or ``@job(queue=..., ...)``.

    Args:
        name: Stored job name (default ``module.qualname`` of the function).
        queue: Queue its jobs go to by default.
        max_attempts: Attempts before the job is dead-lettered (or dropped).
        backoff: Delay before each retry (:class:`~jobcore.backoff.Backoff`).
        dead_letter: ``False`` drops an exhausted job (``failed``) instead of ``dead``.
        terminal: Exception types that fail the job at once, no retry.
        timeout: Seconds (or timedelta) one attempt may run; then it is cancelled and
            fails that attempt (retried like any failure unless terminal lists ``JobTimeout``).
        concurrency: Fleet-wide limit of attempts running at once (through ``driver.leases``).
        concurrency_key: ``fn(payload) -> str``: apply the limit per key.
        priority: Default priority of its jobs.
        schedule: ``cron(...)`` or ``every(...)`` (or several): enqueue the job with a
            ``None`` payload at each occurrence; the first schedule is named after the
            job, further ones ``NAME#2``, ``NAME#3``... (see :meth:`Registry.schedule`
            for payloads and names of your own).
        registry: Where to register (default :data:`default_registry`).
        payload: The payload's model: a dataclass, an attrs class or a pydantic model
            class. ``enqueue`` checks payloads against it (``JC_PAYLOAD_INVALID``, nothing
            written) and the handler receives the model (:mod:`jobcore.payloads`).
        rate_limit: At most so many starts per window across the fleet, held by the store
            (:class:`~jobcore.rates.RateLimit`); combines with ``concurrency``.
    """
    target = registry if registry is not None else default_registry
    triggers: list[Any] = [] if schedule is None else list(schedule) if isinstance(schedule, Sequence) else [schedule]
    for trigger in triggers:
        if not isinstance(trigger, Cron | Every):
            raise ScheduleInvalid(
                f"schedule= takes cron(...) or every(...), got {trigger!r:.60}",
                'pass schedule=cron("*/5 * * * *") or schedule=every(timedelta(minutes=5))',
            )

    def decorate(func: Callable[..., Any]) -> JobHandle:
        handle = _make_handle(
            func, name=name, queue=queue, max_attempts=max_attempts, backoff=backoff, dead_letter=dead_letter,
            terminal=terminal, timeout=timeout, concurrency=concurrency, concurrency_key=concurrency_key,
            priority=priority, payload=payload, rate_limit=rate_limit,
        )
        # Checked before registering anything, so a refused schedule leaves no half-declared job.
        for i, trigger in enumerate(triggers):
            ScheduleDefinition(name=_schedule_name(handle.name, i), trigger=trigger, job=handle.name)
        if triggers:
            handle.stored_payload(None)  # schedule= fires with a None payload: the model must take it
        target.add(handle)
        for i, trigger in enumerate(triggers):
            target.schedule(handle, trigger, name=_schedule_name(handle.name, i))
        return handle

    return decorate(fn) if fn is not None else decorate


def _schedule_name(job_name: str, index: int) -> str:
    return job_name if index == 0 else f"{job_name}#{index + 1}"

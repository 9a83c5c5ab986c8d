"""The immutable records every driver answers with: jobs, claim tokens, pages, stats.

Records are frozen ``attrs`` classes; change one with ``attrs.evolve``. Each is built one
way, by its constructor (keyword arguments), drivers and users alike, with the same checks
everywhere: its ``__init__`` is generated from the class's fields by :func:`_record`, and
so is ``Record.positional``, the same code taking the fields positionally for drivers'
hot paths; no driver has a constructor of its own. Mapping a row or document to a record
is each driver's business and lives in the driver. Times on records are timezone-aware
UTC ``datetime`` values truncated to the millisecond (the precision every backend
keeps), and a naive datetime is refused at construction.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, TypeVar

import attrs

from jobcore.errors import OptionInvalid

__all__ = [
    "FINISHED_STATES",
    "LIVE_STATES",
    "BulkResult",
    "ClaimResult",
    "ClaimToken",
    "Claimed",
    "FinishedCount",
    "Job",
    "JobError",
    "JobFilter",
    "JobSpec",
    "JobState",
    "LeaseSlot",
    "Migration",
    "Page",
    "Progress",
    "PruneResult",
    "RescueResult",
    "RetentionPolicy",
    "Schedule",
    "ScheduleOutcome",
    "Stats",
]


class JobState(str, enum.Enum):
    """Where a job is in its life. Wherever a state is an argument, its plain string works too."""

    SCHEDULED = "scheduled"
    READY = "ready"
    RUNNING = "running"
    SUSPENDED = "suspended"
    DONE = "done"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def is_live(self) -> bool:
        """True for scheduled, ready, running and suspended."""
        return self in LIVE_STATES

    @property
    def is_finished(self) -> bool:
        """True for done, failed, dead and cancelled."""
        return self in FINISHED_STATES


LIVE_STATES = frozenset({JobState.SCHEDULED, JobState.READY, JobState.RUNNING, JobState.SUSPENDED})
FINISHED_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})


def check_aware(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: refuse naive datetimes (``None`` passes)."""
    if isinstance(value, datetime) and (value.tzinfo is None or value.utcoffset() is None):
        raise ValueError(f"{attribute.name} must be a timezone-aware datetime, got {value!r}")


_R = TypeVar("_R")
_UTC = timezone.utc


_CONVERTER: Any = getattr(attrs, "Converter", None)
"""attrs' converter class taking the instance or field (attrs 24.1 and later; none before)."""


def _record(cls: type[_R]) -> type[_R]:
    """Give a frozen ``attrs`` record an ``__init__`` as cheap as hand-set slots, the only
    way records are built.

    It takes what attrs' own ``__init__`` takes (keyword-only, the same names and defaults,
    read from ``attrs.fields``, so the field order is written once: in the class) and
    checks what it checks, but sets each slot through the slot's own descriptor (half the
    cost of the ``object.__setattr__`` attrs calls on a frozen class, a name lookup per
    field) and makes the common case of each check inline: a ``datetime`` in
    ``timezone.utc`` (what every driver hands in) or ``None`` passes :func:`check_aware`
    without a call, and a value already of an enum converter's type is not converted
    again. Anything else goes through the field's converter and validator, as attrs would
    (``attrs.validators.set_disabled`` is not honoured).

    The same code is also the record's ``positional`` (every field, positionally, in
    declaration order), which the memory and PostgreSQL drivers' claim and settle paths
    call: on Python 3.11 a call with twenty keywords costs about twice what a positional
    one does (measured 4.7 against 3.5 µs a ``Job`` on a loaded machine; attrs' own checked
    ``__init__`` 8.2 µs), and without it the memory driver's benchmark lost 15-35% of its
    jobs per CPU second. Everything else builds records by keyword.
    """
    fields = attrs.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__"):
        raise TypeError(f"{cls.__name__}: _record builds records without init hooks")
    space: dict[str, Any] = {"_datetime": datetime, "_utc": _UTC}
    params, body, checks = [], [], []
    for f in fields:
        if not f.init or f.alias != f.name or isinstance(f.default, attrs.Factory) or f.on_setattr:  # type: ignore[arg-type]
            raise TypeError(f"{cls.__name__}.{f.name}: _record builds plain fields only")
        name = f.name
        space[f"_s_{name}"] = cls.__dict__[name].__set__
        if f.default is attrs.NOTHING:
            params.append(name)
        else:
            space[f"_d_{name}"] = f.default
            params.append(f"{name}=_d_{name}")
        converter = f.converter
        if converter is not None:
            if _CONVERTER is not None and isinstance(converter, _CONVERTER):
                raise TypeError(f"{cls.__name__}.{f.name}: _record takes plain converters only")
            space[f"_c_{name}"] = converter
            if isinstance(converter, type) and issubclass(converter, enum.Enum):
                body.append(f"    if {name}.__class__ is not _c_{name}: {name} = _c_{name}({name})")
            else:
                body.append(f"    {name} = _c_{name}({name})")
        body.append(f"    _s_{name}(self, {name})")
        if f.validator is not None:
            space[f"_v_{name}"], space[f"_a_{name}"] = f.validator, f
            call = f"_v_{name}(self, _a_{name}, {name})"
            if f.validator is check_aware:
                call = (
                    f"if {name} is not None and ({name}.__class__ is not _datetime or {name}.tzinfo is not _utc): "
                    + call
                )
            checks.append(f"    {call}")
    names, code = ", ".join(f.name for f in fields), "\n".join(body + checks)
    space["_new"], space["_cls"] = object.__new__, cls
    source = (
        f"def __init__(self, *, {', '.join(params)}):\n{code}\n"
        f"def positional({names}):\n    self = _new(_cls)\n{code}\n    return self\n"
    )
    exec(compile(source, f"<{cls.__qualname__}.__init__>", "exec"), space)  # noqa: S102 - as attrs makes its own
    init, positional = space["__init__"], space["positional"]
    for func, name in ((init, "__init__"), (positional, "positional")):
        func.__qualname__, func.__module__ = f"{cls.__qualname__}.{name}", cls.__module__
    init.__annotations__ = {f.name: f.type for f in fields} | {"return": None}
    positional.__doc__ = (
        f"A {cls.__name__} from every field's value, positionally in declaration order ({names}): "
        "the constructor's own code and checks, called without keywords (a third of the cost on a hot path)."
    )
    cls.__init__ = init  # type: ignore[method-assign]
    cls.positional = staticmethod(positional)  # type: ignore[attr-defined]
    return cls


def _states(value: object) -> frozenset[JobState] | None:
    if value is None:
        return None
    if isinstance(value, str | JobState):
        return frozenset({JobState(value)})
    if isinstance(value, Iterable):
        return frozenset(JobState(v) for v in value)
    raise TypeError(f"state must be a state, a state name or a collection of them, got {value!r}")


@_record
@attrs.frozen(kw_only=True)
class JobError:
    """One entry of a job's error history.

    Attributes:
        type: The exception's type name (``ValueError``, ``LeaseExpired``,
            ``LeaseLapsedFinalAttempt``, ``Cancelled``...).
        message: Readable text of the error.
        at: When it was recorded, by the driver's clock.
        attempt: The attempt number it ended (0 when no attempt was running).
    """

    type: str
    message: str
    at: datetime = attrs.field(validator=check_aware)
    attempt: int = 0


@_record
@attrs.frozen(kw_only=True)
class Progress:
    """A job's latest stored progress (rules G): what its running attempt last reported.

    Attributes:
        value: The fraction done, 0..1, or ``None`` when only a message was given.
        message: A short text (at most :data:`jobcore.validate.MAX_PROGRESS_MESSAGE`
            characters), or ``None``.
        updated_at: When the store wrote it, by the store's clock (F01).
    """

    value: float | None = None
    message: str | None = None
    updated_at: datetime = attrs.field(validator=check_aware)


@_record
@attrs.frozen(kw_only=True)
class Job:
    """A job as the store holds it now.

    Attributes:
        id: Opaque string id, unique in the store.
        name: The job's registered name (what handler runs it).
        queue: The queue it waits in.
        payload: Its JSON payload, as stored (a tuple comes back as a list).
        state: Where it is in its life (see :class:`JobState`).
        priority: Higher is claimed first.
        attempt: Attempts started so far (moved by every claim; 0 until claimed).
        max_attempts: Attempts allowed before it is dead-lettered or dropped.
        run_at: When it is (or was) due.
        created_at: When it was enqueued.
        attempted_at: When the latest claim took it, if ever.
        finished_at: When it reached a finished state (cleared by requeue).
        worker_id: The worker holding it while running.
        claim_no: Claims so far; never reset, so an old token never matches again.
        lease_expires_at: While running, when the lease lapses.
        key: Idempotency key (unique among live jobs of the same name).
        result: JSON result stored by ``ack``.
        last_error: The latest entry of ``errors``.
        errors: Error history, oldest first.
        progress: The latest progress its running (or last) attempt stored (rules G), or
            ``None``: cleared by the next claim, kept when the attempt settles.
        trace_context: The enqueuing trace's W3C ``traceparent``/``tracestate`` as the store
            keeps it (a ``str`` to ``str`` mapping), or ``None``: set only when the enqueue ran
            with tracing on (:mod:`jobcore.contrib.otel`); an attempt's span links to it.
        duplicate: True only on the answer of an ``enqueue`` that found a live holder
            of its key and inserted nothing (E02).
    """

    id: str
    name: str
    queue: str
    payload: Any
    state: JobState = attrs.field(converter=JobState)
    priority: int = 0
    attempt: int = 0
    max_attempts: int
    run_at: datetime = attrs.field(validator=check_aware)
    created_at: datetime = attrs.field(validator=check_aware)
    attempted_at: datetime | None = attrs.field(default=None, validator=check_aware)
    finished_at: datetime | None = attrs.field(default=None, validator=check_aware)
    worker_id: str | None = None
    claim_no: int = 0
    lease_expires_at: datetime | None = attrs.field(default=None, validator=check_aware)
    key: str | None = None
    result: Any = None
    last_error: JobError | None = None
    errors: tuple[JobError, ...] = ()
    progress: Progress | None = None
    trace_context: dict[str, str] | None = attrs.field(default=None, hash=False)  # a dict: out of the hash
    duplicate: bool = attrs.field(default=False, eq=False)

    positional: ClassVar[Callable[..., Job]]
    """``Job.positional(id, name, ..., duplicate)``: the constructor, every field given
    positionally in declaration order, for drivers' hot paths (see :func:`_record`)."""

    @property
    def token(self) -> ClaimToken | None:
        """The token a current holder has, when running."""
        if self.state is not JobState.RUNNING or self.worker_id is None:
            return None
        return ClaimToken(job_id=self.id, worker_id=self.worker_id, claim_no=self.claim_no)


@_record
@attrs.frozen(kw_only=True)
class JobSpec:
    """One job to enqueue, with ``enqueue``'s keyword names (for ``enqueue_many``).

    Attributes:
        name: The job's name.
        payload: JSON payload.
        queue: Queue name.
        priority: Higher is claimed first.
        run_at: When it becomes due (aware datetime); excludes ``delay``.
        delay: Duration from now until due; excludes ``run_at``.
        max_attempts: Attempts allowed; ``None`` takes the driver's default.
        key: Idempotency key.
        depends_on: Parents (rules D): stored job ids, :class:`Job` records, or (``int``) the
            position of an earlier spec of the same ``enqueue_many`` batch. The job waits
            (state ``suspended``) until every parent is ``done``.
        on_parent_failure: ``"cancel"`` (default): the job is cancelled as soon as a parent ends
            other than ``done``; ``"run"``: it runs once every parent has finished, however.
    """

    name: str
    payload: Any = None
    queue: str = "default"
    priority: int = 0
    run_at: datetime | None = None
    delay: timedelta | float | int | None = None
    max_attempts: int | None = None
    key: str | None = None
    depends_on: Any = ()
    on_parent_failure: str = "cancel"


@_record
@attrs.frozen(kw_only=True)
class ClaimToken:
    """Proof of one claim of one job: ``(job_id, worker_id, claim_no)``.

    Attributes:
        job_id: The claimed job.
        worker_id: The claimer.
        claim_no: The job's claim counter at that claim; a later claim moves it,
            so this token stops matching.
    """

    job_id: str
    worker_id: str
    claim_no: int

    positional: ClassVar[Callable[[str, str, int], ClaimToken]]
    """``ClaimToken.positional(job_id, worker_id, claim_no)``, for drivers' claim paths."""


@_record
@attrs.frozen(kw_only=True)
class Claimed:
    """A claimed job and the token that settles it.

    Attributes:
        job: The job as it stands after the claim (``running``).
        token: What ``heartbeat``, ``ack`` and ``nack`` need.
    """

    job: Job
    token: ClaimToken

    positional: ClassVar[Callable[[Job, ClaimToken], Claimed]]
    """``Claimed.positional(job, token)``, for drivers' claim paths."""


@_record
@attrs.frozen(kw_only=True)
class ClaimResult:
    """What one ``claim`` call answers.

    Attributes:
        claimed: Jobs handed to the caller, in claim order.
        buried: Jobs whose lease lapsed on their final attempt and that this claim
            settled ``dead`` or ``failed`` (C08); reported to this claim only.
    """

    claimed: tuple[Claimed, ...] = ()
    buried: tuple[Job, ...] = ()


@_record
@attrs.frozen(kw_only=True)
class BulkResult:
    """What a ``*_many`` operator verb answers.

    Attributes:
        affected: Rows this call moved (at most its limit).
        remaining: Rows a second call could still move.
    """

    affected: int
    remaining: int


@_record
@attrs.frozen(kw_only=True)
class RescueResult:
    """What ``introspect.rescue()`` answers.

    Attributes:
        requeued: Lapsed jobs with attempts left, put back to ``ready``.
        buried: Lapsed final-attempt jobs settled ``dead``/``failed`` (C08).
    """

    requeued: int
    buried: tuple[Job, ...] = ()


@_record
@attrs.frozen(kw_only=True)
class JobFilter:
    """Which jobs a listing or bulk verb looks at. Every field left ``None`` matches all.

    Attributes:
        queue: Only this queue.
        name: Only jobs of this name.
        state: One state or several (``JobState`` or plain strings).
        id_prefix: Only ids starting with this text.
        created_from: Created at or after (aware datetime).
        created_to: Created strictly before (aware datetime).
    """

    queue: str | None = None
    name: str | None = None
    state: frozenset[JobState] | None = attrs.field(default=None, converter=_states)
    id_prefix: str | None = None
    created_from: datetime | None = attrs.field(default=None, validator=check_aware)
    created_to: datetime | None = attrs.field(default=None, validator=check_aware)


@_record
@attrs.frozen(kw_only=True)
class Page:
    """One page of ``introspect.list``.

    Attributes:
        jobs: Newest first.
        after: Cursor for the next (older) page; ``None`` when this page is the last.
        before: Cursor for the previous (newer) page; ``None`` when there is none to ask for.
    """

    jobs: tuple[Job, ...]
    after: str | None = None
    before: str | None = None


@_record
@attrs.frozen(kw_only=True)
class LeaseSlot:
    """One unexpired fleet lease slot, as ``leases.holders()`` answers it (K04).

    Attributes:
        key: The lease key (the concurrency group).
        holder: Who holds the slot.
        expires_at: When the slot lapses, on the store's clock (milliseconds).
    """

    key: str
    holder: str
    expires_at: datetime = attrs.field(validator=check_aware)


@_record
@attrs.frozen(kw_only=True)
class Stats:
    """Counts and ages for operators.

    Attributes:
        counts: ``{queue: {state: count}}``, only non-zero counts.
        oldest_due_age: ``{queue: age}`` of the oldest due ``ready``/``scheduled`` job, for
            queues that have one.
    """

    counts: Mapping[str, Mapping[JobState, int]]
    oldest_due_age: Mapping[str, timedelta]

    def count(self, state: JobState | str, queue: str | None = None) -> int:
        """Jobs in ``state``, in one queue or all."""
        st = JobState(state)
        queues = [queue] if queue is not None else list(self.counts)
        return sum(self.counts.get(q, {}).get(st, 0) for q in queues)


@_record
@attrs.frozen(kw_only=True)
class FinishedCount:
    """One bar of ``introspect.finished_per_minute`` (O10).

    Attributes:
        minute: The start of the minute (UTC, on the store's clock) the jobs finished in.
        state: The finished state they ended in.
        count: How many jobs ended in ``state`` with ``finished_at`` in that minute (at least 1).
    """

    minute: datetime
    state: JobState = attrs.field(converter=JobState)
    count: int


def _age(value: object) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    raise OptionInvalid(
        f"a retention age must be a timedelta, seconds as a number, or None, got {type(value).__name__} {value!r:.60}",
        "pass datetime.timedelta(days=...), a number of seconds, or None to keep that state forever",
    )


@_record
@attrs.frozen(kw_only=True)
class RetentionPolicy:
    """How long finished jobs are kept, per finished state (rules R).

    An age is a ``timedelta`` (or seconds as a number) counted from the job's
    ``finished_at``; ``None`` keeps that state forever. The defaults keep what an
    operator may still act on longest: ``done`` rows are the bulk of a queue's churn
    and the least looked at, ``dead`` rows wait for a human.

    Attributes:
        done: Age after which ``done`` jobs are pruned (default 1 day).
        failed: Age for ``failed`` jobs (default 7 days).
        cancelled: Age for ``cancelled`` jobs (default 7 days).
        dead: Age for ``dead`` (dead-lettered) jobs (default 30 days).
    """

    done: timedelta | None = attrs.field(default=timedelta(days=1), converter=_age)
    failed: timedelta | None = attrs.field(default=timedelta(days=7), converter=_age)
    cancelled: timedelta | None = attrs.field(default=timedelta(days=7), converter=_age)
    dead: timedelta | None = attrs.field(default=timedelta(days=30), converter=_age)

    def age(self, state: JobState | str) -> timedelta | None:
        """The age for one finished state (``None``: kept forever)."""
        value: timedelta | None = getattr(self, JobState(state).value)
        return value


@_record
@attrs.frozen(kw_only=True)
class Migration:
    """What ``driver.migrate()`` did, or (``dry_run=True``) would do.

    Attributes:
        before: The store's schema version before the call; None when jobcore's schema
            was not installed there.
        after: The store's version once the call's statements have run (``before``
            when there was nothing to do); None for a store that keeps no schema (memory).
        latest: The schema version this jobcore installs; None for memory.
        statements: The statements that ran, or would run, in order: SQL for
            PostgreSQL, ``mongosh`` commands for MongoDB; empty when there was nothing to do.
        applied: False for a dry run: nothing was written.
        language: What ``statements`` are written in: ``"sql"``, ``"mongosh"``, or ``""``
            for a store that keeps no schema.
    """

    before: int | None
    after: int | None
    latest: int | None
    statements: tuple[str, ...] = ()
    applied: bool = True
    language: str = ""

    @property
    def changed(self) -> bool:
        """True when the call moved (or a dry run would move) the store to another version."""
        return self.after is not None and self.before != self.after

    def describe(self) -> str:
        """One line for people: installed version N / moved from M to N / already at N."""
        if self.after is None:
            return "nothing to install: this store keeps no schema"
        if self.before is not None and self.latest is not None and self.before > self.latest:
            return f"at version {self.before}, newer than this jobcore's {self.latest}: left alone"
        if self.before == self.after:
            return f"already at version {self.after}"
        if self.before is None:
            return f"installed version {self.after}" if self.applied else f"would install version {self.after}"
        verb = "moved" if self.applied else "would move"
        return f"{verb} from version {self.before} to {self.after}"


@_record
@attrs.frozen(kw_only=True)
class PruneResult:
    """What ``introspect.prune`` answers (R01).

    Attributes:
        removed: Jobs deleted by this call, per finished state (every finished state
            present, zeros included).
        remaining: Jobs still eligible under the policy after this call, per state.
    """

    removed: Mapping[JobState, int]
    remaining: Mapping[JobState, int]

    @property
    def total_removed(self) -> int:
        """Jobs deleted by this call, all states together."""
        return sum(self.removed.values())

    @property
    def total_remaining(self) -> int:
        """Jobs a further call could still delete."""
        return sum(self.remaining.values())


class ScheduleOutcome(str, enum.Enum):
    """What a schedule's latest handled occurrence did (rules P)."""

    FIRED = "fired"
    """A job was enqueued for the occurrence."""
    CATCH_UP = "catch_up"
    """One job was enqueued standing for occurrences missed during downtime (policy ``once``)."""
    SKIPPED_OVERLAP = "skipped_overlap"
    """Nothing was enqueued: the previous job was still live and the schedule forbids overlap."""

    def __str__(self) -> str:
        return self.value


@_record
@attrs.frozen(kw_only=True)
class Schedule:
    """A periodic schedule as the store holds it (rules P).

    The store keeps the declaration as opaque JSON (``definition``, read by
    :mod:`jobcore.schedules`) and the durable state that makes each occurrence fire
    once: the watermark, moved only by compare-and-set.

    Attributes:
        name: Unique schedule name.
        definition: The declaration (cron expression or interval, time zone, job name,
            payload, queue, catch-up policy, overlap), as JSON data.
        watermark: Every occurrence at or before this instant has been handled (fired
            or skipped); nothing at or before it fires again.
        paused: A paused schedule fires nothing.
        last_fired_at: When (store clock) the watermark last moved by a firing.
        last_outcome: What that firing did.
        last_job_id: The job the latest firing enqueued (kept across skips).
        created_at: When the schedule was first declared.
        updated_at: When its definition or state last changed.
    """

    name: str
    definition: Mapping[str, Any]
    watermark: datetime = attrs.field(validator=check_aware)
    paused: bool = False
    last_fired_at: datetime | None = attrs.field(default=None, validator=check_aware)
    last_outcome: ScheduleOutcome | None = attrs.field(
        default=None, converter=attrs.converters.optional(ScheduleOutcome)
    )
    last_job_id: str | None = None
    created_at: datetime = attrs.field(validator=check_aware)
    updated_at: datetime = attrs.field(validator=check_aware)

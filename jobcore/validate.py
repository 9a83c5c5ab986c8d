"""Argument checks every driver shares, so every driver refuses exactly the same input.

A driver calls these before it touches its store; a refusal raises a coded
:class:`~jobcore.errors.InvalidInput` and nothing is written. The limits (payload size,
batch sizes, page sizes, ranges) live in :mod:`jobcore.vocabulary`, the same for every
driver, and are listed in ``docs/rules.md``.
"""

from __future__ import annotations

import json
import math
import operator
import zlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, overload

import attrs

from jobcore.clock import to_millis
from jobcore.errors import (
    ClaimQueuesEmpty,
    DependencyInvalid,
    OptionInvalid,
    PageInvalid,
    PayloadInvalid,
    ScheduleInvalid,
)
from jobcore.records import (
    FINISHED_STATES,
    ClaimToken,
    Job,
    JobFilter,
    JobSpec,
    JobState,
    RetentionPolicy,
    ScheduleOutcome,
    _record,
)
from jobcore.vocabulary import (  # the limits, re-exported: drivers and checks read them as v.NAME
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PAGE,
    DEFAULT_PRUNE_BATCH,
    DEFAULT_PRUNE_ROWS,
    MAX_ATTEMPTS,
    MAX_BULK_ROWS,
    MAX_CHART_MINUTES,
    MAX_CLAIM_BATCH,
    MAX_DELAY,
    MAX_ENQUEUE_BATCH,
    MAX_ENQUEUE_BATCH_BYTES,
    MAX_ERROR_TEXT_BYTES,
    MAX_JSON_DEPTH,
    MAX_LEASE,
    MAX_LEASE_SLOTS,
    MAX_NAME_LENGTH,
    MAX_PAGE,
    MAX_PARENTS,
    MAX_PAYLOAD_BYTES,
    MAX_PROGRESS_MESSAGE,
    MAX_PRUNE_ROWS,
    MAX_SPREAD,
    MIN_LEASE,
    PARENT_FAILURE_MODES,
    PRIORITY_MAX,
    PRIORITY_MIN,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_PAGE",
    "DEFAULT_PRUNE_BATCH",
    "DEFAULT_PRUNE_ROWS",
    "MAX_ATTEMPTS",
    "MAX_BULK_ROWS",
    "MAX_CHART_MINUTES",
    "MAX_CLAIM_BATCH",
    "MAX_DELAY",
    "MAX_ENQUEUE_BATCH",
    "MAX_ENQUEUE_BATCH_BYTES",
    "MAX_ERROR_TEXT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LEASE",
    "MAX_LEASE_SLOTS",
    "MAX_NAME_LENGTH",
    "MAX_PAGE",
    "MAX_PARENTS",
    "MAX_PAYLOAD_BYTES",
    "MAX_PROGRESS_MESSAGE",
    "MAX_PRUNE_ROWS",
    "MAX_SPREAD",
    "MIN_LEASE",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "Links",
    "NewJob",
    "StoreTimedJob",
    "batch_links",
    "check_bool",
    "check_bulk_limit",
    "check_claim",
    "check_clock",
    "check_duration",
    "check_filter",
    "check_fire",
    "check_id",
    "check_int",
    "check_links",
    "check_nack_flags",
    "check_name",
    "check_page",
    "check_pairs",
    "check_progress",
    "check_prune",
    "check_schedule_definition",
    "check_schedule_name",
    "check_seconds",
    "check_spread",
    "check_state",
    "check_time",
    "check_token",
    "check_wait",
    "decode_cursor",
    "decode_json",
    "encode_cursor",
    "encode_json",
    "error_entry",
    "new_job",
    "new_jobs",
    "prune_cutoffs",
]

_EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
_LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)
_MAX_QUEUES = 100


# --- scalars -------------------------------------------------------------------------


def check_int(value: object, name: str, lo: int, hi: int) -> int:
    """``value`` as an int in ``lo..hi``; bools, floats and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionInvalid(
            f"{name} must be an int, got {type(value).__name__} {value!r:.60}",
            f"pass a whole number from {lo} to {hi}",
        )
    if not lo <= value <= hi:
        raise OptionInvalid(f"{name}={value} is out of range", f"pass a whole number from {lo} to {hi}")
    return int(value)


def _span(delta: timedelta) -> str:
    """A duration as a refusal shows it: ``-1s``, ``0s``, ``1ms``, ``90s``, ``7 days`` (never
    ``-1 day, 23:59:59`` or ``0:00:00.001000``)."""
    seconds = delta.total_seconds()
    if 0 < abs(seconds) < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    if seconds and seconds % 86400 == 0:
        days = int(seconds // 86400)
        return f"{days} day" if abs(days) == 1 else f"{days} days"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds:g}s"


def check_duration(
    value: object, name: str, *, lo: timedelta = timedelta(0), hi: timedelta = MAX_DELAY,
    positive: bool = False,
) -> timedelta:
    """``value`` (a timedelta, or seconds as int/float) as a finite timedelta in range."""
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise OptionInvalid(f"{name} must be finite, got {value!r}", f"pass seconds up to {_span(hi)}")
        if abs(value) > hi.total_seconds() * 2:
            raise OptionInvalid(f"{name}={value!r}s is out of range", f"pass at most {_span(hi)}")
        delta = timedelta(seconds=value)
    else:
        raise OptionInvalid(
            f"{name} must be a timedelta or seconds, got {type(value).__name__} {value!r:.60}",
            "pass datetime.timedelta(...) or a number of seconds",
        )
    if positive and delta <= timedelta(0):
        raise OptionInvalid(f"{name} must be positive, got {_span(delta)}", f"pass at least {_span(lo or MIN_LEASE)}")
    if not lo <= delta <= hi:
        raise OptionInvalid(
            f"{name}={_span(delta)} is out of range", f"pass a duration from {_span(lo)} to {_span(hi)}",
        )
    return delta


def check_clock(clock: object) -> None:
    """``clock`` (a driver's ``clock=``): ``None`` or a :class:`~jobcore.clock.Clock` (anything
    with a callable ``now()``). Anything else was taken and failed at the first verb."""
    if clock is not None and not callable(getattr(clock, "now", None)):
        raise OptionInvalid(
            f"clock must have a now() answering an aware datetime, got {type(clock).__name__} {clock!r:.40}",
            "pass a jobcore.clock clock (SystemClock(), ManualClock(...)), or leave clock out for the default",
        )


def check_lease(value: object, name: str = "lease") -> timedelta:
    """A lease or ttl: positive, finite, from 1 ms to 7 days."""
    return check_duration(value, name, lo=MIN_LEASE, hi=MAX_LEASE, positive=True)


def check_seconds(value: object, name: str) -> float:
    """:func:`check_lease` in seconds: an interval or timeout from 1 ms to 7 days, positive and finite."""
    return check_lease(value, name).total_seconds()


def check_wait(timeout: object, poll: object) -> tuple[float, float]:
    """``wait``'s ``timeout`` and ``poll`` in seconds: each positive and finite, from 1 ms to 7 days (A04)."""
    span = check_duration(timeout, "timeout", lo=MIN_LEASE, hi=MAX_LEASE, positive=True)
    step = check_duration(poll, "poll", lo=MIN_LEASE, hi=MAX_LEASE, positive=True)
    return span.total_seconds(), step.total_seconds()


def check_time(value: object, name: str) -> datetime:
    """An aware datetime in range, in UTC, truncated to the millisecond."""
    if not isinstance(value, datetime):
        raise OptionInvalid(
            f"{name} must be a datetime, got {type(value).__name__} {value!r:.60}",
            "pass a timezone-aware datetime, e.g. datetime.now(timezone.utc)",
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise OptionInvalid(f"{name} is a naive datetime ({value})", "attach a time zone: tzinfo=timezone.utc")
    if not _EARLIEST <= value < _LATEST:
        raise OptionInvalid(f"{name}={value} is out of range", "pass a time between 1970 and 9000")
    return to_millis(value)


def check_name(value: object, name: str, *, optional: bool = False) -> str:
    """A job name, queue, key, worker id or lease key: 1-200 characters of text, no NUL."""
    if value is None and optional:
        return None  # type: ignore[return-value]
    if not isinstance(value, str):
        raise OptionInvalid(f"{name} must be a str, got {type(value).__name__} {value!r:.60}", f"pass {name} as text")
    if not 0 < len(value) <= MAX_NAME_LENGTH:
        raise OptionInvalid(
            f"{name} must be 1 to {MAX_NAME_LENGTH} characters, got {len(value)}", f"shorten or fill in {name}"
        )
    if "\x00" in value or not _encodable(value):
        raise OptionInvalid(f"{name} contains a NUL or an unpaired surrogate", f"pass {name} as plain text")
    return str(value)


def check_id(value: object) -> str:
    """A job id: any str (a malformed one simply matches nothing)."""
    if not isinstance(value, str):
        raise OptionInvalid(
            f"job id must be a str, got {type(value).__name__} {value!r:.60}", "pass the id as jobs report it"
        )
    return str(value)


def check_state(value: object, name: str = "state") -> JobState:
    """A :class:`JobState` or its plain string."""
    try:
        return JobState(value)
    except ValueError:
        names = ", ".join(s.value for s in JobState)
        raise OptionInvalid(f"{name}={value!r:.60} is not a job state", f"use one of {names}") from None


def check_token(value: object) -> ClaimToken:
    """A :class:`ClaimToken` as ``claim`` handed it out."""
    if not isinstance(value, ClaimToken):
        raise OptionInvalid(
            f"token must be a ClaimToken, got {type(value).__name__}", "pass Claimed.token from claim()"
        )
    return value


MAX_CLAIM_NO = 2**63 - 1
"""The largest claim number a store holds (a signed 64-bit integer on every driver)."""


def token_claim_no(token: ClaimToken) -> int | None:
    """``token.claim_no`` when a claim could have handed it out (an ``int``, not a ``bool``
    or a float, from 0 to :data:`MAX_CLAIM_NO`), else None: the token matches no job, and
    every driver answers it as a superseded one (L03), never with a database error."""
    claim_no = token.claim_no
    if type(claim_no) is not int or not 0 <= claim_no <= MAX_CLAIM_NO:
        return None
    return claim_no


def check_progress(value: object, message: object) -> tuple[float | None, str | None]:
    """A progress report (rules G, G03): ``value`` a finite fraction 0..1 or None, ``message``
    text of at most :data:`MAX_PROGRESS_MESSAGE` characters (no NUL) or None."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise OptionInvalid(
                f"progress value must be a number, got {type(value).__name__} {value!r:.60}",
                "pass a fraction from 0 to 1 (0.25 for a quarter done), or None",
            )
        if not math.isfinite(value) or not 0 <= value <= 1:
            raise OptionInvalid(
                f"progress value must be a finite fraction from 0 to 1, got {value!r:.60}",
                "pass done / total (a fraction from 0 to 1), not a percentage",
            )
        value = float(value)
    if message is not None:
        if not isinstance(message, str):
            raise OptionInvalid(
                f"progress message must be a str, got {type(message).__name__} {message!r:.60}",
                "pass the message as text, or None",
            )
        if len(message) > MAX_PROGRESS_MESSAGE:
            raise OptionInvalid(
                f"progress message must be at most {MAX_PROGRESS_MESSAGE} characters, got {len(message)}",
                "shorten the message; put details in the job's logs or result",
            )
        if "\x00" in message or not _encodable(message):
            raise OptionInvalid("progress message contains a NUL or an unpaired surrogate", "pass plain text")
        message = str(message)
    return value, message


def check_tokens(values: object) -> list[ClaimToken]:
    """A batch of :class:`ClaimToken` (``start``, ``heartbeat_many``); any other item refuses the whole batch."""
    if isinstance(values, str | bytes | ClaimToken) or not isinstance(values, Iterable):
        raise OptionInvalid(
            f"tokens must be a list of ClaimToken, got {type(values).__name__}", "pass [claimed.token, ...]"
        )
    return [check_token(value) for value in values]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- JSON ----------------------------------------------------------------------------


def _check_json(value: object, what: str, depth: int) -> None:
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        if "\x00" in value or not _encodable(value):
            raise PayloadInvalid(f"{what} holds a string with a NUL character or an unpaired surrogate")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadInvalid(f"{what} holds a non-finite number ({value})")
        return
    if depth >= MAX_JSON_DEPTH:
        raise PayloadInvalid(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, list | tuple):
        for item in value:
            _check_json(item, what, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadInvalid(
                    f"{what} has a {type(key).__name__} key {key!r:.40}; JSON keys are strings",
                    "convert the keys to str before enqueueing",
                )
            _check_json(key, what, depth)
            _check_json(item, what, depth + 1)
        return
    raise PayloadInvalid(f"{what} holds a {type(value).__name__}, which is not JSON data")


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_C_ENCODE = (
    None if getattr(json.encoder, "c_make_encoder", None) is None
    # What JSONEncoder.encode builds on every call, built once: (markers, default, string
    # writer, indent, key and item separators, sort_keys, skipkeys, allow_nan), the same
    # arguments in CPython 3.10 to 3.13. No circular-reference markers: every payload is
    # walked (depth-capped) or is a flat dict before it gets here.
    else json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def _encode(value: object) -> str:
    """The canonical JSON writer: ``json.dumps(value, ensure_ascii=False, allow_nan=False,
    separators=(",", ":"))``, without building an encoder per call (a third of the cost)."""
    if _C_ENCODE is None or isinstance(value, str):  # a bare string: the C writer answers it unjoined
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


def _flat(value: dict[Any, Any]) -> bool:
    """Whether a dict holds only ASCII str keys and plain scalars: what most payloads are.

    Such a dict needs none of :func:`_check_json`'s walk (ASCII text has no unpaired
    surrogate); anything else, or a NUL or a non-finite number, takes that walk, which
    also words the refusal.
    """
    for key, item in value.items():
        if type(key) is not str or not key.isascii() or "\x00" in key:
            return False
        kind = type(item)
        if kind is str:
            if not item.isascii() or "\x00" in item:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif not (kind is int or kind is bool or item is None):
            return False
    return True


def encode_json(value: object, what: str = "payload") -> str:
    """``value`` as its canonical JSON text, or :class:`PayloadInvalid`.

    What passes here comes back identical from every driver, except that tuples come
    back as lists (the JSON form).
    """
    if not (type(value) is dict and _flat(value)):
        _check_json(value, what, 0)
    try:
        text = _encode(value)
    except (ValueError, TypeError, RecursionError) as exc:
        raise PayloadInvalid(f"{what} cannot be written as JSON: {exc}") from exc
    if len(text) > MAX_PAYLOAD_BYTES // 4 and len(text.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise PayloadInvalid(
            f"{what} is larger than {MAX_PAYLOAD_BYTES} bytes of JSON",
            "store large data elsewhere and pass a reference",
        )
    return text


def decode_json(text: str | None) -> Any:
    """The value of JSON text stored by :func:`encode_json` (``None`` stays ``None``)."""
    return None if text is None else json.loads(text)


def exception_text(error: BaseException) -> tuple[str, str]:
    """``(type name, str(error))``; a placeholder text when ``str`` itself raises."""
    type_name = type(error).__name__
    try:
        return type_name, str(error)
    except Exception:
        return type_name, f"<unprintable {type_name}>"


def error_entry(error: object) -> tuple[str, str]:
    """``(type name, message)`` of what ``nack`` was given: an exception or a str."""
    if isinstance(error, BaseException):
        type_name, message = exception_text(error)
    elif isinstance(error, str):
        type_name, message = "Error", error
    else:
        raise OptionInvalid(
            f"error must be an exception or a str, got {type(error).__name__}",
            "pass the exception the handler raised, or a message",
        )
    if "\x00" in message or not _encodable(message):
        raise PayloadInvalid("error text holds a NUL character or an unpaired surrogate")
    if len(message.encode("utf-8")) > MAX_ERROR_TEXT_BYTES:
        raise PayloadInvalid(
            f"error text is longer than {MAX_ERROR_TEXT_BYTES} bytes",
            "truncate the message (the worker does this for you)",
        )
    return type_name, message


# --- enqueue -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class NewJob:
    """A checked job to insert: what ``enqueue`` validated, with its times resolved."""

    name: str
    queue: str
    payload: str  # canonical JSON text
    priority: int
    run_at: datetime
    max_attempts: int
    key: str | None
    state: JobState
    trace_context: dict[str, str] | None = None
    """The enqueuing trace's propagation fields (W3C ``traceparent``...), or None (untraced)."""


@_record  # StoreTimedJob.positional: one per job of a batch
@attrs.frozen(kw_only=True)
class StoreTimedJob:
    """A checked job to insert whose due time and state the store decides on its own clock (F01).

    What :func:`new_job` answers when given ``now=None``: a driver whose statements read
    the store's clock sends ``run_at`` (absolute, when given) or ``delay`` (counted from
    the store's now), and the store sets ``run_at`` and the state (``scheduled`` when due
    after its now, else ``ready``). :meth:`resolve` answers what the store decided, given
    the now it used.
    """

    name: str
    queue: str
    payload: str  # canonical JSON text
    priority: int
    run_at: datetime | None
    """The due time the caller gave (UTC, to the millisecond), or None: now + ``delay``."""
    delay: timedelta
    """Counted from the store's now when ``run_at`` is None; whole milliseconds, zero when
    neither was given."""
    max_attempts: int
    key: str | None
    trace_context: dict[str, str] | None = None
    """The enqueuing trace's propagation fields (W3C ``traceparent``...), or None (untraced):
    set by the door when tracing is on (``jobcore._tracing``), stored with the job."""

    def due(self, now: datetime) -> tuple[datetime, JobState]:
        """``(run_at, state)`` as the store decides them, ``now`` being its clock's reading
        (to the millisecond): ``scheduled`` when due after it, else ``ready`` (E01)."""
        if self.run_at is not None:
            due = self.run_at
        elif self.delay:
            due = to_millis(now + self.delay)
        else:
            return now, JobState.READY  # the common case: due at once
        return due, JobState.SCHEDULED if due > now else JobState.READY

    def resolve(self, now: datetime) -> NewJob:
        """The :class:`NewJob` this is once the store decided its due time and state on ``now``
        (its clock's reading, to the millisecond): for a driver that stores resolved jobs."""
        run_at, state = self.due(now)
        return NewJob(
            name=self.name, queue=self.queue, payload=self.payload, priority=self.priority, run_at=run_at,
            max_attempts=self.max_attempts, key=self.key, state=state, trace_context=self.trace_context,
        )


_SPEC_FIELDS = frozenset(f.name for f in attrs.fields(JobSpec))
_MS = timedelta(milliseconds=1)


@overload
def new_job(
    name: object, payload: object, *, queue: object = ..., priority: object = ..., run_at: object = ...,
    delay: object = ..., max_attempts: object = ..., key: object = ..., now: datetime, default_max_attempts: int = ...,
) -> NewJob: ...


@overload
def new_job(
    name: object, payload: object, *, queue: object = ..., priority: object = ..., run_at: object = ...,
    delay: object = ..., max_attempts: object = ..., key: object = ..., now: None, default_max_attempts: int = ...,
) -> StoreTimedJob: ...


def new_job(
    name: object,
    payload: object,
    *,
    queue: object = "default",
    priority: object = 0,
    run_at: object = None,
    delay: object = None,
    max_attempts: object = None,
    key: object = None,
    now: datetime | None,
    default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> NewJob | StoreTimedJob:
    """Check one enqueue's arguments and resolve its due time against ``now``.

    ``now=None``: the store decides the due time and state on its own clock; the answer
    is a :class:`StoreTimedJob` (``delay`` kept, not added to any client time).
    """
    if now is None and run_at is None and delay is None and key is None:
        # The common enqueue: a handle's name, queue, priority and attempts, again and again.
        # Types are part of the memo key: True == 1 and 1.0 == 1, yet only 1 passes as an int.
        memo: tuple[object, ...] = (
            name, queue, priority, max_attempts, default_max_attempts,
            type(name), type(queue), type(priority), type(max_attempts),
        )
        try:
            options = _SIMPLE.get(memo)
        except TypeError:  # an unhashable option: checked (and refused) below, unmemoised
            memo, options = (), None
        if options is None:
            options = _job_options(name, queue, priority, None, None, max_attempts, None, None, default_max_attempts)
            if memo:
                if len(_SIMPLE) >= _SIMPLE_SIZE:
                    _SIMPLE.clear()
                _SIMPLE[memo] = options
        return _store_timed(options, encode_json(payload, "payload"))
    options = _job_options(name, queue, priority, run_at, delay, max_attempts, key, now, default_max_attempts)
    if now is None:
        return StoreTimedJob(payload=encode_json(payload, "payload"), **options)
    return NewJob(payload=encode_json(payload, "payload"), **options)


_SIMPLE: dict[tuple[object, ...], dict[str, Any]] = {}
""":func:`new_job`'s checked options of keyless, undelayed enqueues, by their values and
types (read and written without a lock: a lost write only costs a check again)."""
_SIMPLE_SIZE = 512


def _job_options(  # noqa: PLR0917 - enqueue's keywords, in order
    name: object, queue: object, priority: object, run_at: object, delay: object, max_attempts: object,
    key: object, now: datetime | None, default_max_attempts: int,
) -> dict[str, Any]:
    """Every checked :class:`NewJob` (``now`` given) or :class:`StoreTimedJob` field but the payload."""
    checked_name = check_name(name, "name")
    checked_queue = check_name(queue, "queue")
    checked_key = check_name(key, "key", optional=True)
    checked_priority = check_int(priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
    attempts = default_max_attempts if max_attempts is None else max_attempts
    checked_attempts = check_int(attempts, "max_attempts", 1, MAX_ATTEMPTS)
    if run_at is not None and delay is not None:
        raise OptionInvalid("both run_at and delay were given", "pass one of run_at or delay")
    given = None if run_at is None else check_time(run_at, "run_at")
    wait = None if delay is None else check_duration(delay, "delay")
    options: dict[str, Any] = {
        "name": checked_name, "queue": checked_queue, "priority": checked_priority,
        "max_attempts": checked_attempts, "key": checked_key,
    }
    if now is None:  # the store adds the delay to its own now
        options["run_at"] = given
        options["delay"] = timedelta(0) if wait is None else wait // _MS * _MS
        return options
    if given is not None:
        due = given
    elif wait is not None:
        due = to_millis(now + wait)
    else:
        due = now
    options["run_at"] = due
    options["state"] = JobState.SCHEDULED if due > now else JobState.READY
    return options


@overload
def new_jobs(specs: object, *, now: datetime, default_max_attempts: int = ...) -> list[NewJob]: ...


@overload
def new_jobs(specs: object, *, now: None, default_max_attempts: int = ...) -> list[StoreTimedJob]: ...


def new_jobs(
    specs: object, *, now: datetime | None, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> list[NewJob] | list[StoreTimedJob]:
    """Check a whole ``enqueue_many`` batch; one bad item refuses all of it.

    A batch usually repeats one set of options (one handle's name, queue, priority...):
    each distinct set is checked once, and only the payloads item by item. ``now=None``
    answers :class:`StoreTimedJob` records, as :func:`new_job` does.
    """
    if isinstance(specs, str | bytes | Mapping) or not isinstance(specs, Iterable):
        raise OptionInvalid(
            f"specs must be a list of JobSpec or mappings, got {type(specs).__name__}",
            "pass a list, e.g. [JobSpec(name='x', payload={...})]",
        )
    record: type[NewJob] | type[StoreTimedJob] = NewJob if now is not None else StoreTimedJob
    out: list[Any] = []
    checked: dict[tuple[object, ...], dict[str, Any]] = {}
    last: tuple[object, ...] = ()
    options: dict[str, Any] = {}
    chars = 0
    for index, spec in enumerate(specs):
        if len(out) >= MAX_ENQUEUE_BATCH:
            raise OptionInvalid(f"more than {MAX_ENQUEUE_BATCH} specs in one batch", "split the batch")
        if isinstance(spec, JobSpec):
            values = (
                spec.name, spec.queue, spec.priority, spec.run_at, spec.delay, spec.max_attempts, spec.key,
            )
            payload = spec.payload
        elif isinstance(spec, Mapping):
            unknown = set(spec) - _SPEC_FIELDS
            if unknown:
                raise OptionInvalid(
                    f"spec {index} has unknown keys {sorted(map(str, unknown))}", f"use only {sorted(_SPEC_FIELDS)}"
                )
            if "name" not in spec:
                raise OptionInvalid(f"spec {index} has no name", "give every spec a name")
            values = tuple(spec.get(field, default) for field, default in _SPEC_DEFAULTS)
            payload = spec.get("payload")
        else:
            raise OptionInvalid(f"spec {index} is a {type(spec).__name__}", "pass JobSpec records or mappings")
        if not (last and all(map(operator.is_, values, last))):  # the very objects the last item had
            # Types are part of the memo key: True == 1 and 1.0 == 1, yet only 1 passes as an int.
            memo = (*values, *map(type, values))
            try:
                known = checked.get(memo)
            except TypeError:  # an unhashable option: checked (and refused) below, unmemoised
                memo, known = (), None
            if known is None:
                known = _job_options(*values, now, default_max_attempts)
                if memo:
                    checked[memo] = known
            options, last = known, values
        text = encode_json(payload, "payload")
        chars += len(text)
        if chars > MAX_ENQUEUE_BATCH_BYTES:  # a character is at least one byte: over already
            raise _batch_too_large(f"at least {chars} bytes of JSON by item {index}")
        out.append(_store_timed(options, text) if now is None else record(payload=text, **options))
    if chars > MAX_ENQUEUE_BATCH_BYTES // 4:  # up to 4 bytes a character: count them
        size = sum(len(job.payload) if job.payload.isascii() else len(job.payload.encode("utf-8")) for job in out)
        if size > MAX_ENQUEUE_BATCH_BYTES:
            raise _batch_too_large(f"{size} bytes of JSON")
    return out


def _batch_too_large(size: str) -> OptionInvalid:
    """The refusal of a batch whose payloads come to ``size``, over MAX_ENQUEUE_BATCH_BYTES (E05)."""
    return OptionInvalid(
        f"the batch's payloads are {size}; one enqueue_many stores at most {MAX_ENQUEUE_BATCH_BYTES} bytes of payload",
        "split the batch into smaller enqueue_many calls, or store large data elsewhere and pass a reference",
    )


def _store_timed(options: dict[str, Any], payload: str) -> StoreTimedJob:
    """A :class:`StoreTimedJob` of checked ``options`` (:func:`_job_options`) and a payload's text."""
    return StoreTimedJob.positional(  # type: ignore[attr-defined,no-any-return]
        options["name"], options["queue"], payload, options["priority"], options["run_at"], options["delay"],
        options["max_attempts"], options["key"], None,
    )


@attrs.frozen
class Links:
    """A checked job's parents (rules D), as :func:`check_links` answers them.

    Attributes:
        ids: Distinct stored job ids, in the order given (the store checks they exist).
        earlier: Distinct positions of earlier items of the same batch, ascending.
        run_anyway: ``on_parent_failure="run"``: run once every parent finished, however it ended.
    """

    ids: tuple[str, ...]
    earlier: tuple[int, ...] = ()
    run_anyway: bool = False


def check_links(depends_on: object, on_parent_failure: object, position: int | None) -> Links | None:
    """``depends_on`` and ``on_parent_failure`` of one job, checked; ``None`` when it has no parents.

    Items are job ids (``str``), :class:`~jobcore.records.Job` records (their id) or, in a
    batch (``position`` is the item's own index), ``int`` positions of earlier items. A
    position at or after the item's own would allow a cycle and is refused
    (``JC_DEPENDENCY_INVALID``), as are more than :data:`MAX_PARENTS` parents and any other
    kind of item. Whether an id names a stored job is the store's to check.
    """
    if on_parent_failure not in PARENT_FAILURE_MODES:
        raise OptionInvalid(
            f"on_parent_failure must be one of {', '.join(PARENT_FAILURE_MODES)}, got {on_parent_failure!r:.60}",
            'pass on_parent_failure="cancel" (the default) or "run"',
        )
    if depends_on is None:
        return None
    if isinstance(depends_on, str | bytes | Job | Mapping) or not isinstance(depends_on, Iterable):
        raise DependencyInvalid(
            f"depends_on must be a list of job ids, Jobs or batch positions, got {type(depends_on).__name__}",
            "pass a list, e.g. depends_on=[job.id] or depends_on=[first_job]",
        )
    ids: dict[str, None] = {}
    earlier: set[int] = set()
    where = "" if position is None else f"spec {position}: "
    for given in depends_on:
        item = given.id if isinstance(given, Job) else given
        if isinstance(item, str):
            ids.setdefault(check_name(item, "depends_on item"), None)
        elif isinstance(item, int) and not isinstance(item, bool) and position is not None:
            if not 0 <= item < position:
                raise DependencyInvalid(
                    f"{where}depends on batch position {item}, which is not an earlier spec (a cycle could form)",
                    "name only specs that come before this one in the batch",
                )
            earlier.add(item)
        else:
            kind = "a batch position outside enqueue_many" if isinstance(item, int) else type(item).__name__
            raise DependencyInvalid(
                f"{where}depends_on holds {kind} ({item!r:.40})",
                "pass job ids, Jobs, or (in enqueue_many) positions of earlier specs",
            )
        if len(ids) + len(earlier) > MAX_PARENTS:
            raise DependencyInvalid(
                f"{where}more than {MAX_PARENTS} parents", "fan in through an intermediate job, or depend on fewer jobs"
            )
    if not ids and not earlier:
        return None
    return Links(ids=tuple(ids), earlier=tuple(sorted(earlier)), run_anyway=on_parent_failure == "run")


def batch_links(specs: list[Any]) -> list[Links | None] | None:
    """Every item's :class:`Links` for an ``enqueue_many`` batch, or ``None`` when no item has parents
    (the common case: one attribute read per item)."""
    found = False
    for spec in specs:
        if isinstance(spec, JobSpec):
            if spec.depends_on or spec.on_parent_failure != "cancel":
                found = True
                break
        elif isinstance(spec, Mapping) and ("depends_on" in spec or "on_parent_failure" in spec):
            found = True
            break
    if not found:
        return None
    links: list[Links | None] = []
    for index, spec in enumerate(specs):
        if isinstance(spec, JobSpec):
            links.append(check_links(spec.depends_on, spec.on_parent_failure, index))
        elif isinstance(spec, Mapping):
            links.append(check_links(spec.get("depends_on"), spec.get("on_parent_failure", "cancel"), index))
        else:
            links.append(None)  # refused by new_jobs
    return links


_SPEC_DEFAULTS = tuple(
    (f, attrs.fields_dict(JobSpec)[f].default)
    for f in ("name", "queue", "priority", "run_at", "delay", "max_attempts", "key")
)


# --- claim, paging, bulk ---------------------------------------------------------------


def check_claim(
    queues: object, worker_id: object, limit: object, lease: object, drop_exhausted: object
) -> tuple[tuple[str, ...], str, int, timedelta, frozenset[str]]:
    """The arguments of ``claim``, checked (C04, C05, C09)."""
    if isinstance(queues, str):
        queues = (queues,)
    if not isinstance(queues, Iterable):
        raise OptionInvalid(f"queues must be a list of names, got {type(queues).__name__}", "pass e.g. ['default']")
    names = tuple(dict.fromkeys(check_name(q, "queue") for q in queues))
    if not names:
        raise ClaimQueuesEmpty("claim was given no queues")
    if len(names) > _MAX_QUEUES:
        raise OptionInvalid(f"claim was given {len(names)} queues", f"claim from at most {_MAX_QUEUES} queues at once")
    worker = check_name(worker_id, "worker_id")
    size = check_int(limit, "limit", 1, MAX_CLAIM_BATCH)
    span = check_lease(lease)
    if isinstance(drop_exhausted, str) or not isinstance(drop_exhausted, Iterable):
        raise OptionInvalid("drop_exhausted must be a collection of job names", "pass e.g. ('send_email',)")
    drop = frozenset(check_name(n, "drop_exhausted name") for n in drop_exhausted)
    return names, worker, size, span, drop


_CURSOR_SALT = b"jobcore-cursor:"


def encode_cursor(seq: int) -> str:
    """An opaque cursor for the row with enqueue sequence ``seq``."""
    body = format(seq, "x")
    check = zlib.crc32(_CURSOR_SALT + body.encode()) & 0xFFFFFF
    return f"c{body}.{check:06x}"


def decode_cursor(cursor: object, name: str) -> int:
    """The sequence inside a cursor :func:`encode_cursor` made, or :class:`PageInvalid`."""
    if isinstance(cursor, str) and cursor.startswith("c") and "." in cursor:
        body, _, check = cursor[1:].partition(".")
        try:
            seq = int(body, 16)
            ok = int(check, 16) == zlib.crc32(_CURSOR_SALT + body.encode()) & 0xFFFFFF
        except ValueError:
            ok = False
        if ok and body == format(seq, "x") and 0 < seq < 2**63:
            return seq
    raise PageInvalid(
        f"{name}={cursor!r:.60} is not a cursor a page produced", f"pass Page.{name} from an earlier page"
    )


def check_page(limit: object, after: object, before: object) -> tuple[int, int | None, int | None]:
    """``list``'s paging arguments (O07): ``(limit, after_seq, before_seq)``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise PageInvalid(f"limit={limit!r:.60} is not a page size", f"pass a whole number from 1 to {MAX_PAGE}")
    if after is not None and before is not None:
        raise PageInvalid("both after and before were given", "page in one direction: pass after or before")
    after_seq = None if after is None else decode_cursor(after, "after")
    before_seq = None if before is None else decode_cursor(before, "before")
    return int(limit), after_seq, before_seq


def check_filter(value: object) -> JobFilter:
    """A :class:`JobFilter`, a mapping of its fields, or ``None`` (match all), checked."""
    if value is None:
        return JobFilter()
    if isinstance(value, Mapping):
        try:
            value = JobFilter(**value)
        except (TypeError, ValueError) as exc:
            raise OptionInvalid(f"filter is not valid: {exc}", "use JobFilter's fields") from None
    if not isinstance(value, JobFilter):
        raise OptionInvalid(f"filter must be a JobFilter, got {type(value).__name__}", "pass JobFilter(...)")
    for field in ("queue", "name"):
        check_name(getattr(value, field), field, optional=True)
    if value.id_prefix is not None and not isinstance(value.id_prefix, str):
        raise OptionInvalid("id_prefix must be a str", "pass the start of an id")
    if value.id_prefix is not None and ("\x00" in value.id_prefix or not _encodable(value.id_prefix)):
        raise OptionInvalid(
            "id_prefix contains a NUL or an unpaired surrogate", "pass the start of an id as plain text"
        )
    for field in ("created_from", "created_to"):
        if getattr(value, field) is not None:
            check_time(getattr(value, field), field)
    return value


def check_pairs(items: object) -> list[tuple[Any, Any]]:
    """``ack_many``'s items as ``(token, result)`` pairs (each still to be checked)."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise OptionInvalid("items must be a list of (token, result) pairs", "pass [(token, result), ...]")
    out = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise OptionInvalid("each item must be a (token, result) pair", "pass [(token, result), ...]")
        out.append((item[0], item[1]))
    return out


def check_bool(value: object, what: str) -> bool:
    """A real ``bool`` (1, "yes" and None are refused: a flag is never guessed)."""
    if not isinstance(value, bool):
        raise OptionInvalid(f"{what} must be True or False, got {value!r:.40}", f"pass {what}=True or False")
    return value


def check_nack_flags(**flags: object) -> None:
    """``nack``'s flags: each a real bool, and not ``fail`` with ``park``."""
    for name, value in flags.items():
        check_bool(value, name)
    if flags["fail"] and flags["park"]:
        raise OptionInvalid("fail=True and park=True were both given", "fail the job or park it, not both")


def check_bulk_limit(limit: object) -> int:
    """A ``*_many`` call's row limit: 1..MAX_BULK_ROWS."""
    return check_int(limit, "limit", 1, MAX_BULK_ROWS)


def check_spread(value: object) -> timedelta:
    """``requeue_many``'s jitter window: 0 to one hour."""
    return check_duration(value, "spread", hi=MAX_SPREAD)


def spread_run_at(now: datetime, spread: timedelta, index: int, count: int) -> datetime:
    """The ``index``-th of ``count`` requeued rows' due time, spread evenly over ``spread``."""
    if count <= 1 or spread <= timedelta(0):
        return now
    return to_millis(now + spread * index / count)


def default_spread(count: int) -> timedelta:
    """The default requeue spread: 10 ms a row, at most 30 s (O06)."""
    return min(timedelta(milliseconds=10) * count, timedelta(seconds=30))


# --- retention -----------------------------------------------------------------------


def check_prune(
    policy: object, limit: object, batch: object, *, dry_run: object = False,
) -> tuple[RetentionPolicy, int, int]:
    """``introspect.prune``'s arguments: a policy (``None``: the defaults) and its bounds.

    Every age must be ``None`` or a finite duration from 0 to MAX_DELAY; ``dry_run``
    a real bool (a truthy string must not turn a delete into a dry run, or back).
    """
    if not isinstance(dry_run, bool):
        raise OptionInvalid(f"dry_run must be True or False, got {dry_run!r:.40}", "pass dry_run=True or False")
    if policy is None:
        policy = RetentionPolicy()
    if not isinstance(policy, RetentionPolicy):
        raise OptionInvalid(
            f"policy must be a RetentionPolicy, got {type(policy).__name__}",
            fix="pass jobcore.RetentionPolicy(done=..., failed=..., cancelled=..., dead=...) or None",
        )
    for state in sorted(FINISHED_STATES):
        age = policy.age(state)
        if age is not None:
            check_duration(age, f"policy.{state.value}", lo=timedelta(0), hi=MAX_DELAY)
    return policy, check_int(limit, "limit", 1, MAX_PRUNE_ROWS), check_int(batch, "batch", 1, MAX_BULK_ROWS)


def prune_cutoffs(policy: RetentionPolicy, now: datetime) -> dict[JobState, datetime]:
    """Per finished state kept by ``policy`` for a limited time: jobs finished at or before this are eligible."""
    return {
        state: to_millis(now - age)
        for state in sorted(FINISHED_STATES)
        if (age := policy.age(state)) is not None
    }


# --- schedules -----------------------------------------------------------------------


def check_schedule_name(value: object) -> str:
    """A schedule name: the rules of :func:`check_name`, refused as ``JC_SCHEDULE_INVALID``."""
    try:
        return check_name(value, "schedule name")
    except OptionInvalid as exc:
        raise ScheduleInvalid(exc.cause, exc.fix) from None


def check_schedule_definition(value: object) -> str:
    """A schedule's declaration as its canonical JSON text: a JSON object (str keys, JSON data)."""
    if not isinstance(value, dict):
        raise ScheduleInvalid(
            f"a schedule definition must be a JSON object (dict), got {type(value).__name__}",
            "pass a dict with str keys holding JSON data",
        )
    try:
        return encode_json(value, "schedule definition")
    except PayloadInvalid as exc:
        raise ScheduleInvalid(exc.cause, exc.fix) from None


def check_fire(
    expected: object, occurrence: object, outcome: object, overlap: object
) -> tuple[datetime, datetime, ScheduleOutcome, bool]:
    """``schedules.fire``'s scalar arguments: aware times with ``occurrence`` after ``expected``."""
    old = check_time(expected, "expected")
    new = check_time(occurrence, "occurrence")
    if new <= old:
        raise OptionInvalid(
            f"occurrence {new.isoformat()} is not after expected {old.isoformat()}",
            "pass the occurrence that follows the schedule's watermark",
        )
    try:
        result = ScheduleOutcome(outcome)
    except (ValueError, TypeError):
        names = ", ".join(o.value for o in ScheduleOutcome)
        raise OptionInvalid(f"outcome={outcome!r:.60} is not a schedule outcome", f"use one of {names}") from None
    if not isinstance(overlap, bool):
        raise OptionInvalid(f"overlap must be True or False, got {overlap!r:.40}", "pass overlap=True or False")
    return old, new, result, overlap

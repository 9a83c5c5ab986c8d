"""Periodic schedules: declaring them (``cron``, ``every``), their occurrences, catch-up.

This module is pure logic, the same on every driver: it turns a declaration into the
instants it fires at and decides what a scheduler does with the occurrences that are
due. The durable part, the watermark moved by compare-and-set, is the store's
(:class:`jobcore.driver.ScheduleStore`); the loop that reads the clock and calls
``fire`` is :class:`jobcore.scheduler.Scheduler`.

* ``cron("30 2 * * *", tz="Europe/Warsaw")``: a 5-field cron expression (or ``@daily``
  and friends) read in a time zone. Parsing and calendar matching are cronsim's; the
  DST rules on top of it are ours and pinned by tests (P05):

  - an expression whose hour field names every hour (``*``, ``*/1``, ``0-23``) means
    *every real hour* (or minute): across a spring-forward gap nothing is lost in real
    time (the skipped local hour simply is not there), and across a fall-back overlap
    both passes of the repeated hour fire, each a distinct instant;
  - any other expression names local wall-clock times: a time inside a spring-forward
    gap fires once, at the first instant after the gap (several gap times of one gap,
    and a time named exactly at the gap's end, collapse into that one firing); an
    ambiguous time of a fall-back overlap fires once, at its first pass (``fold=0``).

* ``every(timedelta(minutes=5))``: a fixed interval of real time, aligned on
  ``anchor`` (default the Unix epoch, 1970-01-01T00:00Z), so every process computes the
  same instants ``anchor + k * interval`` without asking anyone; DST never moves it.

Each declaration carries its catch-up policy and overlap flag. When more than one
occurrence is due at once (the schedulers were down): ``skip`` fires only the latest,
``once`` fires one job for the latest marked as a catch-up (outcome ``catch_up``, key
ending in ``:catch-up``), ``all`` fires the most recent ``catch_up_limit`` of them,
oldest first, each its own compare-and-set; older ones are passed over. Every
invalid declaration is refused when it is made, with ``JC_SCHEDULE_INVALID`` (P04).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from jobcore import validate as v
from jobcore.clock import to_millis, utc
from jobcore.errors import InvalidInput, PayloadInvalid, ScheduleInvalid
from jobcore.records import JobSpec, ScheduleOutcome

_MAX_SHIFT = timedelta(hours=3)
"""More than any zone's clock change: how far back an overlap's first pass may lie."""

__all__ = [
    "CATCH_UP_POLICIES",
    "DEFAULT_CATCH_UP",
    "DEFAULT_CATCH_UP_LIMIT",
    "EPOCH",
    "MAX_CATCH_UP_LIMIT",
    "MAX_INTERVAL",
    "MAX_SCHEDULE_NAME",
    "MIN_INTERVAL",
    "Cron",
    "Every",
    "Firing",
    "ScheduleDefinition",
    "Trigger",
    "cron",
    "every",
    "plan",
    "schedule_key",
]

CATCH_UP_POLICIES = ("skip", "once", "all")
"""What a schedule does with occurrences missed while no scheduler ran."""

DEFAULT_CATCH_UP = "skip"
"""The catch-up policy when none is given."""

DEFAULT_CATCH_UP_LIMIT = 10
"""How many missed occurrences ``catch_up="all"`` fires when no ``catch_up_limit`` is given."""

MAX_CATCH_UP_LIMIT = 1000
"""The largest ``catch_up_limit``."""

MIN_INTERVAL = timedelta(seconds=1)
"""The shortest ``every`` interval: schedulers tick about once a second."""

MAX_INTERVAL = timedelta(days=3660)
"""The longest ``every`` interval (about ten years)."""

MAX_SCHEDULE_NAME = 150
"""Characters of a schedule name: the job key ``schedule:NAME@TIME:catch-up`` must fit in a key."""

EPOCH = datetime(1970, 1, 1, tzinfo=utc)
"""Where ``every`` schedules are aligned unless given an ``anchor``."""

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_PROBE = datetime(2000, 1, 1)  # noqa: DTZ001 - naive on purpose (wall-clock matching); a fixed start for the "does it ever fire" check: declarations read no clock
_MS = timedelta(milliseconds=1)
_FIRST_WINDOW = timedelta(hours=2)  # the first look-back window when searching for the latest occurrences


def _invalid(cause: str, fix: str) -> ScheduleInvalid:
    return ScheduleInvalid(cause, fix)


def _check_policy(catch_up: object, catch_up_limit: object, overlap: object) -> int | None:
    """Refuse a bad policy; answers the effective ``catch_up_limit`` (``None`` unless ``all``)."""
    if catch_up not in CATCH_UP_POLICIES or not isinstance(catch_up, str):
        raise _invalid(
            f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, got {catch_up!r:.60}",
            'pass catch_up="skip" (latest only), "once" (one marked catch-up) or "all" (each, up to a bound)',
        )
    limit: int | None = None
    if catch_up == "all":
        value = DEFAULT_CATCH_UP_LIMIT if catch_up_limit is None else catch_up_limit
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CATCH_UP_LIMIT:
            raise _invalid(
                f"catch_up_limit must be a whole number from 1 to {MAX_CATCH_UP_LIMIT}, got {value!r:.60}",
                f'pass catch_up_limit=N with catch_up="all" (default {DEFAULT_CATCH_UP_LIMIT})',
            )
        limit = int(value)
    elif catch_up_limit is not None:
        raise _invalid(
            f'catch_up_limit only applies to catch_up="all", not {catch_up!r}',
            'drop catch_up_limit, or pass catch_up="all"',
        )
    if not isinstance(overlap, bool):
        raise _invalid(f"overlap must be a bool, got {overlap!r:.60}", "pass overlap=True or overlap=False")
    return limit


@attrs.frozen(kw_only=True)
class Trigger:
    """When a schedule fires, and what it does after downtime or while its last job runs.

    Build one with :func:`cron` or :func:`every`.

    Attributes:
        catch_up: ``skip``, ``once`` or ``all`` (see :data:`CATCH_UP_POLICIES`).
        catch_up_limit: With ``all``: the most missed occurrences fired at once.
        overlap: ``False``: an occurrence whose previous job is still live is skipped
            and recorded (``skipped_overlap``), not queued behind it.
    """

    catch_up: str = DEFAULT_CATCH_UP
    catch_up_limit: int | None = None
    overlap: bool = True

    def after(self, instant: datetime) -> Iterator[datetime]:
        """The occurrences strictly after ``instant``, ascending, as aware UTC datetimes."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The trigger's part of a stored definition."""
        raise NotImplementedError

    def describe(self) -> str:
        """One short line for operators (``cron 30 2 * * * Europe/Warsaw``)."""
        raise NotImplementedError

    def next_after(self, instant: datetime) -> datetime | None:
        """The first occurrence after ``instant``, or ``None`` when it never fires again."""
        return next(self.after(instant), None)

    def between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """Up to ``limit`` occurrences in ``(after, until]``, oldest first."""
        found: list[datetime] = []
        if limit <= 0:
            return found
        for occurrence in self.after(after):
            if occurrence > until:
                break
            found.append(occurrence)
            if len(found) >= limit:
                break
        return found

    def latest(self, after: datetime, until: datetime, count: int) -> list[datetime]:
        """The ``count`` latest occurrences in ``(after, until]``, oldest first.

        Looks back from ``until`` through windows growing eightfold, so a long downtime
        costs about as much as the few occurrences asked for, not every missed one.
        """
        if count <= 0 or until <= after:
            return []
        window = _FIRST_WINDOW
        while True:
            start = max(after, until - window) if window < until - after else after
            recent: deque[datetime] = deque(maxlen=count)
            for occurrence in self.after(start):
                if occurrence > until:
                    break
                recent.append(occurrence)
            if len(recent) >= count or start == after:
                return list(recent)
            window *= 8


def _zone_of(tz: object) -> tuple[str, tzinfo]:
    if tz is None or tz is utc or tz == timezone.utc:
        return "UTC", utc
    if isinstance(tz, ZoneInfo):
        tz = tz.key
    if not isinstance(tz, str) or not tz:
        raise _invalid(f"tz must be an IANA time zone name, got {tz!r:.60}", 'pass tz="Europe/Warsaw" or tz="UTC"')
    try:
        return tz, ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise _invalid(
            f"unknown time zone {tz!r:.80}",
            'pass an IANA zone name such as "Europe/Warsaw" or "UTC" (install tzdata where the system has none)',
        ) from exc


def _real_instants(naive: datetime, zone: tzinfo) -> list[datetime]:
    """The real instants a zone's clock reads ``naive`` at: two in a fall-back overlap, none
    in a spring-forward gap, one otherwise (ascending, UTC)."""
    found = []
    for fold in (0, 1):
        real = naive.replace(tzinfo=zone, fold=fold).astimezone(utc)
        if real.astimezone(zone).replace(tzinfo=None) == naive and real not in found:
            found.append(real)
    return sorted(found)


def _resolve_local(naive: datetime, zone: tzinfo) -> datetime:
    """The real instant a local wall-clock time fires at: itself, its first pass, or the gap's end."""
    first = naive.replace(tzinfo=zone, fold=0).astimezone(utc)
    if first.astimezone(zone).replace(tzinfo=None) == naive:
        return first  # exists; for an ambiguous time this is the first pass (P05)
    # Inside a spring-forward gap: fold=1 reads it with the offset after the change (an
    # instant before the change), fold=0 with the offset before (one after). The change
    # itself, the first instant after the gap, lies between: find it to the second.
    second = naive.replace(tzinfo=zone, fold=1).astimezone(utc)
    lo, hi = min(first, second), max(first, second)
    after_offset = hi.astimezone(zone).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + timedelta(seconds=((hi - lo) // timedelta(seconds=1)) // 2)
        if mid.astimezone(zone).utcoffset() == after_offset:
            hi = mid
        else:
            lo = mid
    return hi


@attrs.frozen(kw_only=True)
class Cron(Trigger):
    """A cron expression read in a time zone; build it with :func:`cron`.

    Attributes:
        expr: Five fields (minute hour day-of-month month day-of-week), or an alias
            (``@yearly``, ``@monthly``, ``@weekly``, ``@daily``, ``@hourly``).
        tz: IANA zone name the expression's wall-clock times are read in.
    """

    expr: str
    tz: str = "UTC"
    _zone: tzinfo = attrs.field(init=False, eq=False, repr=False)
    _fields: str = attrs.field(init=False, eq=False, repr=False)
    _hourly: bool = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "catch_up_limit", _check_policy(self.catch_up, self.catch_up_limit, self.overlap))
        name, zone = _zone_of(self.tz)
        object.__setattr__(self, "tz", name)
        object.__setattr__(self, "_zone", zone)
        if not isinstance(self.expr, str):
            raise _invalid(f"a cron expression is text, got {self.expr!r:.60}", 'pass e.g. cron("*/5 * * * *")')
        expr = " ".join(self.expr.split())
        object.__setattr__(self, "expr", expr)
        fields = _ALIASES.get(expr.lower(), expr)
        parts = fields.split()
        if len(parts) != 5:
            raise _invalid(
                f"cron expression {expr!r:.80} has {len(parts)} fields, not 5",
                "write minute hour day-of-month month day-of-week, e.g. '30 2 * * *', or @daily/@hourly",
            )
        from cronsim import CronSim, CronSimError  # noqa: PLC0415 - only a cron schedule pays for the cron library

        try:
            probe = CronSim(fields, _PROBE)
            first = next(probe, None)
        except CronSimError as exc:
            raise _invalid(
                f"invalid cron expression {expr!r:.80}: {exc}",
                "fix the expression; each field takes *, a number, a range a-b, a step */n or a list a,b",
            ) from exc
        if first is None:
            raise _invalid(f"cron expression {expr!r:.80} never fires", "check its day-of-month and month fields")
        hourly = probe.hours == set(range(24))
        if hourly:
            # Every hour matches: iterate real instants (cronsim's aware mode), hour field
            # written as "*" so cronsim applies none of its own wall-clock fix-ups.
            parts[1] = "*"
        object.__setattr__(self, "_fields", " ".join(parts))
        object.__setattr__(self, "_hourly", hourly)

    def after(self, instant: datetime) -> Iterator[datetime]:
        """The occurrences strictly after ``instant`` (see the module docstring for DST)."""
        from cronsim import CronSim  # noqa: PLC0415 - only a cron schedule pays for the cron library

        instant = to_millis(instant)
        last = instant
        if self._hourly:
            # Every real minute whose local reading matches: each matching wall-clock time
            # read at its real instants (both passes of a fall-back overlap, none inside a
            # gap), merged in real-time order. An overlap's second pass may come after later
            # wall-clock times' first passes, so instants wait in a heap until no later wall
            # time can precede them (first passes never go backwards).
            start = instant - _MAX_SHIFT
            pending: list[datetime] = []
            for naive in CronSim(self._fields, start.astimezone(self._zone).replace(tzinfo=None)):
                passes = _real_instants(naive, self._zone)
                floor = passes[0] if passes else _resolve_local(naive, self._zone)
                while pending and pending[0] < floor:
                    occurrence = heapq.heappop(pending)
                    if occurrence > last:
                        last = occurrence
                        yield occurrence
                for occurrence in passes:
                    heapq.heappush(pending, occurrence)
            return
        # Wall-clock times: enumerate them naively, then map each to its real instant.
        # The map never goes backwards, so the answers stay ascending; gap times that map
        # to the same instant (the gap's end) fire once.
        for naive in CronSim(self._fields, instant.astimezone(self._zone).replace(tzinfo=None)):
            occurrence = _resolve_local(naive, self._zone)
            if occurrence > last:
                last = occurrence
                yield occurrence

    def to_json(self) -> dict[str, Any]:
        """``{"kind": "cron", "expr", "tz", "catch_up", "catch_up_limit", "overlap"}``."""
        return {
            "kind": "cron", "expr": self.expr, "tz": self.tz, "catch_up": self.catch_up,
            "catch_up_limit": self.catch_up_limit, "overlap": self.overlap,
        }

    def describe(self) -> str:
        """``cron */5 * * * * (Europe/Warsaw)``."""
        return f"cron {self.expr} ({self.tz})"


def _interval_of(value: object) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise _invalid(
            f"an interval is a timedelta or seconds, got {type(value).__name__} {value!r:.60}",
            "pass e.g. every(timedelta(minutes=5))",
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise _invalid(f"interval must be finite, got {value!r}", "pass e.g. every(timedelta(minutes=5))")
    try:
        interval = value if isinstance(value, timedelta) else timedelta(seconds=value)
    except OverflowError as exc:
        raise _invalid(f"interval {value!r:.60} is out of range", f"pass at most {MAX_INTERVAL}") from exc
    if interval <= timedelta(0):
        raise _invalid(f"interval must be positive, got {interval}", "pass e.g. every(timedelta(minutes=5))")
    if not MIN_INTERVAL <= interval <= MAX_INTERVAL:
        raise _invalid(
            f"interval {interval} is outside {MIN_INTERVAL} .. {MAX_INTERVAL}",
            "schedulers tick about once a second; use an interval of at least one second",
        )
    return (interval // _MS) * _MS


@attrs.frozen(kw_only=True)
class Every(Trigger):
    """A fixed interval of real time aligned on an anchor; build it with :func:`every`.

    Attributes:
        interval: Time between occurrences (whole milliseconds, at least a second).
        anchor: One occurrence; the others are ``anchor + k * interval``.
    """

    interval: timedelta
    anchor: datetime = EPOCH

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "catch_up_limit", _check_policy(self.catch_up, self.catch_up_limit, self.overlap))
        object.__setattr__(self, "interval", _interval_of(self.interval))
        anchor = self.anchor
        if not isinstance(anchor, datetime) or anchor.tzinfo is None or anchor.utcoffset() is None:
            raise _invalid(
                f"anchor must be an aware datetime, got {anchor!r:.60}", "pass anchor=datetime(..., tzinfo=UTC)"
            )
        object.__setattr__(self, "anchor", to_millis(anchor))

    def _at(self, k: int) -> datetime:
        return self.anchor + k * self.interval

    def after(self, instant: datetime) -> Iterator[datetime]:
        """``anchor + k * interval`` for every ``k`` placing it after ``instant``."""
        k = (to_millis(instant) - self.anchor) // self.interval + 1
        while True:
            try:
                yield self._at(k)
            except OverflowError:
                return
            k += 1

    def latest(self, after: datetime, until: datetime, count: int) -> list[datetime]:
        """The ``count`` latest occurrences in ``(after, until]``, computed directly."""
        if count <= 0 or until <= after:
            return []
        k = (to_millis(until) - self.anchor) // self.interval
        found: list[datetime] = []
        while len(found) < count:
            occurrence = self._at(k)
            if occurrence <= after:
                break
            found.append(occurrence)
            k -= 1
        return found[::-1]

    def to_json(self) -> dict[str, Any]:
        """``{"kind": "every", "interval": seconds, "anchor": ISO, ...policies}``."""
        return {
            "kind": "every", "interval": self.interval.total_seconds(),
            "anchor": self.anchor.isoformat(timespec="milliseconds"),
            "catch_up": self.catch_up, "catch_up_limit": self.catch_up_limit, "overlap": self.overlap,
        }

    def describe(self) -> str:
        """``every 0:05:00`` (plus ``from ANCHOR`` when not the epoch)."""
        text = f"every {_short(self.interval)}"
        if self.anchor != EPOCH:
            text += f" from {self.anchor.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
        return text


def _short(interval: timedelta) -> str:
    ms = interval // _MS
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def cron(
    expr: str, *, tz: str | tzinfo = "UTC", catch_up: str = DEFAULT_CATCH_UP, catch_up_limit: int | None = None,
    overlap: bool = True,
) -> Cron:
    """A cron schedule: ``cron("*/5 * * * *", tz="Europe/Warsaw")``.

    Args:
        expr: Five fields (minute hour day-of-month month day-of-week) or an alias
            (``@yearly``, ``@monthly``, ``@weekly``, ``@daily``, ``@hourly``).
        tz: IANA zone name its wall-clock times are read in (default UTC).
        catch_up: ``skip`` (default), ``once`` or ``all``: what to fire after downtime.
        catch_up_limit: With ``all``, the most missed occurrences fired (default 10).
        overlap: ``False`` skips an occurrence while the previous job is still live.

    Refused with ``JC_SCHEDULE_INVALID``: a malformed or never-firing expression, an
    unknown zone, a bad policy.
    """
    return Cron(expr=expr, tz=tz, catch_up=catch_up, catch_up_limit=catch_up_limit, overlap=overlap)  # type: ignore[arg-type]


def every(
    interval: timedelta | float, *, anchor: datetime = EPOCH, catch_up: str = DEFAULT_CATCH_UP,
    catch_up_limit: int | None = None, overlap: bool = True,
) -> Every:
    """An interval schedule: ``every(timedelta(minutes=5))`` fires at ``anchor + k * interval``.

    Args:
        interval: A timedelta or seconds, from one second to about ten years.
        anchor: An instant the schedule is aligned on (default the Unix epoch, so five
            minutes means :00, :05, :10 ... UTC).
        catch_up: ``skip`` (default), ``once`` or ``all``.
        catch_up_limit: With ``all``, the most missed occurrences fired (default 10).
        overlap: ``False`` skips an occurrence while the previous job is still live.

    Refused with ``JC_SCHEDULE_INVALID``: a non-positive, non-finite, sub-second or
    huge interval, a naive anchor, a bad policy.
    """
    return Every(
        interval=interval, anchor=anchor, catch_up=catch_up, catch_up_limit=catch_up_limit,  # type: ignore[arg-type]
        overlap=overlap,
    )


def _trigger_from_json(data: Mapping[str, Any]) -> Cron | Every:
    kind = data.get("kind")
    policies = {
        "catch_up": data.get("catch_up", DEFAULT_CATCH_UP), "catch_up_limit": data.get("catch_up_limit"),
        "overlap": data.get("overlap", True),
    }
    if kind == "cron":
        return Cron(expr=data.get("expr"), tz=data.get("tz", "UTC"), **policies)  # type: ignore[arg-type]
    if kind == "every":
        anchor = data.get("anchor")
        try:
            when = EPOCH if anchor is None else datetime.fromisoformat(str(anchor))
        except ValueError as exc:
            raise _invalid(f"anchor {anchor!r:.60} is not an ISO time", "redeclare the schedule") from exc
        return Every(interval=data.get("interval"), anchor=when, **policies)  # type: ignore[arg-type]
    raise _invalid(f"unknown schedule kind {kind!r:.40}", 'a definition\'s "kind" is "cron" or "every"')


def schedule_key(name: str, occurrence: datetime, *, catch_up: bool = False) -> str:
    """The idempotency key of the job an occurrence enqueues: ``schedule:NAME@2030-01-01T12:00:00.000Z``.

    Operators see from a job's key which schedule and occurrence made it; a catch-up
    job (policy ``once``) ends in ``:catch-up``.
    """
    when = to_millis(occurrence).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"schedule:{name}@{when}{':catch-up' if catch_up else ''}"


@attrs.frozen(kw_only=True)
class ScheduleDefinition:
    """A declared schedule: its name, its trigger and the job each occurrence enqueues.

    It serialises into the store's ``Schedule.definition`` JSON object, so any process
    (``jobcore schedules``, a scheduler without the application's code) can compute
    its occurrences from the store alone.

    Attributes:
        name: Unique schedule name (1-150 characters).
        trigger: When it fires (:class:`Cron` or :class:`Every`) and its policies.
        job: The job name each occurrence enqueues.
        payload: The payload of each job (JSON data).
        queue: The queue of each job.
        priority: The priority of each job.
        max_attempts: Attempts of each job (``None``: the driver's default).
    """

    name: str
    trigger: Cron | Every
    job: str
    payload: Any = None
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.trigger, Cron | Every):
            raise _invalid(
                f"a schedule needs a cron(...) or every(...) trigger, got {self.trigger!r:.60}",
                "pass schedule=cron('*/5 * * * *') or schedule=every(timedelta(minutes=5))",
            )
        try:
            v.check_name(self.name, "schedule name")
            v.check_name(self.job, "job name")
            v.check_name(self.queue, "queue")
            v.check_int(self.priority, "priority", v.PRIORITY_MIN, v.PRIORITY_MAX)
            if self.max_attempts is not None:
                v.check_int(self.max_attempts, "max_attempts", 1, v.MAX_ATTEMPTS)
        except PayloadInvalid:
            raise
        except InvalidInput as exc:
            raise _invalid(f"schedule {self.name!r:.80}: {exc.cause}", exc.fix) from exc
        if len(self.name) > MAX_SCHEDULE_NAME:
            raise _invalid(
                f"schedule name is {len(self.name)} characters, more than {MAX_SCHEDULE_NAME}",
                "shorten it: each job's key is schedule:NAME@TIME",
            )
        v.encode_json(self.payload, "payload")  # JC_PAYLOAD_INVALID, as for enqueue (E03)

    def to_json(self) -> dict[str, Any]:
        """The store's ``definition``: the trigger's fields plus the job's."""
        return {
            **self.trigger.to_json(), "job": self.job, "queue": self.queue, "payload": self.payload,
            "priority": self.priority, "max_attempts": self.max_attempts,
        }

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> ScheduleDefinition:
        """Read a stored definition back; ``JC_SCHEDULE_INVALID`` when it cannot be."""
        if not isinstance(data, Mapping):
            raise _invalid(f"schedule {name!r:.80} has a definition that is not an object", "redeclare it")
        return cls(
            name=name, trigger=_trigger_from_json(data), job=data.get("job"),  # type: ignore[arg-type]
            payload=data.get("payload"), queue=data.get("queue", "default"), priority=data.get("priority", 0),
            max_attempts=data.get("max_attempts"),
        )

    def job_spec(self, occurrence: datetime, *, catch_up: bool = False) -> JobSpec:
        """The job ``occurrence`` enqueues, keyed ``schedule:NAME@TIME`` (see :func:`schedule_key`)."""
        return JobSpec(
            name=self.job, payload=self.payload, queue=self.queue, priority=self.priority,
            max_attempts=self.max_attempts, key=schedule_key(self.name, occurrence, catch_up=catch_up),
        )


@attrs.frozen(kw_only=True)
class Firing:
    """One occurrence a scheduler means to fire (from :func:`plan`) or fired.

    Attributes:
        occurrence: The occurrence (aware UTC).
        outcome: ``fired`` or ``catch_up`` as planned; as fired, what the store recorded
            (``skipped_overlap`` too), or ``None`` when the compare-and-set was lost.
        name: The schedule's name.
        job_id: The job enqueued, when one was.
        passed_over: Missed occurrences before this one that nothing fires (catch-up).
    """

    occurrence: datetime
    outcome: ScheduleOutcome | None = attrs.field(converter=attrs.converters.optional(ScheduleOutcome))
    name: str = ""
    job_id: str | None = None
    passed_over: bool = False


def plan(trigger: Trigger, watermark: datetime, now: datetime) -> list[Firing]:
    """What to fire for the occurrences in ``(watermark, now]``, oldest first (P01, P02).

    One due occurrence fires as ``fired``. Several (downtime): ``skip`` fires the
    latest as ``fired``; ``once`` fires the latest as ``catch_up``; ``all`` fires the
    most recent ``catch_up_limit`` as ``fired``. ``passed_over`` on the first firing
    says that older missed occurrences fire never.
    """
    if trigger.catch_up == "all":
        limit = trigger.catch_up_limit or DEFAULT_CATCH_UP_LIMIT
        due = trigger.latest(watermark, now, limit + 1)
        passed = len(due) > limit
        due = due[-limit:]
        return [
            Firing(occurrence=o, outcome=ScheduleOutcome.FIRED, passed_over=passed and i == 0)
            for i, o in enumerate(due)
        ]
    due = trigger.latest(watermark, now, 2)
    if not due:
        return []
    if len(due) == 1:
        return [Firing(occurrence=due[0], outcome=ScheduleOutcome.FIRED)]
    outcome = ScheduleOutcome.CATCH_UP if trigger.catch_up == "once" else ScheduleOutcome.FIRED
    return [Firing(occurrence=due[-1], outcome=outcome, passed_over=True)]

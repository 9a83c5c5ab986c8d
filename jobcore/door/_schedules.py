# Generated from _schedules_async.py by tools/unasync.py: edit that file, then run the tool.
"""The front door of periodic schedules (rules P): ``driver.schedules``, over a driver's :class:`SchedulesBackend`.

:class:`SchedulesDoor` is the :class:`~jobcore.driver.ScheduleStore` users (and
:mod:`jobcore.scheduler`) call. It checks every argument once (names, definitions,
times, the outcome, the job a firing enqueues) and refuses bad input with a coded
:class:`~jobcore.errors.JobcoreError` before the store is reached, so nothing is
written. A driver implements only :class:`SchedulesBackend`: the store's part, which
is keeping watermarks and making each firing one atomic compare-and-set with its job.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any, Protocol

from jobcore import _tracing
from jobcore import validate as v
from jobcore.records import JobSpec, Schedule, ScheduleOutcome
from jobcore.vocabulary import DEFAULT_MAX_ATTEMPTS

__all__ = ["SchedulesBackend", "SchedulesDoor"]


class SchedulesBackend(Protocol):
    """What a driver implements for periodic schedules: declarations and watermarks (P01-P03).

    The store never parses a cron expression or computes an occurrence
    (:mod:`jobcore.schedules` does, the same on every driver). Its one hard duty is P01:
    each occurrence fires at most once however many schedulers race, because the
    watermark moves only by compare-and-set, atomically with the job it enqueues.

    Every argument arrives checked by :class:`SchedulesDoor`:

    * ``name``: a str of 1 to ``MAX_NAME_LENGTH`` characters, no NUL; store it literally;
    * ``definition``: the canonical JSON text of a JSON object (keep it as text, compare
      it as text, answer it decoded in :attr:`Schedule.definition`);
    * times (``start``, ``expected``, ``occurrence``): aware UTC datetimes to the
      millisecond, ``occurrence`` after ``expected``;
    * ``job``: a checked :class:`~jobcore.validate.StoreTimedJob` whose due time and state
      the store decides on its own clock (:meth:`~jobcore.validate.StoreTimedJob.due`),
      exactly as the jobs backend receives an enqueue's jobs;
    * ``outcome``: a :class:`ScheduleOutcome`; ``overlap``: a bool.

    "Now" is the store's clock (F01). Every answer is a :class:`Schedule` as stored
    (times UTC, to the millisecond). A backend never refuses these values; a store failure
    raises a :class:`~jobcore.errors.BackendError` subclass with the original on
    ``__cause__``.
    """

    def declare(self, name: str, definition: str, start: datetime | None) -> Schedule:
        """Create schedule ``name`` or replace its definition; answer it as stored (P01).

        New: ``watermark = start`` (now when ``None``), not paused, no ``last_*`` fields,
        ``created_at = updated_at = now``. Existing: only ``definition`` changes, and
        ``updated_at`` moves to now only when the text differs; watermark, pause flag and
        ``last_*`` fields stay. Racing declarers of one name must end with one schedule.
        """
        ...

    def get(self, name: str) -> Schedule | None:
        """The schedule, or ``None``."""
        ...

    def list(self) -> builtins.list[Schedule]:
        """Every schedule, in any order (the door sorts them by name)."""
        ...

    def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: v.StoreTimedJob | None,
        outcome: ScheduleOutcome, overlap: bool,
    ) -> Schedule | None:
        """Handle one occurrence in ONE atomic step (P01, P03); answer the schedule as it then stands.

        Only while schedule ``name`` exists, is not paused and its watermark equals
        ``expected`` (else answer ``None`` and change nothing, enqueue nothing):

        * the watermark becomes ``occurrence``, ``last_fired_at`` and ``updated_at`` now;
        * with ``overlap`` false and ``last_job_id`` naming a job in a live state
          (:data:`jobcore.vocabulary.LIVE_STATES`; a pruned or removed job is not live),
          nothing is enqueued and ``last_outcome`` is ``skipped_overlap`` (P03);
        * otherwise ``last_outcome`` is ``outcome``, and ``job`` (when given) is enqueued
          as the jobs backend would enqueue it (E01; E02: a live holder of its key is
          answered instead of a new job) and ``last_job_id`` names the job enqueued or
          answered.

        The watermark move and the enqueue land together or not at all: a firer that
        dies midway leaves either nothing or an occurrence every later call of this
        backend (any process) completes once. A handled occurrence's job is never
        enqueued again, even after it finished and was pruned (R02).
        """
        ...

    def pause(self, name: str) -> Schedule | None:
        """Set the pause flag (``updated_at`` moves only if it was clear); ``None`` for an unknown name."""
        ...

    def resume(self, name: str) -> Schedule | None:
        """Clear the pause flag; ``None`` for an unknown name.

        When it was paused: ``watermark = max(watermark, now)`` (occurrences that fell
        during the pause never fire) and ``updated_at`` now, in one atomic step. A running
        schedule changes nothing.
        """
        ...

    def remove(self, name: str) -> bool:
        """Delete the schedule and its watermark; ``False`` when there was none."""
        ...


class SchedulesDoor:
    """``driver.schedules``: the checked :class:`~jobcore.driver.ScheduleStore` over a :class:`SchedulesBackend`.

    ``default_max_attempts`` is the driver's, given to jobs a firing enqueues without
    ``max_attempts`` (as ``enqueue`` gives it).
    """

    def __init__(self, backend: SchedulesBackend, *, default_max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self._backend = backend
        self._default_max_attempts = default_max_attempts

    def declare(self, name: str, definition: Any, *, start: datetime | None = None) -> Schedule:
        """:meth:`jobcore.driver.ScheduleStore.declare`."""
        key = v.check_schedule_name(name)
        text = v.check_schedule_definition(definition)
        return self._backend.declare(key, text, None if start is None else v.check_time(start, "start"))

    def get(self, name: str) -> Schedule | None:
        """:meth:`jobcore.driver.ScheduleStore.get`."""
        return self._backend.get(v.check_schedule_name(name))

    def list(self) -> builtins.list[Schedule]:
        """:meth:`jobcore.driver.ScheduleStore.list`."""
        return sorted(self._backend.list(), key=lambda s: s.name)

    def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: JobSpec | None,
        outcome: ScheduleOutcome | str = ScheduleOutcome.FIRED, overlap: bool = True,
    ) -> Schedule | None:
        """:meth:`jobcore.driver.ScheduleStore.fire`."""
        key = v.check_schedule_name(name)
        old, new, result, allow_overlap = v.check_fire(expected, occurrence, outcome, overlap)
        # checked before the compare-and-set: an invalid job is refused whoever would win
        spec = None if job is None else v.new_jobs([job], now=None, default_max_attempts=self._default_max_attempts)[0]
        hook = _tracing.hook
        if hook is None or spec is None:
            return self._backend.fire(
                key, expected=old, occurrence=new, job=spec, outcome=result, overlap=allow_overlap,
            )
        with hook.enqueue((spec,)) as span:  # the firing's job carries its enqueue span's context
            fired = self._backend.fire(
                key, expected=old, occurrence=new, job=span.jobs[0], outcome=result, overlap=allow_overlap,
            )
            span.fired(key, fired)
        return fired

    def pause(self, name: str) -> Schedule | None:
        """:meth:`jobcore.driver.ScheduleStore.pause`."""
        return self._backend.pause(v.check_schedule_name(name))

    def resume(self, name: str) -> Schedule | None:
        """:meth:`jobcore.driver.ScheduleStore.resume`."""
        return self._backend.resume(v.check_schedule_name(name))

    def remove(self, name: str) -> bool:
        """:meth:`jobcore.driver.ScheduleStore.remove`."""
        return self._backend.remove(v.check_schedule_name(name))

    def __repr__(self) -> str:
        return f"SchedulesDoor({self._backend!r})"

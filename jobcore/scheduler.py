"""The scheduler: fires each due occurrence of every stored schedule, exactly once fleet-wide.

A :class:`Scheduler` declares its registry's schedules to the store
(``driver.schedules.declare``, idempotent), then ticks: it lists the store's schedules,
computes for each the occurrences in ``(watermark, now]`` with ``now`` read from the
driver's clock, lets the catch-up policy pick what to fire (:func:`jobcore.schedules.plan`)
and fires it with the store's compare-and-set (``fire(expected=watermark, ...)``). A
lost compare-and-set means another scheduler handled that occurrence: it moves on.
So any number of schedulers may run at once, in workers (on by default) and as
``jobcore scheduler``, and restart at any moment (P01).

It fires every schedule in the store, not only the ones its own process declared: a
definition holds all a job needs (name, payload, queue, priority), so a scheduler
without the application's code still fires them. A definition it cannot read (written
by a newer jobcore, say) is logged and left alone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobcore import validate as v
from jobcore.clock import to_millis
from jobcore.current import get_job_driver
from jobcore.errors import JobcoreError
from jobcore.records import Schedule, ScheduleOutcome
from jobcore.schedules import Firing, ScheduleDefinition, plan

if TYPE_CHECKING:
    from jobcore.driver import JobDriver, ScheduleStore
    from jobcore.registry import Registry

__all__ = ["DEFAULT_TICK", "Scheduler", "describe"]

logger = logging.getLogger("jobcore.scheduler")

DEFAULT_TICK = 1.0
"""Most seconds between two ticks of a running scheduler."""

_MIN_SLEEP = 0.05


class Scheduler:
    """Fires the due occurrences of the store's schedules (rules P).

    Args:
        driver: The store (default: the process-wide one, read when first needed).
        registry: Whose declared schedules to declare to the store (default: ``@job``'s
            default registry); ``None`` with ``declare=False`` declares nothing.
        definitions: More schedules to declare, besides the registry's.
        declare: Declare the registry's schedules before the first tick.
        interval: Most seconds between ticks when running as a thread or loop; it
            sleeps less when an occurrence falls due sooner. From 1 ms to
            7 days (``JC_OPTION_INVALID`` otherwise).
        scheduler_id: Names this scheduler in logs (default ``host:pid:random``).
    """

    def __init__(
        self,
        driver: JobDriver | None = None,
        *,
        registry: Registry | None = None,
        definitions: Iterable[ScheduleDefinition] = (),
        declare: bool = True,
        interval: float = DEFAULT_TICK,
        scheduler_id: str | None = None,
    ) -> None:
        self._driver = driver
        self._registry = registry
        self._extra = list(definitions)
        self._declare = declare
        self._declared = not declare
        self.interval = max(_MIN_SLEEP, v.check_seconds(interval, "interval"))
        self.scheduler_id = scheduler_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._unreadable: set[tuple[str, str]] = set()
        self._next_due: datetime | None = None

    @property
    def driver(self) -> JobDriver:
        """The store this scheduler fires into."""
        if self._driver is None:
            self._driver = get_job_driver()
        return self._driver

    @property
    def store(self) -> ScheduleStore | None:
        """``driver.schedules``, or ``None`` for a driver without a schedule store."""
        return getattr(self.driver, "schedules", None)

    def definitions(self) -> list[ScheduleDefinition]:
        """The schedules this scheduler declares: its registry's, then those it was given."""
        registry = self._registry
        if registry is None and self._declare:
            from jobcore.registry import default_registry  # noqa: PLC0415 - registry imports this module's peers

            registry = default_registry
        found = list(registry.schedules()) if registry is not None else []
        return found + self._extra

    def declare(self) -> list[Schedule]:
        """Declare every schedule of :meth:`definitions` to the store (idempotent); answers them as stored."""
        store = self.store
        if store is None:
            return []
        declared = [store.declare(d.name, d.to_json()) for d in self.definitions()]
        self._declared = True
        return declared

    def tick(self) -> list[Firing]:
        """Handle every schedule once: fire what is due (P01-P03); answers what was fired or lost.

        Errors of the store are logged per schedule and never raised, so one broken
        schedule or a database hiccup never stops the others (or the loop).
        """
        store = self.store
        if store is None:
            return []
        if not self._declared:
            try:
                self.declare()
            except Exception:
                logger.exception("scheduler %s could not declare its schedules; retrying next tick", self.scheduler_id)
        try:
            schedules = store.list()
        except Exception:
            logger.exception("scheduler %s could not list schedules", self.scheduler_id)
            return []
        now = to_millis(self.driver.clock.now())
        fired: list[Firing] = []
        next_due: datetime | None = None
        for schedule in schedules:
            if schedule.paused:
                continue
            definition = self._read(schedule)
            if definition is None:
                continue
            try:
                self._handle(store, schedule, definition, now, fired)
                upcoming = definition.trigger.next_after(max(now, schedule.watermark))
            except Exception:
                logger.exception("scheduler %s: schedule %s failed this tick", self.scheduler_id, schedule.name)
                continue
            if upcoming is not None and (next_due is None or upcoming < next_due):
                next_due = upcoming
        self._next_due = next_due
        return fired

    def _read(self, schedule: Schedule) -> ScheduleDefinition | None:
        try:
            return ScheduleDefinition.from_json(schedule.name, schedule.definition)
        except JobcoreError as exc:
            marker = (schedule.name, repr(sorted(schedule.definition.items())) if schedule.definition else "")
            if marker not in self._unreadable:  # log once per definition, not every second
                self._unreadable.add(marker)
                logger.error(  # noqa: TRY400 - the cause says it all; a traceback adds noise
                    "schedule %s has a definition this jobcore cannot read: %s", schedule.name, exc
                )
            return None

    def _handle(
        self, store: ScheduleStore, schedule: Schedule, definition: ScheduleDefinition, now: datetime,
        done: list[Firing],
    ) -> None:
        """Fire what ``plan`` picks, each a compare-and-set from the last; appends to ``done`` as they land."""
        trigger = definition.trigger
        planned = plan(trigger, schedule.watermark, now)
        expected = schedule.watermark
        for firing in planned:
            if firing.passed_over:
                logger.warning(
                    "schedule %s missed occurrences before %s while no scheduler ran; catch_up=%s fires %s",
                    schedule.name, _iso(firing.occurrence), trigger.catch_up,
                    f"the latest {trigger.catch_up_limit}" if trigger.catch_up == "all" else "one",
                )
            catch_up = firing.outcome is ScheduleOutcome.CATCH_UP
            answer = store.fire(
                schedule.name, expected=expected, occurrence=firing.occurrence,
                job=definition.job_spec(firing.occurrence, catch_up=catch_up),
                outcome=firing.outcome or ScheduleOutcome.FIRED, overlap=trigger.overlap,
            )
            if answer is None:
                # Another scheduler moved the watermark first (or it was paused or removed).
                done.append(Firing(occurrence=firing.occurrence, outcome=None, name=schedule.name))
                logger.debug("schedule %s occurrence %s handled elsewhere", schedule.name, _iso(firing.occurrence))
                break
            expected = answer.watermark
            outcome = answer.last_outcome
            job_id = answer.last_job_id if outcome is not ScheduleOutcome.SKIPPED_OVERLAP else None
            done.append(Firing(occurrence=firing.occurrence, outcome=outcome, name=schedule.name, job_id=job_id))
            if outcome is ScheduleOutcome.SKIPPED_OVERLAP:
                logger.info(
                    "schedule %s occurrence %s skipped: its previous job %s is still live (overlap=False)",
                    schedule.name, _iso(firing.occurrence), answer.last_job_id,
                )
            else:
                logger.info(
                    "schedule %s occurrence %s %s job %s (%s)", schedule.name, _iso(firing.occurrence),
                    "caught up with" if catch_up else "enqueued", job_id, definition.job,
                )

    # -- running -----------------------------------------------------------------------

    def seconds_to_next_tick(self) -> float:
        """How long a running scheduler sleeps now: until the next occurrence, at most ``interval``."""
        next_due = self._next_due
        if next_due is None:
            return self.interval
        try:
            gap = (next_due - to_millis(self.driver.clock.now())) / timedelta(seconds=1)
        except Exception:
            return self.interval
        return min(self.interval, max(_MIN_SLEEP, gap))

    def run(self) -> None:
        """Tick until :meth:`request_stop` or :meth:`stop` (the foreground ``jobcore scheduler``)."""
        try:
            store = self.store
        except Exception:  # no process-wide driver, say: say so once rather than die in a thread
            logger.exception("scheduler %s has no driver to fire into; it does nothing", self.scheduler_id)
            return
        if store is None:
            logger.info("driver %s has no schedule store; the scheduler does nothing", type(self.driver).__name__)
            return
        logger.debug("scheduler %s started", self.scheduler_id)
        while not self._stopping.is_set():
            try:
                self.tick()
            except Exception:  # tick contains its own errors; this is the last guard of the loop
                logger.exception("scheduler %s tick failed", self.scheduler_id)
            self._stopping.wait(self.seconds_to_next_tick())
        logger.debug("scheduler %s stopped", self.scheduler_id)

    def start(self) -> Scheduler:
        """Run :meth:`run` in a daemon thread; answers itself."""
        if self._thread is not None:
            raise RuntimeError("this scheduler was already started; make a new one")
        self._thread = threading.Thread(target=self.run, name=f"jobcore-scheduler-{self.scheduler_id}", daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the thread of :meth:`start` to end; answers whether it has (``True`` when never started)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def request_stop(self) -> None:
        """Ask the loop to end after the current tick; returns at once (safe in signal handlers)."""
        self._stopping.set()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the loop and wait for its thread; answers whether it ended within ``timeout``."""
        self.request_stop()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe(schedule: Schedule, now: datetime) -> dict[str, Any]:
    """One schedule as operators see it (``jobcore schedules --json``): spec, zone, next and last occurrence."""
    try:
        definition: ScheduleDefinition | None = ScheduleDefinition.from_json(schedule.name, schedule.definition)
    except JobcoreError:
        definition = None
    upcoming = None
    if definition is not None:
        # A paused schedule resumes at "now": nothing before that fires.
        start = max(schedule.watermark, now) if schedule.paused else schedule.watermark
        upcoming = definition.trigger.next_after(start)
    trigger = None if definition is None else definition.trigger
    return {
        "name": schedule.name,
        "spec": "(unreadable definition)" if trigger is None else trigger.describe(),
        "kind": schedule.definition.get("kind"),
        "tz": getattr(trigger, "tz", None) if trigger is not None else schedule.definition.get("tz"),
        "job": schedule.definition.get("job"),
        "queue": schedule.definition.get("queue"),
        "catch_up": schedule.definition.get("catch_up"),
        "catch_up_limit": schedule.definition.get("catch_up_limit"),
        "overlap": schedule.definition.get("overlap"),
        "paused": schedule.paused,
        "next_occurrence": None if upcoming is None else _iso(upcoming),
        "last_occurrence": _iso(schedule.watermark) if schedule.last_fired_at is not None else None,
        "watermark": _iso(schedule.watermark),
        "last_fired_at": None if schedule.last_fired_at is None else _iso(schedule.last_fired_at),
        "last_outcome": None if schedule.last_outcome is None else schedule.last_outcome.value,
        "last_job_id": schedule.last_job_id,
        "created_at": _iso(schedule.created_at),
        "definition": dict(schedule.definition),
    }

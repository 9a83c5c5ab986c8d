"""Parity scenarios for periodic schedules through the public scheduler (rules P01-P05).

Each scenario declares schedules with :func:`jobcore.cron` / :func:`jobcore.every`,
runs :class:`jobcore.scheduler.Scheduler` ticks against the driver and moves the
``ManualClock`` between them; nothing sleeps. The store's own half (the
compare-and-set ``fire``) has its scenarios in ``test_schedule_store.py``; these prove
the whole: several schedulers racing, schedulers restarting (also in the middle of a
catch-up), downtime under each catch-up policy, overlap, refused declarations, and
the DST days of Europe/Warsaw in 2030 (spring forward 2030-03-31 02:00 CET -> 03:00
CEST at 01:00Z; fall back 2030-10-27 03:00 CEST -> 02:00 CET at 01:00Z).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from jobcore.parity._support import all_jobs, claim_one, refused, second_instance, together

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.errors import ScheduleInvalid
from jobcore.records import ScheduleOutcome
from jobcore.registry import Registry
from jobcore.scheduler import Scheduler
from jobcore.schedules import Cron, Every, Firing, ScheduleDefinition, cron, every

MINUTE = timedelta(minutes=1)
UTC = timezone.utc


def _z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _scheduler(driver: Any, *triggers: tuple[str, Cron | Every]) -> Scheduler:
    """A scheduler declaring ``(name, trigger)`` schedules of the job ``report`` (no global registry)."""
    definitions = [
        ScheduleDefinition(name=name, trigger=trigger, job="report", payload={"schedule": name}, queue="reports")
        for name, trigger in triggers
    ]
    return Scheduler(driver, registry=Registry(), definitions=definitions)


def _keys(driver: JobDriver) -> list[str]:
    """The keys of every job in the store, oldest enqueue first."""
    return [j.key or "" for j in reversed(all_jobs(driver))]


def _key(name: str, when: str, suffix: str = "") -> str:
    return f"schedule:{name}@{when}:00.000Z{suffix}"


def _walk(clock: ManualClock, schedulers: list[Scheduler], until: datetime, step: timedelta) -> list[Firing]:
    """Advance the clock by ``step`` up to ``until``, every scheduler ticking at each step."""
    fired: list[Firing] = []
    while clock.now() < until:
        clock.advance(min(step, until - clock.now()))
        for scheduler in schedulers:
            fired.extend(scheduler.tick())
    return fired


class _Crash(Exception):
    """The scheduler process dies here."""


class _CrashingDriver:
    """The driver as a scheduler sees it, whose process dies at the ``die_at``-th ``fire`` call.

    ``landed``: the dying call's compare-and-set reaches the store first (the process dies
    right after the store answered); otherwise it dies before the call leaves.
    """

    def __init__(self, driver: JobDriver, die_at: int, *, landed: bool) -> None:
        self.clock = driver.clock
        self.schedules = self
        self._store = driver.schedules
        self._die_at, self._landed, self._calls = die_at, landed, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def fire(self, name: str, **kwargs: Any) -> Any:
        self._calls += 1
        if self._calls == self._die_at:
            if self._landed:
                self._store.fire(name, **kwargs)
            raise _Crash("the scheduler process was killed")
        return self._store.fire(name, **kwargs)


# --- P01: one job per occurrence ---------------------------------------------------------


def test_P01_each_occurrence_enqueues_one_job_keyed_by_its_time(driver: JobDriver, clock: ManualClock) -> None:
    """A cron and an interval schedule each enqueue exactly one job per occurrence, keyed schedule:NAME@TIME."""
    scheduler = _scheduler(driver, ("five", cron("*/5 * * * *", tz="Europe/Warsaw")), ("two", every(120)))
    assert scheduler.tick() == []  # declared now: nothing at or before the declaration fires
    fired = _walk(clock, [scheduler], clock.now() + 10 * MINUTE, MINUTE)
    assert [(f.name, f.outcome) for f in fired] == [
        ("two", ScheduleOutcome.FIRED), ("two", ScheduleOutcome.FIRED), ("five", ScheduleOutcome.FIRED),
        ("two", ScheduleOutcome.FIRED), ("two", ScheduleOutcome.FIRED), ("five", ScheduleOutcome.FIRED),
        ("two", ScheduleOutcome.FIRED),
    ]
    jobs = list(reversed(all_jobs(driver)))
    assert [j.key for j in jobs] == [
        _key("two", "2030-01-01T12:02"), _key("two", "2030-01-01T12:04"), _key("five", "2030-01-01T12:05"),
        _key("two", "2030-01-01T12:06"), _key("two", "2030-01-01T12:08"), _key("five", "2030-01-01T12:10"),
        _key("two", "2030-01-01T12:10"),
    ]
    assert {(j.name, j.queue) for j in jobs} == {("report", "reports")}
    assert jobs[2].payload == {"schedule": "five"}
    assert [f.job_id for f in fired] == [j.id for j in jobs]
    assert driver.schedules.get("five").watermark == _z("2030-01-01T12:10")  # type: ignore[union-attr]


def test_P01_racing_schedulers_fire_each_occurrence_once(driver: JobDriver, clock: ManualClock) -> None:
    """Four schedulers ticking at the same instant on one store enqueue one job per occurrence."""
    schedulers = [_scheduler(driver, ("race", every(60))) for _ in range(4)]
    together(4, lambda i: schedulers[i].tick())
    for _ in range(3):
        clock.advance(MINUTE)
        answers = together(4, lambda i: schedulers[i].tick())
        landed = [f for firings in answers for f in firings if f.outcome is not None]
        assert len(landed) == 1
    assert _keys(driver) == [_key("race", f"2030-01-01T12:0{m}") for m in (1, 2, 3)]


@pytest.mark.requires("shared_store")
def test_P01_schedulers_in_separate_processes_fire_each_occurrence_once(driver: JobDriver, clock: ManualClock) -> None:
    """Schedulers on separate driver instances of one store (separate processes) enqueue one job per occurrence."""
    with second_instance(driver, clock) as second, second_instance(driver, clock) as third:
        schedulers = [_scheduler(d, ("race", every(60))) for d in (driver, second, third, driver)]
        together(4, lambda i: schedulers[i].tick())
        for _ in range(2):
            clock.advance(MINUTE)
            together(4, lambda i: schedulers[i].tick())
    assert _keys(driver) == [_key("race", "2030-01-01T12:01"), _key("race", "2030-01-01T12:02")]


def test_P01_a_restarted_scheduler_neither_refires_nor_skips(driver: JobDriver, clock: ManualClock) -> None:
    """A new scheduler instance (a restart) at the same instant fires nothing again, then goes on on time."""
    first = _scheduler(driver, ("nightly", cron("0 * * * *")))
    first.tick()
    clock.advance(hours=1)
    assert len(first.tick()) == 1
    restarted = _scheduler(driver, ("nightly", cron("0 * * * *")))
    assert restarted.tick() == []  # re-declaring keeps the watermark
    clock.advance(hours=1)
    assert [f.outcome for f in restarted.tick()] == [ScheduleOutcome.FIRED]
    assert first.tick() == []
    assert _keys(driver) == [_key("nightly", "2030-01-01T13:00"), _key("nightly", "2030-01-01T14:00")]


@pytest.mark.parametrize("landed", [True, False], ids=["after-the-store-answered", "before-the-call-left"])
def test_P01_a_scheduler_killed_mid_occurrence_is_replaced_without_a_second_job(
    driver: JobDriver, clock: ManualClock, landed: bool
) -> None:
    """A scheduler dying inside fire (before or after the store moved the watermark): its successor fires once."""
    dying = _scheduler(_CrashingDriver(driver, 1, landed=landed), ("job", every(60)))
    dying.tick()
    clock.advance(MINUTE)
    assert dying.tick() == []  # the process died inside fire
    assert len(all_jobs(driver)) == (1 if landed else 0)
    successor = _scheduler(driver, ("job", every(60)))
    successor.tick()
    assert _keys(driver) == [_key("job", "2030-01-01T12:01")]
    assert driver.schedules.get("job").watermark == _z("2030-01-01T12:01")  # type: ignore[union-attr]


def test_P01_a_finished_job_never_lets_its_occurrence_fire_again(driver: JobDriver, clock: ManualClock) -> None:
    """After the occurrence's job finished (its key freed), no scheduler fires that occurrence again."""
    scheduler = _scheduler(driver, ("once", every(60)))
    scheduler.tick()
    clock.advance(MINUTE)
    scheduler.tick()
    claimed = claim_one(driver, "reports")
    assert driver.ack(claimed.token) is not None
    for again in (scheduler, _scheduler(driver, ("once", every(60)))):
        assert again.tick() == []
    assert len(all_jobs(driver)) == 1


def test_P01_registry_schedules_reach_the_store_and_fire_from_it(driver: JobDriver, clock: ManualClock) -> None:
    """@job(schedule=...) and registry.schedule declare to the store; a scheduler without them still fires."""
    registry = Registry()

    @registry.job(name="digest", queue="mail", priority=3, schedule=every(timedelta(minutes=30)))
    def digest(payload: Any) -> None: ...

    registry.schedule(digest, cron("0 * * * *"), payload={"kind": "hourly"}, name="hourly-digest")
    declared = Scheduler(driver, registry=registry).declare()
    assert [s.name for s in declared] == ["digest", "hourly-digest"]
    assert declared[1].definition["payload"] == {"kind": "hourly"}
    clock.advance(hours=1)
    bare = Scheduler(driver, registry=Registry())  # another process, without the application's code
    assert {f.name for f in bare.tick()} == {"digest", "hourly-digest"}
    jobs = sorted(all_jobs(driver), key=lambda j: j.key or "")
    assert [(j.name, j.queue, j.priority, j.payload) for j in jobs] == [
        ("digest", "mail", 3, None), ("digest", "mail", 3, {"kind": "hourly"}),
    ]


# --- P02: catch-up after downtime ------------------------------------------------------------


def test_P02_skip_fires_only_the_latest_missed_occurrence(driver: JobDriver, clock: ManualClock) -> None:
    """Down for ten occurrences, ``skip`` enqueues one job for the latest and nothing else."""
    scheduler = _scheduler(driver, ("sync", every(60, catch_up="skip")))
    scheduler.tick()
    clock.advance(minutes=10, seconds=30)
    [firing] = scheduler.tick()
    assert (firing.occurrence, firing.outcome) == (_z("2030-01-01T12:10"), ScheduleOutcome.FIRED)
    assert scheduler.tick() == []
    clock.advance(seconds=30)
    scheduler.tick()
    assert _keys(driver) == [_key("sync", "2030-01-01T12:10"), _key("sync", "2030-01-01T12:11")]


def test_P02_once_fires_one_catch_up_marked_as_such(driver: JobDriver, clock: ManualClock) -> None:
    """``once`` enqueues one job standing for the missed occurrences, recorded catch_up and keyed :catch-up."""
    scheduler = _scheduler(driver, ("sync", cron("*/5 * * * *", catch_up="once")))
    scheduler.tick()
    clock.advance(hours=2)
    [firing] = scheduler.tick()
    assert firing.outcome is ScheduleOutcome.CATCH_UP
    schedule = driver.schedules.get("sync")
    assert schedule is not None
    assert (schedule.last_outcome, schedule.watermark) == (ScheduleOutcome.CATCH_UP, _z("2030-01-01T14:00"))
    clock.advance(minutes=5)
    scheduler.tick()  # back to normal: one occurrence due, fired as such
    assert _keys(driver) == [_key("sync", "2030-01-01T14:00", ":catch-up"), _key("sync", "2030-01-01T14:05")]
    assert driver.schedules.get("sync").last_outcome is ScheduleOutcome.FIRED  # type: ignore[union-attr]


def test_P02_all_fires_every_missed_occurrence_up_to_its_bound(driver: JobDriver, clock: ManualClock) -> None:
    """``all`` with bound 3 after 5 missed fires the latest 3, oldest first, each its own job; the older 2 never."""
    scheduler = _scheduler(driver, ("sync", every(60, catch_up="all", catch_up_limit=3)))
    scheduler.tick()
    clock.advance(minutes=5)
    fired = scheduler.tick()
    assert [(f.occurrence, f.outcome) for f in fired] == [
        (_z(f"2030-01-01T12:0{m}"), ScheduleOutcome.FIRED) for m in (3, 4, 5)
    ]
    assert scheduler.tick() == []
    assert _keys(driver) == [_key("sync", f"2030-01-01T12:0{m}") for m in (3, 4, 5)]


def test_P02_all_under_its_bound_fires_each_missed_occurrence(driver: JobDriver, clock: ManualClock) -> None:
    """``all`` with fewer missed occurrences than its bound fires every one of them."""
    scheduler = _scheduler(driver, ("sync", cron("*/10 * * * *", catch_up="all", catch_up_limit=5)))
    scheduler.tick()
    clock.advance(minutes=30)
    assert len(scheduler.tick()) == 3
    assert _keys(driver) == [_key("sync", f"2030-01-01T12:{m}") for m in ("10", "20", "30")]


def test_P02_a_scheduler_killed_mid_catch_up_is_finished_by_another(driver: JobDriver, clock: ManualClock) -> None:
    """A scheduler dying after the second of four catch-up firings: its successor fires the other two, once."""
    trigger = every(60, catch_up="all", catch_up_limit=4)
    dying = _scheduler(_CrashingDriver(driver, 3, landed=False), ("sync", trigger))
    dying.tick()
    clock.advance(minutes=4)
    assert len(dying.tick()) == 2
    rivals = [_scheduler(driver, ("sync", trigger)) for _ in range(2)]
    together(2, lambda i: rivals[i].tick())
    assert _keys(driver) == [_key("sync", f"2030-01-01T12:0{m}") for m in (1, 2, 3, 4)]


def test_P02_a_paused_schedule_fires_nothing_and_resumes_without_catching_up(
    driver: JobDriver, clock: ManualClock
) -> None:
    """Paused, nothing fires; resumed, the occurrences of the pause never fire, the next one does."""
    scheduler = _scheduler(driver, ("sync", every(60, catch_up="all")))
    scheduler.tick()
    driver.schedules.pause("sync")
    clock.advance(minutes=3)
    assert scheduler.tick() == []
    driver.schedules.resume("sync")
    assert scheduler.tick() == []
    clock.advance(MINUTE)
    scheduler.tick()
    assert _keys(driver) == [_key("sync", "2030-01-01T12:04")]


# --- P03: overlap -------------------------------------------------------------------------------


def test_P03_without_overlap_an_occurrence_is_skipped_while_the_last_job_is_live(
    driver: JobDriver, clock: ManualClock
) -> None:
    """``overlap=False``: while the previous job runs the occurrence is recorded skipped_overlap, not queued."""
    scheduler = _scheduler(driver, ("slow", every(60, overlap=False)))
    scheduler.tick()
    clock.advance(MINUTE)
    scheduler.tick()
    running = claim_one(driver, "reports")
    clock.advance(MINUTE)
    [skipped] = scheduler.tick()
    assert (skipped.outcome, skipped.job_id) == (ScheduleOutcome.SKIPPED_OVERLAP, None)
    schedule = driver.schedules.get("slow")
    assert schedule is not None
    assert (schedule.last_outcome, schedule.last_job_id) == (ScheduleOutcome.SKIPPED_OVERLAP, running.job.id)
    assert len(all_jobs(driver)) == 1
    driver.ack(running.token)
    clock.advance(MINUTE)
    [fired] = scheduler.tick()
    assert fired.outcome is ScheduleOutcome.FIRED
    assert _keys(driver) == [_key("slow", "2030-01-01T12:01"), _key("slow", "2030-01-01T12:03")]


def test_P03_with_overlap_occurrences_queue_beside_a_live_job(driver: JobDriver, clock: ManualClock) -> None:
    """``overlap=True`` (the default): a live previous job holds nothing back."""
    scheduler = _scheduler(driver, ("fast", every(60)))
    scheduler.tick()
    clock.advance(MINUTE)
    scheduler.tick()
    claim_one(driver, "reports")
    clock.advance(MINUTE)
    [fired] = scheduler.tick()
    assert fired.outcome is ScheduleOutcome.FIRED
    assert len(all_jobs(driver)) == 2


def test_P03_catching_up_without_overlap_enqueues_one_and_records_the_rest(
    driver: JobDriver, clock: ManualClock
) -> None:
    """``all`` with ``overlap=False``: the first missed occurrence enqueues, the others see it live and skip."""
    scheduler = _scheduler(driver, ("slow", every(60, catch_up="all", catch_up_limit=3, overlap=False)))
    scheduler.tick()
    clock.advance(minutes=3)
    assert [f.outcome for f in scheduler.tick()] == [
        ScheduleOutcome.FIRED, ScheduleOutcome.SKIPPED_OVERLAP, ScheduleOutcome.SKIPPED_OVERLAP,
    ]
    assert _keys(driver) == [_key("slow", "2030-01-01T12:01")]


# --- P04: invalid declarations ----------------------------------------------------------------


INVALID_DECLARATIONS = {
    "minute 61": lambda: cron("61 * * * *"),
    "four fields": lambda: cron("* * * *"),
    "february 30": lambda: cron("0 0 30 2 *"),
    "words": lambda: cron("every day"),
    "unknown zone": lambda: cron("* * * * *", tz="Europe/Atlantis"),
    "zero": lambda: every(0),
    "negative": lambda: every(-60),
    "zero delta": lambda: every(timedelta(0)),
    "nan": lambda: every(float("nan")),
    "infinite": lambda: every(float("inf")),
    "bad policy": lambda: cron("* * * * *", catch_up="sometimes"),
    "bound 0": lambda: every(60, catch_up="all", catch_up_limit=0),
}


def test_P04_invalid_declarations_are_refused_and_reach_no_store(driver: JobDriver) -> None:
    """Bad cron, unknown zone, non-positive or non-finite interval, bad policy: JC_SCHEDULE_INVALID, nothing stored."""
    registry = Registry()
    for case, declare in INVALID_DECLARATIONS.items():
        with refused("JC_SCHEDULE_INVALID"):
            registry.job(name=f"report {case}", schedule=declare())(lambda payload: None)
    assert len(registry) == 0
    assert Scheduler(driver, registry=registry).declare() == []
    assert driver.schedules.list() == []


def test_P04_a_stored_definition_that_cannot_be_read_never_fires(driver: JobDriver, clock: ManualClock) -> None:
    """A definition written around the declaration checks (bad cron, unknown zone) is left alone by schedulers."""
    driver.schedules.declare("broken", {"kind": "cron", "expr": "* * * *", "job": "report"})
    driver.schedules.declare("lost", {"kind": "cron", "expr": "* * * * *", "tz": "Nowhere/City", "job": "report"})
    scheduler = _scheduler(driver, ("fine", every(60)))
    scheduler.tick()
    clock.advance(MINUTE)
    assert [f.name for f in scheduler.tick()] == ["fine"]
    assert _keys(driver) == [_key("fine", "2030-01-01T12:01")]
    with pytest.raises(ScheduleInvalid):
        ScheduleDefinition.from_json("broken", driver.schedules.get("broken").definition)  # type: ignore[union-attr]


# --- P05: DST, Europe/Warsaw ------------------------------------------------------------------


def test_P05_spring_forward_a_daily_time_in_the_gap_fires_once_after_it(driver: JobDriver, clock: ManualClock) -> None:
    """02:30 does not exist on 2030-03-31: the daily 02:30 job fires once, at 03:00 CEST (01:00Z), then as usual."""
    clock.set(_z("2030-03-30T20:00"))
    scheduler = _scheduler(driver, ("nightly", cron("30 2 * * *", tz="Europe/Warsaw")))
    scheduler.tick()
    _walk(clock, [scheduler], _z("2030-03-31T04:00"), timedelta(minutes=20))
    assert _keys(driver) == [_key("nightly", "2030-03-31T01:00")]
    clock.set(_z("2030-04-01T00:25"))
    restarted = _scheduler(driver, ("nightly", cron("30 2 * * *", tz="Europe/Warsaw")))
    _walk(clock, [restarted], _z("2030-04-01T00:40"), timedelta(minutes=5))
    assert _keys(driver) == [_key("nightly", "2030-03-31T01:00"), _key("nightly", "2030-04-01T00:30")]


def test_P05_spring_forward_hourly_fires_every_real_hour(driver: JobDriver, clock: ManualClock) -> None:
    """``30 * * * *`` across the gap fires once per real hour: 01:30 CET, then 03:30 CEST, nothing for 02:30."""
    clock.set(_z("2030-03-30T23:45"))
    scheduler = _scheduler(driver, ("hourly", cron("30 * * * *", tz="Europe/Warsaw")))
    scheduler.tick()
    _walk(clock, [scheduler], _z("2030-03-31T02:45"), timedelta(minutes=30))
    assert _keys(driver) == [_key("hourly", f"2030-03-31T0{h}:30") for h in (0, 1, 2)]


def test_P05_fall_back_a_daily_ambiguous_time_fires_once_on_its_first_pass(
    driver: JobDriver, clock: ManualClock
) -> None:
    """02:30 happens twice on 2030-10-27: the daily job fires at 02:30 CEST (00:30Z) only, restarts included."""
    clock.set(_z("2030-10-26T22:00"))
    scheduler = _scheduler(driver, ("nightly", cron("30 2 * * *", tz="Europe/Warsaw")))
    scheduler.tick()
    _walk(clock, [scheduler], _z("2030-10-27T01:10"), timedelta(minutes=20))
    assert _keys(driver) == [_key("nightly", "2030-10-27T00:30")]
    restarted = _scheduler(driver, ("nightly", cron("30 2 * * *", tz="Europe/Warsaw")))  # at 02:10 CET
    _walk(clock, [restarted], _z("2030-10-27T03:00"), timedelta(minutes=20))
    assert _keys(driver) == [_key("nightly", "2030-10-27T00:30")]


def test_P05_fall_back_hourly_fires_both_passes_of_the_repeated_hour(driver: JobDriver, clock: ManualClock) -> None:
    """``30 * * * *`` fires at 02:30 CEST and again at 02:30 CET: two real hours, one job each."""
    clock.set(_z("2030-10-26T23:45"))
    scheduler = _scheduler(driver, ("hourly", cron("30 * * * *", tz="Europe/Warsaw")))
    scheduler.tick()
    _walk(clock, [scheduler], _z("2030-10-27T02:45"), timedelta(minutes=30))
    assert _keys(driver) == [_key("hourly", f"2030-10-27T0{h}:30") for h in (0, 1, 2)]

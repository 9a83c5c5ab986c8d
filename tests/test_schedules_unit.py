"""Schedules as pure logic: cron and interval occurrences, DST edges, catch-up planning, declarations.

No driver here except where the scheduler's own error handling is checked (the memory
driver). The DST days are Europe/Warsaw's in 2030: spring forward on 2030-03-31 at
02:00 CET (01:00Z, the clock jumps to 03:00 CEST) and fall back on 2030-10-27 at
03:00 CEST (01:00Z, the clock goes back to 02:00 CET).
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobcore.drivers.memory import MemoryDriver

from jobcore.clock import ManualClock
from jobcore.errors import PayloadInvalid, ScheduleInvalid
from jobcore.records import ScheduleOutcome
from jobcore.registry import Registry
from jobcore.scheduler import Scheduler, describe
from jobcore.schedules import (
    DEFAULT_CATCH_UP_LIMIT,
    EPOCH,
    Cron,
    Every,
    ScheduleDefinition,
    cron,
    every,
    plan,
    schedule_key,
)

UTC = timezone.utc
WARSAW = ZoneInfo("Europe/Warsaw")


def z(text: str) -> datetime:
    """A UTC instant from ``YYYY-MM-DDTHH:MM``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(text: str, fold: int = 0) -> datetime:
    """A Warsaw wall-clock time as a UTC instant."""
    return datetime.fromisoformat(text).replace(tzinfo=WARSAW, fold=fold).astimezone(UTC)


def between(trigger: Cron | Every, start: str, end: str) -> list[datetime]:
    return trigger.between(z(start), z(end), 10_000)


# -- declarations are checked when made (P04) ----------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "61 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "*/0 * * * *", "nonsense",
        "* * * *", "0 * * * * *", "", "   ", "0 0 30 2 *", "0 0 31 4,6 *", "5-1 * * * *", "@every5m",
    ],
)
def test_invalid_cron_expressions_are_refused_at_declaration(expr: str) -> None:
    """Out-of-range fields, wrong field counts, never-firing days: JC_SCHEDULE_INVALID with a fix."""
    with pytest.raises(ScheduleInvalid) as info:
        cron(expr)
    assert info.value.code == "JC_SCHEDULE_INVALID"
    assert info.value.cause
    assert info.value.fix


@pytest.mark.parametrize("tz", ["Mars/Olympus", "Europe/Warsaw/", "../etc/passwd", "", 5, "Nowhere"])
def test_unknown_time_zones_are_refused(tz: Any) -> None:
    """A zone IANA does not know is refused when declared."""
    with pytest.raises(ScheduleInvalid, match="zone"):
        cron("* * * * *", tz=tz)


@pytest.mark.parametrize(
    "interval",
    [0, -1, timedelta(0), timedelta(seconds=-5), float("nan"), float("inf"), -float("inf"), True, "5m", None,
     0.5, timedelta(milliseconds=999), timedelta(days=5000), 1e300],
)
def test_bad_intervals_are_refused(interval: Any) -> None:
    """Non-positive, non-finite, non-numeric, sub-second or huge intervals: JC_SCHEDULE_INVALID."""
    with pytest.raises(ScheduleInvalid):
        every(interval)


@pytest.mark.parametrize(
    "options",
    [
        {"catch_up": "never"}, {"catch_up": None}, {"catch_up": ["all"]},
        {"catch_up": "skip", "catch_up_limit": 5}, {"catch_up": "all", "catch_up_limit": 0},
        {"catch_up": "all", "catch_up_limit": 1001}, {"catch_up": "all", "catch_up_limit": True},
        {"catch_up": "all", "catch_up_limit": 2.0}, {"overlap": "no"}, {"overlap": 0},
    ],
)
def test_bad_policies_are_refused(options: dict[str, Any]) -> None:
    """Unknown catch-up policies, a limit without ``all`` or out of range, a non-bool overlap."""
    with pytest.raises(ScheduleInvalid):
        cron("* * * * *", **options)
    with pytest.raises(ScheduleInvalid):
        every(60, **options)


def test_naive_anchor_is_refused() -> None:
    """An interval's anchor must be an aware instant."""
    with pytest.raises(ScheduleInvalid, match="anchor"):
        every(60, anchor=datetime(2030, 1, 1))  # noqa: DTZ001 - the refusal under test


def test_valid_declarations_normalise() -> None:
    """Aliases, spacing and zone objects are accepted; the all-policy gets its default bound."""
    assert cron("  */5   *  * * * ").expr == "*/5 * * * *"
    assert cron("@daily", tz=WARSAW).tz == "Europe/Warsaw"
    assert cron("@hourly", tz=UTC).tz == "UTC"
    assert cron("0 9 * * MON-FRI").expr == "0 9 * * MON-FRI"
    assert cron("* * * * *", catch_up="all").catch_up_limit == DEFAULT_CATCH_UP_LIMIT
    assert every(timedelta(minutes=5)).interval == timedelta(minutes=5)
    assert every(90.0005).interval == timedelta(seconds=90)  # whole milliseconds
    assert every(60) == every(timedelta(seconds=60))


def test_definitions_refuse_bad_names_and_payloads() -> None:
    """Schedule, job and queue names follow the store's rules; payloads must be storable JSON."""
    trigger = cron("* * * * *")
    for bad in ("", "x" * 151, 5, "a\x00b"):
        with pytest.raises(ScheduleInvalid):
            ScheduleDefinition(name=bad, trigger=trigger, job="j")  # type: ignore[arg-type]
    with pytest.raises(ScheduleInvalid):
        ScheduleDefinition(name="n", trigger=trigger, job="")
    with pytest.raises(ScheduleInvalid):
        ScheduleDefinition(name="n", trigger=trigger, job="j", queue="")
    with pytest.raises(ScheduleInvalid):
        ScheduleDefinition(name="n", trigger=trigger, job="j", priority=2**40)
    with pytest.raises(ScheduleInvalid):
        ScheduleDefinition(name="n", trigger="* * * * *", job="j")  # type: ignore[arg-type]
    with pytest.raises(PayloadInvalid):
        ScheduleDefinition(name="n", trigger=trigger, job="j", payload={"x": float("nan")})


# -- occurrences ---------------------------------------------------------------------------


def test_cron_occurrences_are_strictly_after_the_start_and_ascending() -> None:
    """An occurrence equal to the start is not repeated; the answers ascend."""
    five = cron("*/5 * * * *")
    assert between(five, "2030-01-01T12:00", "2030-01-01T12:20") == [
        z("2030-01-01T12:05"), z("2030-01-01T12:10"), z("2030-01-01T12:15"), z("2030-01-01T12:20"),
    ]
    assert five.next_after(z("2030-01-01T12:04") + timedelta(seconds=59, milliseconds=999)) == z("2030-01-01T12:05")
    assert five.next_after(z("2030-01-01T12:05") + timedelta(milliseconds=1)) == z("2030-01-01T12:10")


def test_cron_reads_its_zone() -> None:
    """``0 9 * * *`` in Warsaw is 08:00Z in winter and 07:00Z in summer."""
    nine = cron("0 9 * * *", tz="Europe/Warsaw")
    assert nine.next_after(z("2030-01-15T00:00")) == z("2030-01-15T08:00")
    assert nine.next_after(z("2030-07-15T00:00")) == z("2030-07-15T07:00")


def test_every_is_aligned_on_the_epoch_or_its_anchor() -> None:
    """Intervals fire at anchor + k * interval, whatever the start."""
    five = every(timedelta(minutes=5))
    assert five.anchor == EPOCH
    assert between(five, "2030-01-01T12:01", "2030-01-01T12:11") == [z("2030-01-01T12:05"), z("2030-01-01T12:10")]
    odd = every(timedelta(minutes=7), anchor=z("2030-01-01T12:00") + timedelta(seconds=30))
    assert odd.next_after(z("2030-01-01T12:00")) == z("2030-01-01T12:00") + timedelta(seconds=30)
    assert odd.next_after(z("2030-01-01T12:00") + timedelta(seconds=30)) == z("2030-01-01T12:07") + timedelta(
        seconds=30
    )
    assert odd.next_after(z("2029-12-31T00:00")) < z("2029-12-31T00:07")  # before the anchor too


@pytest.mark.parametrize(
    "trigger",
    [cron("15 * * * *", tz="Europe/Warsaw"), cron("*/7 3-5 * * *", tz="Europe/Warsaw"),
     cron("30 2 * * *", tz="Europe/Warsaw"), cron("@monthly"), every(timedelta(minutes=13)),
     every(timedelta(hours=25))],
)
def test_latest_is_the_tail_of_all_occurrences(trigger: Cron | Every) -> None:
    """``latest(after, until, n)`` answers exactly the last n of ``between`` (the downtime search)."""
    for start, end in [("2030-03-29T00:00", "2030-04-02T00:00"), ("2030-10-26T20:00", "2030-10-27T05:00"),
                       ("2030-01-01T00:00", "2030-01-01T00:00"), ("2030-01-01T00:00", "2030-05-01T00:00")]:
        everything = trigger.between(z(start), z(end), 100_000)
        for n in (1, 2, 3, 50):
            assert trigger.latest(z(start), z(end), n) == everything[-n:], (start, n)


def test_latest_after_a_year_of_downtime_is_cheap() -> None:
    """A minutely schedule down for a year finds its latest occurrences without walking them all."""
    minutely = cron("* * * * *")
    found = minutely.latest(z("2029-01-01T00:00"), z("2030-01-01T00:00"), 1001)
    assert len(found) == 1001
    assert found[-1] == z("2030-01-01T00:00")
    assert found[0] == z("2030-01-01T00:00") - timedelta(minutes=1000)


# -- DST (P05), Europe/Warsaw ---------------------------------------------------------------


def test_spring_forward_a_time_in_the_gap_fires_once_at_the_gaps_end() -> None:
    """02:30 does not exist on 2030-03-31: the daily 02:30 fires once, at 03:00 CEST (01:00Z)."""
    daily = cron("30 2 * * *", tz="Europe/Warsaw")
    assert between(daily, "2030-03-29T12:00", "2030-04-01T12:00") == [
        local("2030-03-30T02:30"), z("2030-03-31T01:00"), local("2030-04-01T02:30"),
    ]
    assert local("2030-04-01T02:30") == z("2030-04-01T00:30")


def test_spring_forward_several_gap_times_collapse_into_one_firing() -> None:
    """02:00 and 02:30 both fall in the gap: one firing at 03:00; a time named at 03:00 merges with it."""
    twice = cron("0,30 2 * * *", tz="Europe/Warsaw")
    assert between(twice, "2030-03-30T12:00", "2030-03-31T12:00") == [z("2030-03-31T01:00")]
    two_and_three = cron("0 2,3 * * *", tz="Europe/Warsaw")
    assert between(two_and_three, "2030-03-30T12:00", "2030-03-31T12:00") == [z("2030-03-31T01:00")]
    every_minute_of_two = cron("* 2 * * *", tz="Europe/Warsaw")
    assert between(every_minute_of_two, "2030-03-30T12:00", "2030-03-31T12:00") == [z("2030-03-31T01:00")]


def test_spring_forward_hourly_expressions_fire_every_real_hour() -> None:
    """``30 * * * *`` fires 23 times on the 23-hour day, an hour apart in real time, none lost or doubled."""
    hourly = cron("30 * * * *", tz="Europe/Warsaw")
    day = hourly.between(local("2030-03-31T00:00"), local("2030-04-01T00:00"), 100)
    assert len(day) == 23
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(day))
    assert z("2030-03-31T00:30") in day  # 01:30 CET
    assert z("2030-03-31T01:30") in day  # 03:30 CEST: 02:30 does not exist, nothing stands in for it


def test_fall_back_an_ambiguous_time_fires_once_at_its_first_pass() -> None:
    """02:30 happens twice on 2030-10-27: the daily 02:30 fires once, at 02:30 CEST (00:30Z)."""
    daily = cron("30 2 * * *", tz="Europe/Warsaw")
    assert between(daily, "2030-10-25T12:00", "2030-10-28T12:00") == [
        local("2030-10-26T02:30"), z("2030-10-27T00:30"), local("2030-10-28T02:30"),
    ]
    assert local("2030-10-28T02:30") == z("2030-10-28T01:30")
    # A scheduler whose watermark sits in the second pass never fires the first pass again.
    assert daily.next_after(local("2030-10-27T02:10", fold=1)) == local("2030-10-28T02:30")
    assert daily.next_after(local("2030-10-27T02:30", fold=0)) == local("2030-10-28T02:30")
    stepped = cron("0 */2 * * *", tz="Europe/Warsaw")
    assert between(stepped, "2030-10-26T21:30", "2030-10-27T04:00") == [
        z("2030-10-26T22:00"), z("2030-10-27T00:00"), z("2030-10-27T03:00"),
    ]


def test_fall_back_hourly_expressions_fire_both_passes() -> None:
    """``30 * * * *`` fires 25 times on the 25-hour day: 02:30 CEST and 02:30 CET are two real hours."""
    hourly = cron("30 * * * *", tz="Europe/Warsaw")
    day = hourly.between(local("2030-10-27T00:00"), local("2030-10-28T00:00"), 100)
    assert len(day) == 25
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(day))
    assert {z("2030-10-27T00:30"), z("2030-10-27T01:30")} <= set(day)
    # From inside the second pass, only what follows in real time comes next.
    assert hourly.next_after(local("2030-10-27T02:40", fold=0)) == local("2030-10-27T02:30", fold=1)
    assert hourly.next_after(local("2030-10-27T02:40", fold=1)) == local("2030-10-27T03:30")


@pytest.mark.parametrize("expr", ["*/15 * * * *", "30 * * * *", "* * * * *", "0 * * * 0", "45 0-23 * * *"])
def test_hourly_expressions_match_every_real_instant_across_both_changes(expr: str) -> None:
    """Against brute force: the occurrences are exactly the real minutes whose local reading matches."""
    trigger = cron(expr, tz="Europe/Warsaw")
    minute_ok = {"*/15 * * * *": lambda m: m % 15 == 0, "30 * * * *": lambda m: m == 30,
                 "* * * * *": lambda m: True, "0 * * * 0": lambda m: m == 0, "45 0-23 * * *": lambda m: m == 45}[expr]
    for start, end in [("2030-03-30T20:00", "2030-03-31T04:00"), ("2030-10-26T20:00", "2030-10-27T04:00")]:
        expected = []
        t = z(start) + timedelta(minutes=1)
        while t <= z(end):
            seen = t.astimezone(WARSAW)
            if minute_ok(seen.minute) and (expr != "0 * * * 0" or seen.weekday() == 6):
                expected.append(t)
            t += timedelta(minutes=1)
        assert between(trigger, start, end) == expected


def test_a_daily_schedule_fires_once_per_local_day_across_both_changes() -> None:
    """Every local date from March to November gets exactly one firing of a 02:30 job, none twice."""
    daily = cron("30 2 * * *", tz="Europe/Warsaw")
    fired = daily.between(z("2030-03-01T00:00"), z("2030-11-30T00:00"), 1000)
    per_day = Counter(o.astimezone(WARSAW).date() for o in fired)
    assert set(per_day.values()) == {1}
    assert len(per_day) == 274  # March 1 .. November 29


def test_intervals_ignore_dst() -> None:
    """``every`` counts real time: an hour apart across both changes."""
    hourly = every(timedelta(hours=1))
    for start in ("2030-03-30T22:00", "2030-10-26T22:00"):
        found = hourly.between(z(start), z(start) + timedelta(hours=6), 100)
        assert [b - a for a, b in itertools.pairwise(found)] == [timedelta(hours=1)] * 5


# -- catch-up planning (P02) -----------------------------------------------------------------


def test_plan_fires_the_one_due_occurrence() -> None:
    """One occurrence in (watermark, now]: fired as ``fired``; the watermark itself never fires."""
    five = cron("*/5 * * * *")
    [only] = plan(five, z("2030-01-01T12:00"), z("2030-01-01T12:05"))
    assert (only.occurrence, only.outcome, only.passed_over) == (z("2030-01-01T12:05"), ScheduleOutcome.FIRED, False)
    assert plan(five, z("2030-01-01T12:05"), z("2030-01-01T12:09")) == []


@pytest.mark.parametrize("kind", ["cron", "every"])
def test_plan_after_downtime_follows_the_policy(kind: str) -> None:
    """skip: latest as fired; once: latest as catch_up; all: the latest N as fired, oldest first."""

    def make(**options: Any) -> Cron | Every:
        return cron("*/5 * * * *", **options) if kind == "cron" else every(300, **options)

    start, now = z("2030-01-01T12:00"), z("2030-01-01T13:02")  # 12 missed: 12:05 .. 13:00
    [skip] = plan(make(catch_up="skip"), start, now)
    assert (skip.occurrence, skip.outcome, skip.passed_over) == (z("2030-01-01T13:00"), ScheduleOutcome.FIRED, True)
    [once] = plan(make(catch_up="once"), start, now)
    assert (once.occurrence, once.outcome) == (z("2030-01-01T13:00"), ScheduleOutcome.CATCH_UP)
    bounded = plan(make(catch_up="all", catch_up_limit=3), start, now)
    assert [f.occurrence for f in bounded] == [z("2030-01-01T12:50"), z("2030-01-01T12:55"), z("2030-01-01T13:00")]
    assert [f.outcome for f in bounded] == [ScheduleOutcome.FIRED] * 3
    assert [f.passed_over for f in bounded] == [True, False, False]
    everything = plan(make(catch_up="all", catch_up_limit=12), start, now)
    assert len(everything) == 12
    assert not any(f.passed_over for f in everything)


def test_keys_name_the_schedule_and_the_occurrence() -> None:
    """``schedule:NAME@ISO`` in UTC with milliseconds; a catch-up ends in ``:catch-up``."""
    assert schedule_key("nightly", local("2030-03-31T03:00")) == "schedule:nightly@2030-03-31T01:00:00.000Z"
    assert schedule_key("n", z("2030-01-01T00:00"), catch_up=True) == "schedule:n@2030-01-01T00:00:00.000Z:catch-up"
    longest = ScheduleDefinition(name="x" * 150, trigger=cron("* * * * *"), job="j")
    assert len(longest.job_spec(z("2030-01-01T00:00"), catch_up=True).key or "") <= 200


def test_definitions_round_trip_through_json() -> None:
    """What is stored reads back equal; an unknown kind or a broken field is JC_SCHEDULE_INVALID."""
    for trigger in (cron("30 2 * * *", tz="Europe/Warsaw", catch_up="all", catch_up_limit=4, overlap=False),
                    every(timedelta(minutes=7), anchor=z("2030-01-01T00:00") + timedelta(milliseconds=5),
                          catch_up="once")):
        definition = ScheduleDefinition(name="s", trigger=trigger, job="j", payload={"a": [1, "x"]}, queue="q",
                                        priority=-3, max_attempts=2)
        data = definition.to_json()
        assert ScheduleDefinition.from_json("s", data) == definition
        spec = definition.job_spec(z("2030-01-01T00:05"))
        assert (spec.name, spec.payload, spec.queue, spec.priority, spec.max_attempts) == ("j", {"a": [1, "x"]},
                                                                                        "q", -3, 2)
    for broken in ({"kind": "weekly"}, {"kind": "cron", "expr": "bad", "job": "j"}, {"kind": "every", "job": "j"},
                   {"kind": "every", "interval": 60, "anchor": "yesterday", "job": "j"},
                   {"kind": "cron", "expr": "* * * * *"}):
        with pytest.raises(ScheduleInvalid):
            ScheduleDefinition.from_json("s", broken)


# -- the registry -----------------------------------------------------------------------------


def test_job_decorator_declares_schedules_with_the_jobs_defaults() -> None:
    """``@job(schedule=...)`` names schedules NAME, NAME#2...; queue, priority and attempts follow the job."""
    registry = Registry()

    @registry.job(name="report", queue="reports", priority=4, max_attempts=2,
                  schedule=[cron("0 7 * * *", tz="Europe/Warsaw"), every(timedelta(hours=6))])
    def report(payload: Any) -> None: ...

    first, second = registry.schedules()
    assert (first.name, first.job, first.queue, first.priority, first.max_attempts, first.payload) == (
        "report", "report", "reports", 4, 2, None)
    assert second.name == "report#2"
    defined = registry.schedule(report, every(60), payload={"n": 1}, name="minutely", queue="fast")
    assert (defined.queue, defined.payload) == ("fast", {"n": 1})
    assert [d.name for d in registry.schedules()] == ["minutely", "report", "report#2"]
    registry.schedule(report, every(120), payload={"n": 2}, name="minutely")  # same job: replaced
    assert registry.schedules()[0].payload == {"n": 2}
    registry.remove("report")
    assert registry.schedules() == []


def test_a_refused_schedule_registers_nothing() -> None:
    """A bad ``schedule=`` refuses the whole declaration; a name clash with another job is refused."""
    registry = Registry()
    with pytest.raises(ScheduleInvalid):
        registry.job(name="a", schedule="*/5 * * * *")(lambda p: None)
    with pytest.raises(ScheduleInvalid):
        registry.job(name="y" * 160, schedule=every(60))(lambda p: None)
    assert len(registry) == 0
    registry.job(name="b", schedule=every(60))(lambda p: None)
    c = registry.job(name="c")(lambda p: None)
    with pytest.raises(ScheduleInvalid, match="already declared"):
        registry.schedule(c, every(60), name="b")


# -- the scheduler's own robustness ------------------------------------------------------------


def test_scheduler_logs_unreadable_definitions_once_and_fires_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    """A definition this jobcore cannot read is logged once and skipped; the others still fire."""
    clock = ManualClock(z("2030-01-01T12:00"))
    driver = MemoryDriver(clock=clock)
    driver.schedules.declare("future", {"kind": "lunar", "job": "j"})
    scheduler = Scheduler(driver, registry=Registry(), definitions=[
        ScheduleDefinition(name="ok", trigger=every(60), job="j")])
    with caplog.at_level(logging.ERROR, logger="jobcore.scheduler"):
        scheduler.tick()
        clock.advance(minutes=1)
        fired = scheduler.tick()
        clock.advance(minutes=1)
        scheduler.tick()
    assert [(f.name, f.outcome) for f in fired] == [("ok", ScheduleOutcome.FIRED)]
    assert sum("future" in r.getMessage() for r in caplog.records) == 1
    shown = describe(driver.schedules.get("future"), clock.now())  # type: ignore[arg-type]
    assert shown["next_occurrence"] is None
    assert shown["spec"] == "(unreadable definition)"
    driver.close()


def test_scheduler_survives_a_failing_store(caplog: pytest.LogCaptureFixture) -> None:
    """A store error on one schedule is logged; the tick goes on and answers what it did."""
    clock = ManualClock(z("2030-01-01T12:00"))
    driver = MemoryDriver(clock=clock)
    scheduler = Scheduler(driver, registry=Registry(), definitions=[
        ScheduleDefinition(name="a", trigger=every(60), job="j"),
        ScheduleDefinition(name="b", trigger=every(60), job="j")])
    scheduler.tick()
    clock.advance(minutes=1)
    real_fire = driver.schedules.fire

    def flaky(name: str, **kwargs: Any) -> Any:
        if name == "a":
            raise RuntimeError("database went away")
        return real_fire(name, **kwargs)

    driver.schedules.fire = flaky  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="jobcore.scheduler"):
        fired = scheduler.tick()
    assert [f.name for f in fired] == ["b"]
    assert any("schedule a failed" in r.getMessage() for r in caplog.records)
    driver.close()


def test_scheduler_sleeps_until_the_next_occurrence_at_most_its_interval() -> None:
    """The loop's sleep is the time to the next due occurrence, bounded by ``interval``."""
    clock = ManualClock(z("2030-01-01T12:00") + timedelta(seconds=59, milliseconds=700))
    driver = MemoryDriver(clock=clock)
    scheduler = Scheduler(driver, registry=Registry(), interval=5.0, definitions=[
        ScheduleDefinition(name="a", trigger=every(60), job="j")])
    assert scheduler.seconds_to_next_tick() == 5.0  # nothing known yet
    scheduler.tick()
    assert scheduler.seconds_to_next_tick() == pytest.approx(0.3)
    driver.close()


def test_scheduler_without_a_schedule_store_does_nothing() -> None:
    """A third-party driver without ``schedules`` gets a scheduler that fires nothing and returns."""

    class Bare:
        clock = ManualClock()

    scheduler = Scheduler(Bare(), registry=Registry())  # type: ignore[arg-type]
    assert scheduler.tick() == []
    assert scheduler.declare() == []
    scheduler.run()  # returns at once


# -- the DST rules against brute force, in zones with odd changes ---------------------------------

ZONES = ["Europe/Warsaw", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran"]
"""Whole-hour changes at night (Warsaw, New York), a half-hour change (Lord Howe), changes at
midnight (Santiago), a zone that dropped DST (Tehran, until 2022)."""


@functools.cache
def _transitions(zone: ZoneInfo, year: int) -> list[datetime]:
    """The instants in ``year`` where ``zone``'s offset changes (to the minute)."""
    found = []
    t = datetime(year, 1, 1, tzinfo=UTC)
    step = timedelta(hours=1)
    while t.year == year:
        if (t + step).astimezone(zone).utcoffset() != t.astimezone(zone).utcoffset():
            lo, hi = t, t + step
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == lo.astimezone(zone).utcoffset():
                    lo = mid
                else:
                    hi = mid
            found.append(hi.replace(second=0, microsecond=0))
        t += step
    return found


def _expected(minutes: set[int], hours: set[int], zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """The pinned semantics, by brute force minute by minute (see the module docstring of jobcore.schedules)."""
    real = []
    t = start.replace(second=0, microsecond=0) - timedelta(hours=3)  # a first pass may lie before the window
    while t <= end + timedelta(hours=3):
        real.append(t)
        t += timedelta(minutes=1)
    if hours == set(range(24)):  # every real minute whose local reading matches
        out = [t for t in real if t.astimezone(zone).minute in minutes]
    else:  # each matching local wall-clock minute once: itself, its first pass, or the first instant after its gap
        local_first: dict[datetime, datetime] = {}
        for t in real:
            local_first.setdefault(t.astimezone(zone).replace(tzinfo=None), t)
        out = []
        naive = min(local_first)
        last_naive = max(local_first)
        while naive <= last_naive:
            if naive.minute in minutes and naive.hour in hours:
                if naive in local_first:
                    out.append(local_first[naive])
                else:  # in a gap: the first real instant reading later than it
                    out.append(next(t for t in real if t.astimezone(zone).replace(tzinfo=None) > naive))
            naive += timedelta(minutes=1)
        out = sorted(set(out))
    return [t for t in out if start < t <= end]


def _field(values: set[int], size: int) -> str:
    return "*" if values == set(range(size)) else ",".join(str(v) for v in sorted(values))


@given(
    zone_name=st.sampled_from(ZONES),
    year=st.sampled_from([2021, 2030]),
    which=st.integers(0, 1),
    minutes=st.sets(st.integers(0, 59), min_size=1, max_size=4),
    hours_kind=st.sampled_from(["every", "random", "at-the-change"]),
    data=st.data(),
    offset_minutes=st.integers(-300, 60),
)
@settings(max_examples=40, deadline=None)
def test_dst_rules_hold_against_brute_force_in_odd_zones(
    zone_name: str, year: int, which: int, minutes: set[int], hours_kind: str, data: st.DataObject,
    offset_minutes: int,
) -> None:
    """For random minute/hour fields and windows around a zone's changes, occurrences match the pinned rules."""
    zone = ZoneInfo(zone_name)
    changes = _transitions(zone, year) or [datetime(year, 6, 1, tzinfo=UTC)]
    change = changes[which % len(changes)]
    hours = set(range(24)) if hours_kind == "every" else data.draw(st.sets(st.integers(0, 23), max_size=4))
    if hours_kind == "at-the-change":
        # the local hour a gap swallows, or the hour an overlap repeats, so the edges are hit often
        hours |= {((change - timedelta(minutes=1)).astimezone(zone) + timedelta(minutes=1)).hour,
                  change.astimezone(zone).hour}
    hours = hours or {change.astimezone(zone).hour}
    start = change + timedelta(minutes=offset_minutes)
    end = start + timedelta(hours=4)
    trigger = cron(f"{_field(minutes, 60)} {_field(hours, 24)} * * *", tz=zone_name)
    assert trigger.between(start, end, 10_000) == _expected(minutes, hours, zone, start, end)

"""Parity scenarios for the schedule store (rules P01-P04, R02): ``driver.schedules``.

These drive the store directly, the way :mod:`jobcore.schedules` does: declare a
schedule, then move its watermark from ``expected`` to ``occurrence`` with ``fire``.
The store never computes occurrences, so the instants here are plain minutes after
the scenario's start. What is proven is the store's half of P01 (a compare-and-set
that enqueues exactly one job per occurrence, under racing threads, across driver
instances sharing a store, after the job finished and after it was pruned), P03's
recorded skip, pausing, and refusals that write nothing.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from jobcore.parity._support import all_jobs, claim_one, refused, second_instance, together

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import JobSpec, JobState, RetentionPolicy, Schedule, ScheduleOutcome

MINUTE = timedelta(minutes=1)
DEFINITION = {"every": 60, "job": "report", "payload": {"kind": "daily"}}
NAIVE = datetime(2030, 1, 1, 12, 0)  # noqa: DTZ001 - the point: a naive datetime


def _declared(driver: JobDriver, name: str = "reports") -> Schedule:
    return driver.schedules.declare(name, DEFINITION)


def _fire(
    driver: JobDriver, schedule: Schedule, *, job: JobSpec | None = None, overlap: bool = True, **options: Any
) -> Schedule | None:
    """Fire the occurrence one minute after ``schedule``'s watermark."""
    return driver.schedules.fire(
        schedule.name, expected=schedule.watermark, occurrence=schedule.watermark + MINUTE,
        job=JobSpec(name="report", payload={"n": 1}) if job is None else job, overlap=overlap, **options,
    )


def _state(driver: JobDriver) -> tuple[list[Schedule], list[Any]]:
    """Everything a refused call must leave alone: the schedules and the jobs."""
    return driver.schedules.list(), all_jobs(driver)


# --- declaring ------------------------------------------------------------------------


def test_P01_a_new_schedule_starts_its_watermark_at_now_or_start(driver: JobDriver, clock: ManualClock) -> None:
    """declare stores the definition as JSON with watermark now (or start), unpaused and never fired."""
    made = driver.schedules.declare("reports", {"every": 60, "args": (1, 2), "tz": "Europe/Warsaw"})
    assert made == Schedule(
        name="reports", definition={"every": 60, "args": [1, 2], "tz": "Europe/Warsaw"}, watermark=clock.now(),
        paused=False, created_at=clock.now(), updated_at=clock.now(),
    )
    start = clock.now() + timedelta(hours=2, microseconds=1500)
    later = driver.schedules.declare("later", DEFINITION, start=start)
    assert later.watermark == datetime(2030, 1, 1, 14, 0, 0, 1000, tzinfo=timezone.utc)  # ms-truncated
    assert driver.schedules.get("reports") == made
    assert driver.schedules.get("later") == later
    assert driver.schedules.get("nothing") is None


def test_P01_declaring_again_keeps_the_watermark_and_state(driver: JobDriver, clock: ManualClock) -> None:
    """Re-declaring replaces only the definition; updated_at moves only when the definition changed."""
    first = _declared(driver)
    clock.advance(minutes=5)
    fired = _fire(driver, first)
    assert fired is not None
    driver.schedules.pause("reports")
    paused = driver.schedules.get("reports")
    assert paused is not None
    clock.advance(minutes=5)
    same = driver.schedules.declare("reports", dict(DEFINITION), start=clock.now() + timedelta(days=1))
    assert same == paused  # nothing moved, not even updated_at
    clock.advance(minutes=5)
    changed = driver.schedules.declare("reports", {**DEFINITION, "every": 120})
    assert changed.definition["every"] == 120
    assert changed.updated_at == clock.now()
    assert (changed.watermark, changed.paused, changed.last_fired_at, changed.last_outcome, changed.last_job_id,
            changed.created_at) == (paused.watermark, True, paused.last_fired_at, paused.last_outcome,
                                    paused.last_job_id, first.created_at)
    assert len(driver.schedules.list()) == 1


def test_P01_racing_declarers_end_with_one_schedule(driver: JobDriver) -> None:
    """Threads declaring one name at once all succeed and leave exactly one schedule."""
    answers = together(6, lambda i: driver.schedules.declare("reports", {"every": 60}))
    assert {a.name for a in answers} == {"reports"}
    assert [s.name for s in driver.schedules.list()] == ["reports"]


def test_P01_list_answers_every_schedule_by_name(driver: JobDriver) -> None:
    """list answers every schedule sorted by name (code point order); remove forgets one."""
    for name in ("b", "a", "B", "ä", "a-1"):
        driver.schedules.declare(name, {"n": name})
    assert [s.name for s in driver.schedules.list()] == ["B", "a", "a-1", "b", "ä"]
    assert driver.schedules.remove("a") is True
    assert driver.schedules.remove("a") is False
    assert driver.schedules.get("a") is None
    assert [s.name for s in driver.schedules.list()] == ["B", "a-1", "b", "ä"]


@pytest.mark.parametrize(
    "name", ["", "x" * 201, None, 5, b"reports", "a\x00b", "\ud800", True],
    ids=["empty", "long", "none", "int", "bytes", "nul", "surrogate", "bool"],
)
def test_P04_an_invalid_schedule_name_is_refused_and_nothing_written(driver: JobDriver, name: Any) -> None:
    """declare (and every other verb) refuses a name that is not 1-200 chars of text with JC_SCHEDULE_INVALID."""
    _declared(driver)
    before = _state(driver)
    with refused("JC_SCHEDULE_INVALID"):
        driver.schedules.declare(name, DEFINITION)
    for verb in (driver.schedules.get, driver.schedules.pause, driver.schedules.resume, driver.schedules.remove):
        with refused("JC_SCHEDULE_INVALID"):
            verb(name)
    with refused("JC_SCHEDULE_INVALID"):
        driver.schedules.fire(name, expected=before[0][0].watermark, occurrence=before[0][0].watermark + MINUTE,
                              job=JobSpec(name="report"))
    assert _state(driver) == before


@pytest.mark.parametrize(
    "definition",
    [None, "every 5 minutes", [1, 2], 42, {1: "x"}, {"x": math.nan}, {"x": b"raw"}, {"x": object()},
     {"x": "\x00"}, {"at": datetime(2030, 1, 1, tzinfo=timezone.utc)}, {"x": "y" * (1024 * 1024)}],
    ids=["none", "str", "list", "int", "int_key", "nan", "bytes", "object", "nul", "datetime", "huge"],
)
def test_P04_a_definition_that_is_not_a_json_object_is_refused(driver: JobDriver, definition: Any) -> None:
    """A definition that is not a JSON object of JSON data is refused JC_SCHEDULE_INVALID; nothing is written."""
    _declared(driver)
    before = _state(driver)
    with refused("JC_SCHEDULE_INVALID"):
        driver.schedules.declare("other", definition)
    with refused("JC_SCHEDULE_INVALID"):
        driver.schedules.declare("reports", definition)
    assert _state(driver) == before


@pytest.mark.parametrize("start", [NAIVE, math.nan, "2030-01-01", datetime(1, 1, 1, tzinfo=timezone.utc)],
                         ids=["naive", "nan", "str", "year1"])
def test_P04_an_invalid_start_is_refused(driver: JobDriver, start: Any) -> None:
    """declare's start must be an aware datetime in range (JC_OPTION_INVALID); nothing is written."""
    with refused("JC_OPTION_INVALID"):
        driver.schedules.declare("reports", DEFINITION, start=start)
    assert driver.schedules.list() == []


# --- firing ---------------------------------------------------------------------------


def test_P01_fire_moves_the_watermark_and_enqueues_one_job(driver: JobDriver, clock: ManualClock) -> None:
    """A won compare-and-set moves the watermark, records the firing and enqueues the job it names."""
    schedule = _declared(driver)
    clock.advance(seconds=61)
    fired = _fire(driver, schedule, job=JobSpec(name="report", payload={"n": 1}, queue="reports", priority=3))
    assert fired is not None
    assert fired.watermark == schedule.watermark + MINUTE
    assert (fired.last_fired_at, fired.last_outcome, fired.updated_at) == (
        clock.now(), ScheduleOutcome.FIRED, clock.now())
    assert fired.last_job_id is not None
    job = driver.introspect.get(fired.last_job_id)
    assert job is not None
    assert (job.name, job.payload, job.queue, job.priority, job.state) == (
        "report", {"n": 1}, "reports", 3, JobState.READY)
    assert driver.schedules.get("reports") == fired
    assert len(all_jobs(driver)) == 1


def test_P01_a_stale_expected_watermark_answers_none_and_enqueues_nothing(driver: JobDriver) -> None:
    """fire with an expected watermark the store does not hold loses: None, nothing written."""
    schedule = _declared(driver)
    fired = _fire(driver, schedule)
    assert fired is not None
    before = _state(driver)
    assert _fire(driver, schedule) is None  # the same occurrence again
    earlier = driver.schedules.fire("reports", expected=schedule.watermark - MINUTE,
                                    occurrence=schedule.watermark + 2 * MINUTE, job=JobSpec(name="report"))
    assert earlier is None
    assert driver.schedules.fire("nothing", expected=schedule.watermark, occurrence=fired.watermark,
                                 job=JobSpec(name="report")) is None
    assert _state(driver) == before


def test_P01_watermarks_compare_at_millisecond_precision(driver: JobDriver) -> None:
    """Watermarks are kept to the millisecond: an expected instant with extra microseconds still matches."""
    start = datetime(2030, 1, 1, 12, 0, 0, 123_456, tzinfo=timezone.utc)
    schedule = driver.schedules.declare("reports", DEFINITION, start=start)
    assert schedule.watermark == datetime(2030, 1, 1, 12, 0, 0, 123_000, tzinfo=timezone.utc)
    fired = driver.schedules.fire("reports", expected=start, occurrence=start + timedelta(microseconds=1500),
                                  job=None)
    assert fired is not None
    assert fired.watermark == datetime(2030, 1, 1, 12, 0, 0, 124_000, tzinfo=timezone.utc)


def test_P01_racing_firers_enqueue_exactly_one_job(driver: JobDriver) -> None:
    """Eight threads firing the same occurrence: one wins, seven answer None, one job exists."""
    schedule = _declared(driver)
    answers = together(8, lambda i: _fire(driver, schedule, job=JobSpec(name="report", payload={"by": i})))
    winners = [a for a in answers if a is not None]
    assert len(winners) == 1
    jobs = all_jobs(driver)
    assert [j.id for j in jobs] == [winners[0].last_job_id]
    assert driver.schedules.get("reports") == winners[0]


def test_P01_racers_over_many_occurrences_enqueue_one_job_each(driver: JobDriver) -> None:
    """Four threads each handling five occurrences from what they last read: five jobs, one per occurrence."""
    _declared(driver)

    def scheduler(index: int) -> int:
        won = 0
        for _ in range(20):
            current = driver.schedules.get("reports")
            assert current is not None
            if current.watermark >= datetime(2030, 1, 1, 12, 5, tzinfo=timezone.utc):
                break
            occurrence = current.watermark + MINUTE
            job = JobSpec(name="report", payload={"at": occurrence.isoformat(), "by": index})
            won += _fire(driver, current, job=job) is not None
        return won

    assert sum(together(4, scheduler)) == 5
    payloads = sorted(j.payload["at"] for j in all_jobs(driver))
    assert payloads == [f"2030-01-01T12:0{m}:00+00:00" for m in range(1, 6)]


@pytest.mark.requires("shared_store")
def test_P01_two_driver_instances_on_one_store_fire_an_occurrence_once(driver: JobDriver, clock: ManualClock) -> None:
    """Two driver instances (two schedulers) racing on one occurrence of a shared store enqueue one job."""
    schedule = _declared(driver)
    with second_instance(driver, clock) as other:
        answers = together(6, lambda i: _fire(driver if i % 2 else other, schedule))
        winners = [a for a in answers if a is not None]
        assert len(winners) == 1
        assert other.schedules.get("reports") == winners[0] == driver.schedules.get("reports")
    assert len(all_jobs(driver)) == 1


@pytest.mark.requires("shared_store")
def test_P01_a_restarted_scheduler_sees_the_watermark(driver: JobDriver, clock: ManualClock) -> None:
    """A fresh driver instance (a restart) reads the moved watermark and cannot fire a handled occurrence."""
    schedule = _declared(driver)
    with second_instance(driver, clock) as first:
        fired = _fire(first, schedule)
    assert fired is not None
    with second_instance(driver, clock) as restarted:
        assert restarted.schedules.get("reports") == fired
        assert _fire(restarted, schedule) is None
        assert _fire(restarted, fired) is not None
    assert len(all_jobs(driver)) == 2


def test_P01_a_handled_occurrence_never_fires_again_after_its_job_finished(
    driver: JobDriver, clock: ManualClock
) -> None:
    """Once its job is done (or removed), firing a handled occurrence again answers None and enqueues nothing."""
    schedule = _declared(driver)
    fired = _fire(driver, schedule)
    assert fired is not None
    claimed = claim_one(driver)
    assert driver.ack(claimed.token, None) is not None
    clock.advance(hours=1)
    assert _fire(driver, schedule) is None
    assert driver.introspect.remove(claimed.job.id) is not None
    assert _fire(driver, schedule) is None
    assert all_jobs(driver) == []
    assert driver.schedules.get("reports") == fired


def test_P01_fire_without_a_job_moves_only_the_watermark(driver: JobDriver) -> None:
    """fire(job=None) moves the watermark and records the outcome, enqueues nothing, keeps last_job_id."""
    schedule = _declared(driver)
    first = _fire(driver, schedule)
    assert first is not None
    second = driver.schedules.fire("reports", expected=first.watermark, occurrence=first.watermark + MINUTE, job=None)
    assert second is not None
    assert second.watermark == first.watermark + MINUTE
    assert second.last_job_id == first.last_job_id
    assert len(all_jobs(driver)) == 1


def test_P01_a_fired_job_keeps_idempotency_keys(driver: JobDriver) -> None:
    """A fired job whose key a live job holds is not inserted; last_job_id names the holder (E02)."""
    holder = driver.enqueue("report", key="daily")
    fired = _fire(driver, _declared(driver), job=JobSpec(name="report", key="daily"))
    assert fired is not None
    assert fired.last_job_id == holder.id
    assert [j.id for j in all_jobs(driver)] == [holder.id]


def test_P02_a_catch_up_firing_is_recorded_as_such(driver: JobDriver) -> None:
    """fire(outcome='catch_up') jumps the watermark over missed occurrences and records catch_up."""
    schedule = _declared(driver)
    fired = driver.schedules.fire("reports", expected=schedule.watermark, occurrence=schedule.watermark + 10 * MINUTE,
                                  job=JobSpec(name="report"), outcome="catch_up")
    assert fired is not None
    assert (fired.watermark, fired.last_outcome) == (schedule.watermark + 10 * MINUTE, ScheduleOutcome.CATCH_UP)
    assert len(all_jobs(driver)) == 1


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"occurrence": "same"}, "JC_OPTION_INVALID"),
        ({"occurrence": "earlier"}, "JC_OPTION_INVALID"),
        ({"expected": NAIVE}, "JC_OPTION_INVALID"),
        ({"occurrence": NAIVE}, "JC_OPTION_INVALID"),
        ({"expected": math.inf}, "JC_OPTION_INVALID"),
        ({"job": JobSpec(name="")}, "JC_OPTION_INVALID"),
        ({"job": JobSpec(name="report", payload={"x": math.nan})}, "JC_PAYLOAD_INVALID"),
        ({"job": JobSpec(name="report", max_attempts=0)}, "JC_OPTION_INVALID"),
        ({"job": "report"}, "JC_OPTION_INVALID"),
        ({"outcome": "done"}, "JC_OPTION_INVALID"),
        ({"outcome": None}, "JC_OPTION_INVALID"),
        ({"overlap": 1}, "JC_OPTION_INVALID"),
        ({"overlap": None}, "JC_OPTION_INVALID"),
    ],
    ids=["same", "earlier", "naive_expected", "naive_occurrence", "inf", "job_name", "job_payload",
         "job_attempts", "job_str", "outcome", "outcome_none", "overlap_int", "overlap_none"],
)
def test_P01_fire_refuses_bad_arguments_before_writing(driver: JobDriver, change: dict[str, Any], code: str) -> None:
    """An occurrence not after expected, a naive time, an invalid job or outcome is refused; nothing moves."""
    schedule = _declared(driver)
    kwargs: dict[str, Any] = {
        "expected": schedule.watermark, "occurrence": schedule.watermark + MINUTE,
        "job": JobSpec(name="report"), "outcome": "fired", "overlap": True,
    }
    kwargs.update(change)
    if kwargs["occurrence"] == "same":
        kwargs["occurrence"] = schedule.watermark
    elif kwargs["occurrence"] == "earlier":
        kwargs["occurrence"] = schedule.watermark - MINUTE
    before = _state(driver)
    with refused(code):
        driver.schedules.fire("reports", **kwargs)
    assert _state(driver) == before


# --- overlap --------------------------------------------------------------------------


def test_P03_without_overlap_a_live_previous_job_skips_the_occurrence(driver: JobDriver, clock: ManualClock) -> None:
    """overlap=False while the last job is live: watermark moves, nothing is queued, skipped_overlap recorded."""
    first = _fire(driver, _declared(driver), overlap=False)
    assert first is not None
    assert first.last_outcome is ScheduleOutcome.FIRED
    claimed = claim_one(driver)  # running is live too
    clock.advance(minutes=1)
    skipped = _fire(driver, first, overlap=False)
    assert skipped is not None
    assert (skipped.watermark, skipped.last_outcome, skipped.last_fired_at, skipped.last_job_id) == (
        first.watermark + MINUTE, ScheduleOutcome.SKIPPED_OVERLAP, clock.now(), first.last_job_id)
    assert len(all_jobs(driver)) == 1
    assert driver.ack(claimed.token, None) is not None
    clock.advance(minutes=1)
    again = _fire(driver, skipped, overlap=False)
    assert again is not None
    assert again.last_outcome is ScheduleOutcome.FIRED
    assert again.last_job_id not in (None, first.last_job_id)
    assert len(all_jobs(driver)) == 2


def test_P03_with_overlap_a_live_previous_job_does_not_hold_the_next(driver: JobDriver) -> None:
    """overlap=True (the default) enqueues the next occurrence's job behind a live one."""
    first = _fire(driver, _declared(driver))
    assert first is not None
    second = _fire(driver, first)
    assert second is not None
    assert second.last_outcome is ScheduleOutcome.FIRED
    assert len(all_jobs(driver)) == 2


def test_P03_without_overlap_a_removed_previous_job_does_not_block(driver: JobDriver) -> None:
    """overlap=False with the previous job gone (removed or pruned) fires normally."""
    first = _fire(driver, _declared(driver), overlap=False)
    assert first is not None
    assert first.last_job_id is not None
    assert driver.introspect.remove(first.last_job_id) is not None
    second = _fire(driver, first, overlap=False)
    assert second is not None
    assert second.last_outcome is ScheduleOutcome.FIRED
    assert len(all_jobs(driver)) == 1


# --- pause, resume --------------------------------------------------------------------


def test_P01_a_paused_schedule_fires_nothing_and_resume_skips_the_pause(driver: JobDriver, clock: ManualClock) -> None:
    """pause stops firing (None); resume moves the watermark to now so occurrences in the pause never fire."""
    schedule = _declared(driver)
    clock.advance(minutes=1)
    paused = driver.schedules.pause("reports")
    assert paused is not None
    assert (paused.paused, paused.updated_at, paused.watermark) == (True, clock.now(), schedule.watermark)
    clock.advance(minutes=1)
    assert driver.schedules.pause("reports") == paused  # idempotent
    assert _fire(driver, schedule) is None
    assert all_jobs(driver) == []
    clock.advance(minutes=8)
    resumed = driver.schedules.resume("reports")
    assert resumed is not None
    assert (resumed.paused, resumed.watermark, resumed.updated_at) == (False, clock.now(), clock.now())
    assert _fire(driver, schedule) is None  # an occurrence inside the pause
    clock.advance(minutes=1)
    assert driver.schedules.resume("reports") == resumed  # resuming a running schedule changes nothing
    assert _fire(driver, resumed) is not None


def test_P01_resume_keeps_a_watermark_already_in_the_future(driver: JobDriver, clock: ManualClock) -> None:
    """resume takes max(watermark, now): a schedule starting later keeps its start."""
    start = clock.now() + timedelta(hours=1)
    driver.schedules.declare("reports", DEFINITION, start=start)
    assert driver.schedules.pause("reports") is not None
    resumed = driver.schedules.resume("reports")
    assert resumed is not None
    assert (resumed.paused, resumed.watermark) == (False, start)


def test_P01_unknown_names_answer_none_or_false(driver: JobDriver) -> None:
    """get, pause, resume answer None and remove False for a schedule that does not exist."""
    assert driver.schedules.get("nothing") is None
    assert driver.schedules.pause("nothing") is None
    assert driver.schedules.resume("nothing") is None
    assert driver.schedules.remove("nothing") is False
    assert driver.schedules.list() == []


# --- retention ------------------------------------------------------------------------


def test_R02_pruning_never_refires_an_occurrence(driver: JobDriver, clock: ManualClock) -> None:
    """After a fired job finished and was pruned, its occurrence still never fires again."""
    schedule = _declared(driver)
    fired = _fire(driver, schedule, overlap=False)
    assert fired is not None
    claimed = claim_one(driver)
    assert driver.ack(claimed.token, None) is not None
    clock.advance(seconds=2)
    result = driver.introspect.prune(RetentionPolicy(done=timedelta(seconds=1)))
    assert result.removed.get(JobState.DONE) == 1
    assert all_jobs(driver) == []
    assert driver.schedules.get("reports") == fired
    assert _fire(driver, schedule, overlap=False) is None
    assert all_jobs(driver) == []
    after = _fire(driver, fired, overlap=False)
    assert after is not None
    assert len(all_jobs(driver)) == 1

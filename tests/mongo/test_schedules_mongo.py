"""The MongoDB schedule store's crash safety: a scheduler killed between fire's steps.

``fire`` is three single-document writes (see ``drivers/mongo/_schedules.py``). These
tests kill the firing process between them by making a step raise, then let another
driver instance on the same database (a restarted or a second scheduler) read or fire
the schedule: the occurrence's job must exist exactly once. They also pin the document
shape: ``pending`` gone once a firing completes, names and definitions stored literally.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from jobcore.parity._support import all_jobs, claim_one, together

from jobcore.records import JobSpec, RetentionPolicy, Schedule, ScheduleOutcome

MINUTE = timedelta(minutes=1)


class Killed(BaseException):
    """Stands for the scheduler process dying mid-call (not an error anything catches)."""


def _fire(driver: MongoDriver, schedule: Schedule, **options: Any) -> Schedule | None:
    options.setdefault("job", JobSpec(name="report", payload={"n": 1}))
    return driver.schedules.fire(
        schedule.name, expected=schedule.watermark, occurrence=schedule.watermark + MINUTE, **options
    )


def _raw(driver: MongoDriver, name: str) -> dict[str, Any]:
    doc: dict[str, Any] | None = driver.schedules._backend._docs.find_one({"_id": name})
    assert doc is not None
    return doc


def _twin(make: Callable[..., Any], driver: MongoDriver) -> MongoDriver:
    """Another driver instance on the same database: a restarted or a second scheduler."""
    twin: MongoDriver = make(database=driver._jobs.database.name)
    return twin


def _kill_before_insert(monkeypatch: pytest.MonkeyPatch, driver: MongoDriver) -> None:
    def die(job: dict[str, Any]) -> int:
        raise Killed

    monkeypatch.setattr(driver.schedules._backend, "_insert_once", die)


def _kill_after_insert(monkeypatch: pytest.MonkeyPatch, driver: MongoDriver) -> None:
    insert = driver.schedules._backend._insert_once

    def die(job: dict[str, Any]) -> int:
        insert(job)
        raise Killed

    monkeypatch.setattr(driver.schedules._backend, "_insert_once", die)


@pytest.mark.parametrize("kill", [_kill_before_insert, _kill_after_insert], ids=["before_insert", "after_insert"])
def test_a_scheduler_killed_mid_firing_leaves_an_occurrence_a_restart_completes_once(
    make: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, kill: Callable[..., None]
) -> None:
    """Killed after the compare-and-set (before or after the insert): the next reader inserts the job once."""
    driver = make()
    schedule = driver.schedules.declare("reports", {"every": 60})
    kill(monkeypatch, driver)
    with pytest.raises(Killed):
        _fire(driver, schedule)
    stuck = _raw(driver, "reports")
    assert stuck["watermark"] == schedule.watermark + MINUTE
    assert "pending" in stuck
    restarted = _twin(make, driver)
    assert _fire(restarted, schedule) is None  # the handled occurrence cannot fire again
    seen = restarted.schedules.get("reports")
    assert seen is not None
    jobs = all_jobs(restarted)
    assert [j.id for j in jobs] == [seen.last_job_id]
    assert (jobs[0].name, jobs[0].payload) == ("report", {"n": 1})
    assert "pending" not in _raw(restarted, "reports")
    assert restarted.schedules.get("reports") == seen  # idempotent: nothing more happens


def test_the_next_firing_completes_an_unfinished_one_first(
    make: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second scheduler firing the next occurrence first finishes the killed one: two jobs, in order."""
    driver = make()
    schedule = driver.schedules.declare("reports", {"every": 60})
    _kill_before_insert(monkeypatch, driver)
    with pytest.raises(Killed):
        _fire(driver, schedule, job=JobSpec(name="report", payload={"n": 1}))
    other = _twin(make, driver)
    moved = schedule.watermark + MINUTE
    after = other.schedules.fire("reports", expected=moved, occurrence=moved + MINUTE,
                                 job=JobSpec(name="report", payload={"n": 2}))
    assert after is not None
    assert [j.payload for j in reversed(all_jobs(other))] == [{"n": 1}, {"n": 2}]
    assert after.last_job_id == all_jobs(other)[0].id


def test_racing_completers_insert_the_occurrence_once(
    make: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several processes finding the same unfinished firing at once complete it with one job."""
    driver = make()
    schedule = driver.schedules.declare("reports", {"every": 60})
    _kill_after_insert(monkeypatch, driver)
    with pytest.raises(Killed):
        _fire(driver, schedule)
    readers = [_twin(make, driver) for _ in range(3)]
    answers = together(6, lambda i: readers[i % 3].schedules.get("reports"))
    assert len({a.last_job_id for a in answers}) == 1
    assert len(all_jobs(driver)) == 1


def test_an_overlap_check_waits_for_the_unfinished_firing(
    make: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """overlap=False after a killed firing sees that firing's (live) job and skips the next occurrence."""
    driver = make()
    schedule = driver.schedules.declare("reports", {"every": 60})
    _kill_before_insert(monkeypatch, driver)
    with pytest.raises(Killed):
        _fire(driver, schedule, overlap=False)
    other = _twin(make, driver)
    moved = schedule.watermark + MINUTE
    skipped = other.schedules.fire("reports", expected=moved, occurrence=moved + MINUTE,
                                   job=JobSpec(name="report"), overlap=False)
    assert skipped is not None
    assert skipped.last_outcome is ScheduleOutcome.SKIPPED_OVERLAP
    assert len(all_jobs(other)) == 1


def test_a_completed_firing_is_never_inserted_again_after_pruning(driver: MongoDriver) -> None:
    """Once pending is gone, pruning the job and reading or firing the schedule inserts nothing (R02)."""
    schedule = driver.schedules.declare("reports", {"every": 60})
    fired = _fire(driver, schedule)
    assert fired is not None
    assert "pending" not in _raw(driver, "reports")
    claimed = claim_one(driver)
    assert driver.ack(claimed.token, None) is not None
    driver.clock.advance(seconds=5)
    assert driver.introspect.prune(RetentionPolicy(done=timedelta(seconds=1))).total_removed == 1
    assert driver.schedules.get("reports") == fired
    assert driver.schedules.list() == [fired]
    assert _fire(driver, schedule) is None
    assert all_jobs(driver) == []


def test_a_completer_answers_the_holder_of_an_idempotency_key(
    make: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed firing whose job's key a live job took meanwhile records that holder (E02), inserting nothing."""
    driver = make()
    schedule = driver.schedules.declare("reports", {"every": 60})
    _kill_before_insert(monkeypatch, driver)
    with pytest.raises(Killed):
        _fire(driver, schedule, job=JobSpec(name="report", key="daily"))
    holder = driver.enqueue("report", key="daily")
    seen = _twin(make, driver).schedules.get("reports")
    assert seen is not None
    assert seen.last_job_id == holder.id
    assert [j.id for j in all_jobs(driver)] == [holder.id]


def test_names_and_definitions_are_stored_literally(driver: MongoDriver) -> None:
    """Operator-looking names and definition keys are plain data: _id is the name, definition JSON text."""
    made = driver.schedules.declare("$where", {"$set": {"a.b": 1}, "$gt": None})
    assert made.definition == {"$set": {"a.b": 1}, "$gt": None}
    doc = _raw(driver, "$where")
    assert doc["definition"] == '{"$set":{"a.b":1},"$gt":null}'
    assert driver.schedules.get("$where") == made
    assert driver.schedules.pause("$where") is not None
    assert driver.schedules.remove("$where") is True
    assert driver.schedules.list() == []

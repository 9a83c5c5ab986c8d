"""Parity scenarios for rules O01-O10: operator verbs, bulk verbs, listing, stats, get, finished per minute."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from jobcore.parity._support import LEASE, all_jobs, claim_one, finished_job, refused

from jobcore import cancel_job, vocabulary
from jobcore import validate as v
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import FinishedCount, JobFilter, JobSpec, JobState

FINISHED = ["done", "failed", "dead", "cancelled"]


def _live_job(driver: JobDriver, state: str, name: str = "job", **enqueue: Any) -> Any:
    """A job in the live ``state``: ready, scheduled, running or suspended."""
    queue = enqueue.pop("queue", "live-" + state)
    job = driver.enqueue(name, queue=queue, delay=60 if state == "scheduled" else None, **enqueue)
    if state in ("running", "suspended"):
        claimed = claim_one(driver, queue)
        if state == "suspended":
            return driver.nack(claimed.token, "parked", park=True)
        return claimed.job
    return job


def _state(driver: JobDriver, job_id: str) -> JobState | None:
    job = driver.introspect.get(job_id)
    return None if job is None else job.state


# --- O01 ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["ready", "scheduled", "running", "suspended"])
def test_O01_cancel_stops_a_live_job(driver: JobDriver, clock: ManualClock, state: str) -> None:
    """cancel makes any live job cancelled, finished now, with the reason in its history."""
    job = _live_job(driver, state)
    clock.advance(seconds=1)
    got = driver.introspect.cancel(job.id, "customer asked")
    assert got is not None
    assert got.state is JobState.CANCELLED
    assert got.finished_at == clock.now()
    assert (got.lease_expires_at, got.worker_id) == (None, None)
    assert got.last_error is not None
    assert (got.last_error.type, got.last_error.message, got.last_error.at) == (
        "Cancelled", "customer asked", clock.now(),
    )
    assert driver.introspect.get(job.id) == got
    assert driver.claim([job.queue], worker_id="w9", lease=LEASE).claimed == ()


def test_O01_cancel_without_reason_records_cancelled(driver: JobDriver) -> None:
    """cancel(id) with no reason still records a Cancelled entry."""
    job = driver.enqueue("a")
    got = driver.introspect.cancel(job.id)
    assert got is not None
    assert got.last_error is not None
    assert got.last_error.type == "Cancelled"
    assert got.last_error.message


def test_O01_running_holder_token_stops_matching(driver: JobDriver) -> None:
    """Cancelling a running job kills its holder's token at once."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    cancelled = driver.introspect.cancel(job.id, "stop")
    assert driver.heartbeat(token, 60) is False
    assert driver.ack(token, "late") is None
    assert driver.introspect.get(job.id) == cancelled


@pytest.mark.parametrize("state", FINISHED)
def test_O01_finished_job_left_as_it_is(driver: JobDriver, state: str) -> None:
    """cancel of a finished job answers None and changes nothing; cancel_job raises."""
    job = finished_job(driver, state)
    assert driver.introspect.cancel(job.id, "again") is None
    assert driver.introspect.get(job.id) == job
    with refused("JC_JOB_NOT_CANCELLABLE"):
        cancel_job(job.id, "again", driver=driver)
    assert driver.introspect.get(job.id) == job


def test_O01_unknown_job_answers_none(driver: JobDriver) -> None:
    """cancel of an unknown id answers None; cancel_job turns that into JC_JOB_NOT_CANCELLABLE."""
    job = driver.enqueue("a")
    driver.introspect.remove(job.id)
    assert driver.introspect.cancel(job.id) is None
    with refused("JC_JOB_NOT_CANCELLABLE"):
        cancel_job(job.id, driver=driver)
    assert cancel_job(driver.enqueue("b").id, driver=driver).state is JobState.CANCELLED


def test_O01_bad_reason_refused(driver: JobDriver) -> None:
    """A reason that is not storable error text is refused and the job stays live."""
    job = driver.enqueue("a")
    with refused("JC_PAYLOAD_INVALID"):
        driver.introspect.cancel(job.id, "bad\x00reason")
    assert driver.introspect.get(job.id) == job


# --- O02 ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", FINISHED)
def test_O02_requeue_a_finished_job(driver: JobDriver, clock: ManualClock, state: str) -> None:
    """requeue moves a finished job to ready, due now, attempt 0, keeping its error history."""
    job = finished_job(driver, state, max_attempts=1)
    clock.advance(minutes=5)
    got = driver.introspect.requeue(job.id)
    assert got.id == job.id
    assert got.state is JobState.READY
    assert got.run_at == clock.now()
    assert got.attempt == 0
    assert (got.finished_at, got.result) == (None, None)
    assert got.errors == job.errors
    assert (got.claim_no, got.attempted_at) == (job.claim_no, job.attempted_at)
    assert driver.introspect.get(job.id) == got
    again = claim_one(driver, job.queue)
    assert (again.job.id, again.job.attempt) == (job.id, 1)


def test_O02_requeue_clears_result(driver: JobDriver) -> None:
    """A requeued done job loses its old result."""
    driver.enqueue("a")
    done = driver.ack(claim_one(driver).token, {"r": 1})
    assert done is not None
    assert driver.introspect.requeue(done.id).result is None


@pytest.mark.parametrize("state", ["ready", "scheduled", "running", "suspended"])
def test_O02_live_job_refused(driver: JobDriver, state: str) -> None:
    """requeue of a live job is refused JC_JOB_NOT_REQUEUEABLE and changes nothing."""
    job = _live_job(driver, state)
    before = driver.introspect.get(job.id)
    with refused("JC_JOB_NOT_REQUEUEABLE") as info:
        driver.introspect.requeue(job.id)
    assert info.value.cause == vocabulary.refused("requeue", job.id, JobState(state)).cause  # one wording, every driver
    assert driver.introspect.get(job.id) == before


def test_O02_key_held_by_live_job_refused(driver: JobDriver) -> None:
    """requeue of a job whose key a live job of its name holds is refused JC_JOB_DUPLICATE."""
    old = finished_job(driver, "done", name="report", key="daily")
    holder = driver.enqueue("report", key="daily")
    with refused("JC_JOB_DUPLICATE") as info:
        driver.introspect.requeue(old.id)
    assert info.value.cause == vocabulary.key_held(old.id, "daily", holder.id).cause
    assert driver.introspect.get(old.id) == old
    driver.introspect.cancel(holder.id)
    requeued = driver.introspect.requeue(old.id)
    assert requeued.state is JobState.READY
    dup = driver.enqueue("report", key="daily")
    assert (dup.duplicate, dup.id) == (True, old.id)


def test_O02_unknown_id_refused(driver: JobDriver) -> None:
    """requeue of an unknown or malformed id is refused JC_JOB_NOT_FOUND."""
    job = finished_job(driver, "done")
    driver.introspect.remove(job.id)
    for job_id in (job.id, "", "not-an-id"):
        with refused("JC_JOB_NOT_FOUND") as info:
            driver.introspect.requeue(job_id)
        assert info.value.cause == vocabulary.not_found(job_id).cause
    assert all_jobs(driver) == []


# --- O03 ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["ready", "scheduled", "suspended", *FINISHED])
def test_O03_remove_any_state_but_running(driver: JobDriver, state: str) -> None:
    """remove deletes a job in any state but running and answers it as it was."""
    job = _live_job(driver, state) if state not in FINISHED else finished_job(driver, state)
    before = driver.introspect.get(job.id)
    assert driver.introspect.remove(job.id) == before
    assert driver.introspect.get(job.id) is None
    assert all_jobs(driver) == []


def test_O03_running_job_refused(driver: JobDriver) -> None:
    """remove of a running job is refused JC_JOB_NOT_REMOVABLE and it keeps running."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    with refused("JC_JOB_NOT_REMOVABLE") as info:
        driver.introspect.remove(job.id)
    assert info.value.cause == vocabulary.refused("remove", job.id, JobState.RUNNING).cause
    assert _state(driver, job.id) is JobState.RUNNING
    assert driver.ack(token) is not None


def test_O03_unknown_id_answers_none(driver: JobDriver) -> None:
    """remove of an unknown id answers None; removing twice answers None the second time."""
    job = driver.enqueue("a")
    other = driver.enqueue("b")
    assert driver.introspect.remove(job.id) is not None
    assert driver.introspect.remove(job.id) is None
    assert driver.introspect.remove("no-such-id") is None
    assert [j.id for j in all_jobs(driver)] == [other.id]


# --- O04 ------------------------------------------------------------------------------


def test_O04_promote_makes_scheduled_due_now(driver: JobDriver, clock: ManualClock) -> None:
    """promote makes a scheduled job ready and due now, and claimable at once."""
    job = driver.enqueue("a", delay=timedelta(hours=1))
    clock.advance(seconds=5)
    got = driver.introspect.promote(job.id)
    assert (got.id, got.state, got.run_at) == (job.id, JobState.READY, clock.now())
    assert driver.introspect.get(job.id) == got
    assert claim_one(driver).job.id == job.id


def test_O04_promote_a_retry_waiting_for_backoff(driver: JobDriver, clock: ManualClock) -> None:
    """A nacked job waiting for retry_at is scheduled, so it can be promoted."""
    job = driver.enqueue("a")
    driver.nack(claim_one(driver).token, "x", retry_at=clock.now() + timedelta(hours=1))
    assert driver.introspect.promote(job.id).state is JobState.READY
    assert claim_one(driver).job.attempt == 2


@pytest.mark.parametrize("state", ["ready", "running", "suspended", *FINISHED])
def test_O04_anything_else_refused(driver: JobDriver, state: str) -> None:
    """promote of anything but a scheduled job is refused JC_JOB_NOT_PROMOTABLE."""
    job = _live_job(driver, state) if state not in FINISHED else finished_job(driver, state)
    before = driver.introspect.get(job.id)
    with refused("JC_JOB_NOT_PROMOTABLE") as info:
        driver.introspect.promote(job.id)
    assert info.value.cause == vocabulary.refused("promote", job.id, JobState(state)).cause
    assert driver.introspect.get(job.id) == before


def test_O04_unknown_id_refused(driver: JobDriver) -> None:
    """promote of an unknown id is refused JC_JOB_NOT_FOUND."""
    with refused("JC_JOB_NOT_FOUND"):
        driver.introspect.promote("no-such-id")


# --- O05 ------------------------------------------------------------------------------


def _mixed_store(driver: JobDriver) -> dict[str, list[str]]:
    """Two jobs in each of ready, scheduled, running, suspended, done, dead (queue 'mix')."""
    ids: dict[str, list[str]] = {}
    for state in ("ready", "scheduled", "running", "suspended"):
        ids[state] = [_live_job(driver, state, queue=f"mix-{state}").id for _ in range(2)]
    for state in ("done", "dead"):
        ids[state] = [finished_job(driver, state, queue="mix-finished").id for _ in range(2)]
    return ids


def test_O05_cancel_many_moves_only_live_jobs(driver: JobDriver) -> None:
    """cancel_many cancels live jobs only, whatever the filter names."""
    ids = _mixed_store(driver)
    assert driver.introspect.cancel_many(JobFilter(state=["done", "dead"])) == _bulk(0, 0)
    result = driver.introspect.cancel_many(reason="maintenance")
    assert result == _bulk(8, 0)
    for state in ("ready", "scheduled", "running", "suspended"):
        for job_id in ids[state]:
            job = driver.introspect.get(job_id)
            assert job is not None
            assert job.state is JobState.CANCELLED
            assert job.last_error is not None
            assert (job.last_error.type, job.last_error.message) == ("Cancelled", "maintenance")
    assert [_state(driver, i) for i in ids["done"] + ids["dead"]] == [
        JobState.DONE, JobState.DONE, JobState.DEAD, JobState.DEAD,
    ]


def test_O05_cancel_many_kills_running_tokens(driver: JobDriver) -> None:
    """A running job cancelled in bulk no longer answers its holder's token."""
    driver.enqueue("a")
    token = claim_one(driver).token
    assert driver.introspect.cancel_many(JobFilter(state="running")) == _bulk(1, 0)
    assert driver.heartbeat(token, 60) is False
    assert driver.ack(token, "late") is None


def test_O05_requeue_many_moves_only_finished_jobs(driver: JobDriver) -> None:
    """requeue_many requeues finished jobs only; a filter naming live states answers zero."""
    ids = _mixed_store(driver)
    assert driver.introspect.requeue_many(JobFilter(state=["ready", "running"])) == _bulk(0, 0)
    assert driver.introspect.requeue_many(spread=0) == _bulk(4, 0)
    assert {_state(driver, i) for i in ids["done"] + ids["dead"]} == {JobState.READY}
    assert [_state(driver, i) for i in ids["running"]] == [JobState.RUNNING] * 2


def test_O05_remove_many_spares_running_jobs(driver: JobDriver) -> None:
    """remove_many deletes every state but running."""
    ids = _mixed_store(driver)
    assert driver.introspect.remove_many(JobFilter(state="running")) == _bulk(0, 0)
    assert driver.introspect.remove_many() == _bulk(10, 0)
    assert sorted(j.id for j in all_jobs(driver)) == sorted(ids["running"])


def test_O05_promote_many_moves_only_scheduled_jobs(driver: JobDriver, clock: ManualClock) -> None:
    """promote_many makes scheduled jobs ready now and nothing else."""
    ids = _mixed_store(driver)
    assert driver.introspect.promote_many(JobFilter(state=["ready", "suspended", "done"])) == _bulk(0, 0)
    assert driver.introspect.promote_many() == _bulk(2, 0)
    for job_id in ids["scheduled"]:
        job = driver.introspect.get(job_id)
        assert job is not None
        assert (job.state, job.run_at) == (JobState.READY, clock.now())
    assert [_state(driver, i) for i in ids["suspended"]] == [JobState.SUSPENDED] * 2


def test_O05_filter_narrows_by_queue_name_and_state(driver: JobDriver) -> None:
    """The filter's queue, name and state narrow what the verb's guard allows."""
    a1 = driver.enqueue("alpha", queue="q1")
    a2 = driver.enqueue("alpha", queue="q2")
    b1 = driver.enqueue("beta", queue="q1")
    s1 = driver.enqueue("alpha", queue="q1", delay=60)
    assert driver.introspect.cancel_many(JobFilter(queue="q1", name="alpha", state="ready")) == _bulk(1, 0)
    assert [_state(driver, j.id) for j in (a1, a2, b1, s1)] == [
        JobState.CANCELLED, JobState.READY, JobState.READY, JobState.SCHEDULED,
    ]
    assert driver.introspect.cancel_many({"name": "alpha"}) == _bulk(2, 0)
    assert [_state(driver, j.id) for j in (a2, b1, s1)] == [JobState.CANCELLED, JobState.READY, JobState.CANCELLED]


def test_O05_limit_and_remaining_until_zero(driver: JobDriver) -> None:
    """Each call moves at most limit rows, oldest first; calling until remaining == 0 ends."""
    jobs = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(5)])
    first = driver.introspect.cancel_many(limit=2)
    assert first == _bulk(2, 3)
    assert [_state(driver, j.id) for j in jobs] == [JobState.CANCELLED] * 2 + [JobState.READY] * 3
    results = [first]
    while results[-1].remaining:
        results.append(driver.introspect.cancel_many(limit=2))
        assert len(results) < 10
    assert results[1:] == [_bulk(2, 1), _bulk(1, 0)]
    assert driver.introspect.cancel_many(limit=2) == _bulk(0, 0)


@pytest.mark.parametrize("verb", ["requeue_many", "remove_many", "promote_many"])
def test_O05_remaining_reaches_zero_for_every_verb(driver: JobDriver, verb: str) -> None:
    """requeue_many, remove_many and promote_many page down with limit too, oldest first."""
    if verb == "promote_many":
        ids = [j.id for j in driver.enqueue_many([JobSpec(name="a", delay=60) for _ in range(3)])]
    else:
        ids = [finished_job(driver, "done").id for _ in range(3)]
    before = [_state(driver, i) for i in ids]
    method = getattr(driver.introspect, verb)
    assert method(limit=2) == _bulk(2, 1)
    moved = [_state(driver, i) != was for i, was in zip(ids, before, strict=True)]
    assert moved == [True, True, False], "the two oldest rows move first"
    assert method(limit=2) == _bulk(1, 0)


def test_O05_limit_spent_only_on_movable_rows(driver: JobDriver) -> None:
    """Rows the guard refuses do not use up the limit or count as remaining."""
    running = [_live_job(driver, "running", queue="q").id for _ in range(3)]
    ready = driver.enqueue_many([JobSpec(name="a", queue="q") for _ in range(2)])
    assert driver.introspect.remove_many(JobFilter(queue="q"), limit=2) == _bulk(2, 0)
    assert all(_state(driver, j.id) is None for j in ready)
    assert [_state(driver, i) for i in running] == [JobState.RUNNING] * 3


@pytest.mark.parametrize("limit", [0, -1, v.MAX_BULK_ROWS + 1, True, 1.5, None])
@pytest.mark.parametrize("verb", ["cancel_many", "requeue_many", "remove_many", "promote_many"])
def test_O05_bad_limit_refused(driver: JobDriver, verb: str, limit: Any) -> None:
    """A bulk limit outside 1..MAX_BULK_ROWS is refused and nothing moves."""
    job = driver.enqueue("a", delay=60)
    with refused("JC_OPTION_INVALID"):
        getattr(driver.introspect, verb)(limit=limit)
    assert driver.introspect.get(job.id) == job


def test_O05_bad_filter_refused(driver: JobDriver) -> None:
    """A filter that is not a JobFilter (or its fields) is refused."""
    job = driver.enqueue("a")
    for flt in ({"colour": "red"}, "ready", {"state": "nonsense"}):
        with refused("JC_OPTION_INVALID"):
            driver.introspect.cancel_many(flt)  # type: ignore[arg-type]
    assert driver.introspect.get(job.id) == job


def _bulk(affected: int, remaining: int) -> Any:
    from jobcore.records import BulkResult  # noqa: PLC0415 - local to keep the helper next to its use

    return BulkResult(affected=affected, remaining=remaining)


# --- O06 ------------------------------------------------------------------------------


def test_O06_row_whose_key_a_live_job_holds_stays(driver: JobDriver) -> None:
    """requeue_many leaves a finished row whose key a live job of its name holds."""
    old = finished_job(driver, "dead", name="report", key="daily")
    other = finished_job(driver, "dead", name="report", key="weekly")
    driver.enqueue("report", key="daily")
    assert driver.introspect.requeue_many(JobFilter(state="dead")) == _bulk(1, 0)
    assert _state(driver, old.id) is JobState.DEAD
    assert _state(driver, other.id) is JobState.READY


def test_O06_only_oldest_of_a_shared_key_is_requeued(driver: JobDriver) -> None:
    """Of several finished rows sharing name and key, only the oldest is requeued."""
    first = finished_job(driver, "done", name="report", key="daily")
    second = finished_job(driver, "failed", name="report", key="daily")
    third = finished_job(driver, "dead", name="report", key="daily")
    other_name = finished_job(driver, "done", name="summary", key="daily")
    assert driver.introspect.requeue_many(spread=0) == _bulk(2, 0)
    assert [_state(driver, j.id) for j in (first, second, third, other_name)] == [
        JobState.READY, JobState.FAILED, JobState.DEAD, JobState.READY,
    ]
    assert driver.introspect.requeue_many() == _bulk(0, 0)


def test_O06_rows_blocked_by_keys_are_not_remaining(driver: JobDriver) -> None:
    """Rows a shared key blocks are neither moved nor counted as remaining."""
    for _ in range(3):
        finished_job(driver, "dead", name="report", key="daily")
    free = finished_job(driver, "dead", name="report", key="weekly")
    first = driver.introspect.requeue_many(limit=1, spread=0)
    assert first == _bulk(1, 1)
    assert driver.introspect.requeue_many(limit=1, spread=0) == _bulk(1, 0)
    assert _state(driver, free.id) is JobState.READY
    assert len(all_jobs(driver, JobFilter(state="dead"))) == 2


def test_O06_single_row_is_due_now(driver: JobDriver, clock: ManualClock) -> None:
    """A requeue of one row makes it ready now, whatever the spread."""
    job = finished_job(driver, "failed")
    assert driver.introspect.requeue_many(spread=timedelta(minutes=10)) == _bulk(1, 0)
    got = driver.introspect.get(job.id)
    assert got is not None
    assert (got.state, got.run_at) == (JobState.READY, clock.now())


def test_O06_explicit_spread_window(driver: JobDriver, clock: ManualClock) -> None:
    """New due times spread evenly over the window from now, oldest row first."""
    jobs = [finished_job(driver, "dead") for _ in range(4)]
    clock.advance(seconds=1)
    now = clock.now()
    window = timedelta(seconds=8)
    assert driver.introspect.requeue_many(spread=window) == _bulk(4, 0)
    got = [driver.introspect.get(j.id) for j in jobs]
    run_ats = [j.run_at for j in got if j is not None]
    assert run_ats == [now + timedelta(seconds=s) for s in (0, 2, 4, 6)]  # evenly, oldest row first
    for job in got:
        assert job is not None
        assert job.state is (JobState.READY if job.run_at <= now else JobState.SCHEDULED)
    clock.advance(window)
    assert len(driver.claim(["finishing"], worker_id="w", limit=10, lease=LEASE).claimed) == 4


def test_O06_uneven_spread_truncates_to_the_millisecond(driver: JobDriver, clock: ManualClock) -> None:
    """Row i of n is due at now + spread * i / n, truncated (not rounded) to the millisecond."""
    jobs = [finished_job(driver, "done") for _ in range(3)]
    now = clock.now()
    assert driver.introspect.requeue_many(spread=timedelta(milliseconds=1000)) == _bulk(3, 0)
    run_ats = [j.run_at for j in (driver.introspect.get(x.id) for x in jobs) if j is not None]
    assert run_ats == [now + timedelta(milliseconds=ms) for ms in (0, 333, 666)]


def test_O06_default_spread_and_zero_spread(driver: JobDriver, clock: ManualClock) -> None:
    """The default spread is 10 ms a row; spread=0 makes every row due now."""
    spread_jobs = [finished_job(driver, "done", queue="a") for _ in range(3)]
    now_jobs = [finished_job(driver, "done", queue="b") for _ in range(3)]
    now = clock.now()
    assert driver.introspect.requeue_many(JobFilter(queue="a")) == _bulk(3, 0)
    assert driver.introspect.requeue_many(JobFilter(queue="b"), spread=timedelta(0)) == _bulk(3, 0)
    spread = [j.run_at for j in (driver.introspect.get(x.id) for x in spread_jobs) if j is not None]
    assert spread == [now + timedelta(milliseconds=ms) for ms in (0, 10, 20)]  # 10 ms a row
    at_once = [driver.introspect.get(j.id) for j in now_jobs]
    assert all(j is not None and (j.state, j.run_at) == (JobState.READY, now) for j in at_once)


@pytest.mark.parametrize("spread", [-1, timedelta(hours=2), "1s"], ids=["negative", "over_an_hour", "str"])
def test_O06_bad_spread_refused(driver: JobDriver, spread: Any) -> None:
    """A negative, over-long or non-duration spread is refused and nothing moves."""
    job = finished_job(driver, "done")
    with refused("JC_OPTION_INVALID"):
        driver.introspect.requeue_many(spread=spread)
    assert driver.introspect.get(job.id) == job


# --- O07 ------------------------------------------------------------------------------


def test_O07_list_is_newest_first(driver: JobDriver) -> None:
    """list answers the newest (latest enqueued) job first."""
    jobs = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(3)])
    last = driver.enqueue("b")
    page = driver.introspect.list()
    assert [j.id for j in page.jobs] == [last.id, jobs[2].id, jobs[1].id, jobs[0].id]
    assert page.after is None


def test_O07_pages_older_then_newer(driver: JobDriver) -> None:
    """after pages to older rows, before back to newer; a short page is the last."""
    ids = [j.id for j in driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(5)])][::-1]
    first = driver.introspect.list(limit=2)
    assert [j.id for j in first.jobs] == ids[0:2]
    assert first.after is not None
    assert first.before is None
    second = driver.introspect.list(limit=2, after=first.after)
    assert [j.id for j in second.jobs] == ids[2:4]
    assert second.after is not None
    assert second.before is not None
    third = driver.introspect.list(limit=2, after=second.after)
    assert [j.id for j in third.jobs] == ids[4:5]
    assert third.after is None
    back = driver.introspect.list(limit=2, before=second.before)
    assert [j.id for j in back.jobs] == ids[0:2]
    assert back.before is None
    assert back.after is not None
    assert [j.id for j in driver.introspect.list(limit=2, after=back.after).jobs] == ids[2:4]


def test_O07_inserts_while_paging_never_repeat_or_skip(driver: JobDriver) -> None:
    """Rows inserted mid-paging show only on the newer side; older pages cover the start exactly once."""
    original = [j.id for j in driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(7)])]
    seen: list[str] = []
    page = driver.introspect.list(limit=3)
    seen.extend(j.id for j in page.jobs)
    inserted = [driver.enqueue("new", i).id for i in range(4)]
    while page.after is not None:
        page = driver.introspect.list(limit=3, after=page.after)
        seen.extend(j.id for j in page.jobs)
        driver.enqueue("newer")
    assert seen == original[::-1]
    assert not set(inserted) & set(seen)
    second = driver.introspect.list(limit=3, after=driver.introspect.list(limit=3).after)
    assert second.before is not None
    newer = driver.introspect.list(limit=3, before=second.before)
    assert all(j.id not in original for j in newer.jobs)


def test_O07_requeue_keeps_list_position(driver: JobDriver) -> None:
    """List order is enqueue order: a requeued or retried job keeps its place."""
    first = driver.enqueue("a")
    second = driver.enqueue("b")
    driver.ack(claim_one(driver).token)
    driver.introspect.requeue(first.id)
    third = driver.enqueue("c")
    assert [j.id for j in driver.introspect.list().jobs] == [third.id, second.id, first.id]


def test_O07_cursor_survives_removal_of_its_row(driver: JobDriver) -> None:
    """A cursor stays valid after the row it was taken at is removed."""
    ids = [j.id for j in driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(5)])][::-1]
    first = driver.introspect.list(limit=2)
    assert first.after is not None
    driver.introspect.remove(ids[1])
    after = driver.introspect.list(limit=2, after=first.after)
    assert [j.id for j in after.jobs] == ids[2:4]
    assert after.before is not None
    driver.introspect.remove(ids[2])
    back = driver.introspect.list(limit=2, before=after.before)
    assert [j.id for j in back.jobs] == ids[0:1]


def test_O07_filters(driver: JobDriver, clock: ManualClock) -> None:
    """queue, name, state, id_prefix, created_from (inclusive) and created_to (exclusive) narrow the list."""
    t0 = clock.now()
    a = driver.enqueue("alpha", queue="q1")
    clock.advance(seconds=1)
    t1 = clock.now()
    b = driver.enqueue("beta", queue="q2")
    c = driver.enqueue("alpha", queue="q2", delay=60)
    clock.advance(seconds=1)
    t2 = clock.now()
    d = finished_job(driver, "done", name="alpha", queue="q1")

    def ids(**fields: Any) -> list[str]:
        return [j.id for j in driver.introspect.list(JobFilter(**fields)).jobs]

    assert ids(queue="q2") == [c.id, b.id]
    assert ids(name="alpha") == [d.id, c.id, a.id]
    assert ids(state="scheduled") == [c.id]
    assert ids(state=["ready", JobState.DONE]) == [d.id, b.id, a.id]
    assert ids(created_from=t1) == [d.id, c.id, b.id]
    assert ids(created_to=t1) == [a.id]
    assert ids(created_from=t1, created_to=t2) == [c.id, b.id]
    assert ids(created_from=t0, name="alpha", queue="q1", state="done") == [d.id]
    assert ids(id_prefix=b.id) == [j for j in [d.id, c.id, b.id, a.id] if j.startswith(b.id)]
    assert b.id in ids(id_prefix=b.id)
    assert ids(id_prefix="zz-no-id-starts-like-this") == []
    assert ids(id_prefix="") == [d.id, c.id, b.id, a.id]
    assert ids(created_from=t2, created_to=t1) == []
    assert [j.id for j in driver.introspect.list({"queue": "q1"}).jobs] == [d.id, a.id]


def test_O07_filtered_paging(driver: JobDriver) -> None:
    """Cursors page within the filter."""
    for i in range(6):
        driver.enqueue("even" if i % 2 == 0 else "odd", i)
    first = driver.introspect.list(JobFilter(name="even"), limit=2)
    assert [j.payload for j in first.jobs] == [4, 2]
    assert first.after is not None
    second = driver.introspect.list(JobFilter(name="even"), limit=2, after=first.after)
    assert [j.payload for j in second.jobs] == [0]
    assert second.after is None


def test_O07_default_page_is_100(driver: JobDriver) -> None:
    """Without a limit a page holds 100 jobs; 200 is the largest page."""
    driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(101)])
    page = driver.introspect.list()
    assert len(page.jobs) == v.DEFAULT_PAGE == 100
    assert page.after is not None
    assert len(driver.introspect.list(limit=200).jobs) == 101
    assert [j.payload for j in driver.introspect.list(after=page.after).jobs] == [0]


@pytest.mark.parametrize("limit", [0, -1, v.MAX_PAGE + 1, True, 2.0, None], ids=repr)
def test_O07_bad_limit_refused(driver: JobDriver, limit: Any) -> None:
    """A page size outside 1..200 is refused JC_PAGE_INVALID, naming limit."""
    driver.enqueue("a")
    with refused("JC_PAGE_INVALID") as info:
        driver.introspect.list(limit=limit)
    assert "limit" in info.value.cause


def test_O07_both_cursors_refused(driver: JobDriver) -> None:
    """after and before together are refused JC_PAGE_INVALID."""
    driver.enqueue_many([JobSpec(name="a") for _ in range(5)])
    first = driver.introspect.list(limit=2)
    second = driver.introspect.list(limit=2, after=first.after)
    with refused("JC_PAGE_INVALID") as info:
        driver.introspect.list(limit=2, after=second.after, before=second.before)
    assert "after" in info.value.cause
    assert "before" in info.value.cause


@pytest.mark.parametrize("which", ["after", "before"])
def test_O07_forged_cursor_refused(driver: JobDriver, which: str) -> None:
    """A cursor no page produced (made up, edited, or an id) is refused, naming the argument."""
    jobs = driver.enqueue_many([JobSpec(name="a") for _ in range(3)])
    real = driver.introspect.list(limit=1).after
    assert real is not None
    edited = real[:-1] + ("0" if real[-1] != "0" else "1")
    for forged in ("garbage", "", edited, real + "x", jobs[0].id, "c1.000000"):
        with refused("JC_PAGE_INVALID") as info:
            driver.introspect.list(limit=2, **{which: forged})
        assert which in info.value.cause


# --- O08 ------------------------------------------------------------------------------


def test_O08_stats_counts_per_queue_and_state(driver: JobDriver) -> None:
    """stats counts jobs per (queue, state); Stats.count sums over queues."""
    driver.enqueue_many([JobSpec(name="a", queue="q1"), JobSpec(name="a", queue="q1")])
    driver.enqueue("a", queue="q2", delay=60)
    finished_job(driver, "dead", queue="q2")
    finished_job(driver, "done", queue="q1")
    stats = driver.introspect.stats()
    assert {q: {JobState(s): n for s, n in per.items()} for q, per in stats.counts.items()} == {
        "q1": {JobState.READY: 2, JobState.DONE: 1},
        "q2": {JobState.SCHEDULED: 1, JobState.DEAD: 1},
    }
    assert stats.count("ready") == 2
    assert stats.count(JobState.DEAD, "q2") == 1
    assert stats.count("running") == 0


def test_O08_oldest_due_age_per_queue(driver: JobDriver, clock: ManualClock) -> None:
    """The age of the oldest due ready/scheduled job, per queue; none for queues without one."""
    driver.enqueue("a", queue="q1")
    clock.advance(seconds=5)
    driver.enqueue("a", queue="q1")
    driver.enqueue("a", queue="q2", run_at=clock.now() - timedelta(seconds=30))
    driver.enqueue("a", queue="q3", delay=60)
    driver.enqueue("a", queue="q4")
    claim_one(driver, "q4")
    clock.advance(seconds=2)
    stats = driver.introspect.stats()
    assert dict(stats.oldest_due_age) == {"q1": timedelta(seconds=7), "q2": timedelta(seconds=32)}
    clock.advance(seconds=60)
    later = driver.introspect.stats()
    assert later.oldest_due_age["q3"] == timedelta(seconds=2)


def test_O08_empty_store_stats(driver: JobDriver) -> None:
    """An empty store has no counts and no ages."""
    stats = driver.introspect.stats()
    assert (dict(stats.counts), dict(stats.oldest_due_age)) == ({}, {})


def test_O08_dead_letters_newest_first(driver: JobDriver, clock: ManualClock) -> None:
    """dead_letters lists dead jobs, most recently finished first, by queue, up to limit."""
    first = finished_job(driver, "dead", queue="q1")
    clock.advance(seconds=1)
    second = finished_job(driver, "dead", queue="q2")
    clock.advance(seconds=1)
    third = finished_job(driver, "dead", queue="q1")
    finished_job(driver, "failed", queue="q1")
    finished_job(driver, "done", queue="q1")
    assert [j.id for j in driver.introspect.dead_letters()] == [third.id, second.id, first.id]
    assert [j.id for j in driver.introspect.dead_letters("q1")] == [third.id, first.id]
    assert [j.id for j in driver.introspect.dead_letters(limit=1)] == [third.id]
    assert driver.introspect.dead_letters("nowhere") == []
    assert driver.introspect.dead_letters()[0] == driver.introspect.get(third.id)
    driver.introspect.requeue(second.id)
    assert [j.id for j in driver.introspect.dead_letters()] == [third.id, first.id]


@pytest.mark.parametrize("limit", [0, v.MAX_PAGE + 1, True])
def test_O08_dead_letters_bad_limit_refused(driver: JobDriver, limit: Any) -> None:
    """dead_letters' limit is 1..200."""
    with refused("JC_OPTION_INVALID"):
        driver.introspect.dead_letters(limit=limit)


# --- O09 ------------------------------------------------------------------------------


def test_O09_get_answers_the_job_or_none(driver: JobDriver) -> None:
    """get answers the stored job, and None once it is gone."""
    job = driver.enqueue("a", {"p": 1})
    assert driver.introspect.get(job.id) == job
    driver.introspect.remove(job.id)
    assert driver.introspect.get(job.id) is None


MALFORMED_IDS = [
    "", " ", "0", "-1", "1.0", "1e3", "0x1", " 1", "1 ", "\uff11", "\u00b2", "\u0663", "99999999999999999999999999",
    "x" * 500, "\x00", "a\x00b", "'; DROP TABLE jobs; --", '{"$gt": ""}', "$where", "ffffffffffffffffffffffff",
    "000000000000000000000000", "\ud800",
]


@pytest.mark.parametrize("job_id", MALFORMED_IDS, ids=repr)
def test_O09_malformed_id_is_none(driver: JobDriver, job_id: str) -> None:
    """A malformed or foreign id answers None on get, never a database error."""
    job = driver.enqueue("a")
    if job_id == job.id:
        pytest.skip("this driver's ids happen to look like this probe")
    assert driver.introspect.get(job_id) is None
    assert driver.introspect.cancel(job_id) is None
    assert driver.introspect.remove(job_id) is None
    with refused("JC_JOB_NOT_FOUND"):
        driver.introspect.promote(job_id)
    assert driver.introspect.get(job.id) == job


@pytest.mark.parametrize("job_id", [str(2**63), str(2**64), str(2**70), "9" * 19, "1" + "0" * 30])
def test_O09_ids_beyond_64_bits_are_unknown(driver: JobDriver, job_id: str) -> None:
    """An all-digit id larger than any store's 64-bit ids is an unknown id on every verb."""
    job = driver.enqueue("a")
    assert driver.introspect.get(job_id) is None
    assert driver.introspect.cancel(job_id) is None
    assert driver.introspect.remove(job_id) is None
    for verb in (driver.introspect.promote, driver.introspect.requeue, driver.introspect.resume):
        with refused("JC_JOB_NOT_FOUND"):
            verb(job_id)
    assert driver.introspect.get(job.id) == job


# --- O10 ------------------------------------------------------------------------------


def _minute(clock: ManualClock, ago: int = 0) -> datetime:
    return clock.now().replace(second=0, microsecond=0) - timedelta(minutes=ago)


def test_O10_finished_jobs_counted_per_minute_and_state(driver: JobDriver, clock: ManualClock) -> None:
    """Each finished job counts once, in the minute of its finished_at and its finished state."""
    first = _minute(clock)
    finished_job(driver, "done")
    clock.advance(seconds=30)
    finished_job(driver, "failed")
    clock.advance(seconds=60)
    second = _minute(clock)
    for state in ("done", "done", "dead", "cancelled"):
        finished_job(driver, state)
    clock.advance(seconds=40)
    assert driver.introspect.finished_per_minute() == [
        FinishedCount(minute=first, state=JobState.DONE, count=1),
        FinishedCount(minute=first, state=JobState.FAILED, count=1),
        FinishedCount(minute=second, state=JobState.CANCELLED, count=1),
        FinishedCount(minute=second, state=JobState.DEAD, count=1),
        FinishedCount(minute=second, state=JobState.DONE, count=2),
    ]
    # The same jobs as listing finds: counted from the store, one per finished job.
    finished = [j for j in all_jobs(driver) if j.state.value in FINISHED]
    assert sum(c.count for c in driver.introspect.finished_per_minute()) == len(finished) == 6


def test_O10_live_jobs_are_never_counted(driver: JobDriver, clock: ManualClock) -> None:
    """Live jobs, in any state, are not counted; a requeued job stops counting."""
    for state in ("ready", "scheduled", "running", "suspended"):
        _live_job(driver, state)
    again = finished_job(driver, "dead")
    kept = finished_job(driver, "done")
    clock.advance(seconds=1)
    driver.introspect.requeue(again.id)
    assert driver.introspect.finished_per_minute() == [
        FinishedCount(minute=_minute(clock), state=JobState.DONE, count=1),
    ]
    assert driver.introspect.get(kept.id) is not None


def test_O10_window_is_the_last_whole_minutes(driver: JobDriver, clock: ManualClock) -> None:
    """The window is `minutes` whole minutes ending with the current one (default 60); earlier jobs are out."""
    early = _minute(clock)
    finished_job(driver, "done")  # at the very start of its minute
    clock.advance(seconds=60)
    finished_job(driver, "failed")
    clock.advance(seconds=90)  # now 2.5 minutes after the first
    late = FinishedCount(minute=_minute(clock, 1), state=JobState.FAILED, count=1)
    both = [FinishedCount(minute=early, state=JobState.DONE, count=1), late]
    assert driver.introspect.finished_per_minute(1) == []
    assert driver.introspect.finished_per_minute(2) == [late]
    assert driver.introspect.finished_per_minute(3) == both
    assert driver.introspect.finished_per_minute(60) == both
    clock.advance(minutes=57)  # the first job's minute is now 59 whole minutes before the current one
    assert driver.introspect.finished_per_minute() == both
    clock.advance(minutes=1)
    assert driver.introspect.finished_per_minute() == [late]
    assert driver.introspect.finished_per_minute(61) == both


@pytest.mark.parametrize("minutes", [0, -1, vocabulary.MAX_CHART_MINUTES + 1, True, 1.5, "60", None])
def test_O10_bad_minutes_refused_writes_nothing(driver: JobDriver, minutes: Any) -> None:
    """minutes outside 1..MAX_CHART_MINUTES, or not an int, is refused and nothing changes."""
    finished_job(driver, "done")
    driver.enqueue("a")
    before = all_jobs(driver)
    with refused("JC_OPTION_INVALID"):
        driver.introspect.finished_per_minute(minutes)
    assert all_jobs(driver) == before

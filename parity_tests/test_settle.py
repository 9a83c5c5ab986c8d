"""Parity scenarios for rules S01-S07: ack, nack and its targets, parking, batches of acks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, cast

import attrs
import pytest
from jobcore.parity._support import LEASE, claim_one, refused, state_of

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver, LandedAcks
from jobcore.records import Claimed, ClaimToken, Job, JobError, JobSpec, JobState


class PaymentDeclined(Exception):
    """A handler's own exception type: its name is what the history records."""


# --- S01 ------------------------------------------------------------------------------


def test_S01_ack_finishes_done_with_result(driver: JobDriver, clock: ManualClock) -> None:
    """ack makes the job done, clears the lease, stores result and finished_at, answers the job."""
    job = driver.enqueue("a", {"in": 1})
    token = claim_one(driver).token
    clock.advance(seconds=2)
    done = driver.ack(token, {"out": [1, 2], "note": "ok"})
    assert done is not None
    assert done.id == job.id
    assert done.state is JobState.DONE
    assert (done.lease_expires_at, done.worker_id) == (None, None)
    assert done.result == {"out": [1, 2], "note": "ok"}
    assert done.finished_at == clock.now()
    assert (done.attempt, done.claim_no, done.payload) == (1, 1, {"in": 1})
    assert driver.introspect.get(job.id) == done


def test_S01_ack_without_result_stores_none(driver: JobDriver) -> None:
    """ack(token) stores no result."""
    driver.enqueue("a")
    done = driver.ack(claim_one(driver).token)
    assert done is not None
    assert (done.state, done.result) == (JobState.DONE, None)


@pytest.mark.parametrize("result", [0, "", [], {}, False, "text", [None]], ids=repr)
def test_S01_falsy_and_scalar_results_round_trip(driver: JobDriver, result: Any) -> None:
    """Every JSON value is a result, falsy ones included."""
    job = driver.enqueue("a")
    driver.ack(claim_one(driver).token, result)
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.result == result
    assert type(got.result) is type(result)


def test_S01_unstorable_result_refused(driver: JobDriver) -> None:
    """A result that is not storable JSON is refused and the job keeps running."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    before = driver.introspect.get(job.id)
    with refused("JC_PAYLOAD_INVALID"):
        driver.ack(token, {1, 2})
    assert driver.introspect.get(job.id) == before
    assert driver.ack(token, "fine") is not None


# --- S02 ------------------------------------------------------------------------------


def test_S02_nack_schedules_a_retry_at_retry_at(driver: JobDriver, clock: ManualClock) -> None:
    """nack with attempts left makes the job scheduled at retry_at, lease cleared, error recorded."""
    job = driver.enqueue("a", max_attempts=3)
    token = claim_one(driver).token
    clock.advance(seconds=1)
    now = clock.now()
    retry_at = now + timedelta(seconds=30)
    got = driver.nack(token, PaymentDeclined("card 4242 declined"), retry_at=retry_at)
    assert got is not None
    assert got.state is JobState.SCHEDULED
    assert got.run_at == retry_at
    assert (got.lease_expires_at, got.worker_id, got.finished_at) == (None, None, None)
    entry = JobError(type="PaymentDeclined", message="card 4242 declined", at=now, attempt=1)
    assert got.last_error == entry
    assert got.errors == (entry,)
    assert got.attempt == 1
    assert driver.introspect.get(job.id) == got


def test_S02_nack_without_retry_at_is_due_now(driver: JobDriver, clock: ManualClock) -> None:
    """Without retry_at the retry is due now and claimable at once."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    clock.advance(seconds=5)
    got = driver.nack(token, "flaky")
    assert got is not None
    assert (got.state, got.run_at) == (JobState.SCHEDULED, clock.now())
    assert claim_one(driver, worker="w2").job.id == job.id


def test_S02_error_history_accumulates(driver: JobDriver, clock: ManualClock) -> None:
    """Each failed attempt appends its own entry: type name, message, time, attempt."""
    driver.enqueue("a", max_attempts=5)
    first_at = clock.now()
    driver.nack(claim_one(driver).token, ValueError("one"))
    clock.advance(seconds=1)
    second_at = clock.now()
    driver.nack(claim_one(driver).token, "two")
    clock.advance(seconds=1)
    third_at = clock.now()
    got = driver.nack(claim_one(driver).token, KeyError("k"))
    assert got is not None
    assert got.errors == (
        JobError(type="ValueError", message="one", at=first_at, attempt=1),
        JobError(type="Error", message="two", at=second_at, attempt=2),
        JobError(type="KeyError", message="'k'", at=third_at, attempt=3),
    )
    assert got.last_error == got.errors[-1]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_S02_unprintable_exception_recorded_by_type(driver: JobDriver) -> None:
    """An exception whose str() fails is still recorded, by its type name."""
    driver.enqueue("a")
    got = driver.nack(claim_one(driver).token, _Unprintable())
    assert got is not None
    assert got.last_error is not None
    assert (got.last_error.type, got.last_error.message) == ("_Unprintable", "<unprintable _Unprintable>")


def test_S02_retry_at_truncated_to_millis_and_utc(driver: JobDriver) -> None:
    """retry_at in another zone, with microseconds, is stored as UTC milliseconds."""
    driver.enqueue("a")
    token = claim_one(driver).token
    zone = timezone(timedelta(hours=-5))
    retry_at = datetime(2030, 1, 1, 8, 0, 1, 123_456, tzinfo=zone)
    got = driver.nack(token, "x", retry_at=retry_at)
    assert got is not None
    assert got.run_at == datetime(2030, 1, 1, 13, 0, 1, 123_000, tzinfo=timezone.utc)


def test_S02_retry_at_in_the_past_is_due_at_once(driver: JobDriver, clock: ManualClock) -> None:
    """A retry_at already passed keeps its value and the retry is claimable now."""
    job = driver.enqueue("a")
    clock.advance(minutes=1)
    past = clock.now() - timedelta(seconds=30)
    got = driver.nack(claim_one(driver).token, "x", retry_at=past)
    assert got is not None
    assert (got.state, got.run_at) == (JobState.SCHEDULED, past)
    assert claim_one(driver).job.id == job.id


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"error": 42}, "JC_OPTION_INVALID"),
        ({"error": None}, "JC_OPTION_INVALID"),
        ({"error": "nul\x00"}, "JC_PAYLOAD_INVALID"),
        ({"error": "e", "retry_at": datetime(2030, 1, 1, 13)}, "JC_OPTION_INVALID"),  # noqa: DTZ001 - naive on purpose
        ({"error": "e", "retry_at": 5}, "JC_OPTION_INVALID"),
        ({"error": "e", "fail": True, "park": True}, "JC_OPTION_INVALID"),
        ({"error": "e", "fail": 1}, "JC_OPTION_INVALID"),
        ({"error": "e", "dead_letter": None}, "JC_OPTION_INVALID"),
    ],
    ids=["int_error", "none_error", "nul_text", "naive_retry_at", "number_retry_at", "fail_and_park", "fail_int",
         "dead_letter_none"],
)
def test_S02_bad_nack_refused(driver: JobDriver, kwargs: dict[str, Any], code: str) -> None:
    """A nack with a bad error, retry_at or flag is refused and the job keeps running."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    before = driver.introspect.get(job.id)
    options = dict(kwargs)  # the parameter dict is shared by every driver's run
    error = options.pop("error")
    with refused(code):
        driver.nack(token, error, **options)
    assert driver.introspect.get(job.id) == before


# --- S03 ------------------------------------------------------------------------------


def test_S03_last_attempt_goes_dead(driver: JobDriver, clock: ManualClock) -> None:
    """A nack on attempt == max_attempts makes the job dead, finished, in the dead letters."""
    job = driver.enqueue("a", max_attempts=2)
    driver.nack(claim_one(driver).token, "one")
    clock.advance(seconds=1)
    got = driver.nack(claim_one(driver).token, "two", retry_at=clock.now() + timedelta(hours=1))
    assert got is not None
    assert got.state is JobState.DEAD
    assert got.finished_at == clock.now()
    assert (got.lease_expires_at, got.worker_id, got.attempt) == (None, None, 2)
    assert [e.message for e in got.errors] == ["one", "two"]
    assert [j.id for j in driver.introspect.dead_letters()] == [job.id]


def test_S03_dead_letter_false_drops_failed(driver: JobDriver) -> None:
    """dead_letter=False on the last attempt makes it failed (dropped), not dead."""
    driver.enqueue("a", max_attempts=1)
    got = driver.nack(claim_one(driver).token, "gone", dead_letter=False)
    assert got is not None
    assert got.state is JobState.FAILED
    assert got.finished_at is not None
    assert driver.introspect.dead_letters() == []


def test_S03_dead_letter_false_still_retries_early_attempts(driver: JobDriver) -> None:
    """dead_letter only matters once attempts are used up."""
    driver.enqueue("a", max_attempts=2)
    got = driver.nack(claim_one(driver).token, "x", dead_letter=False)
    assert got is not None
    assert got.state is JobState.SCHEDULED


def test_S03_dead_letter_false_on_the_last_of_several_attempts(driver: JobDriver, clock: ManualClock) -> None:
    """Retried twice with dead_letter=False, the third and last failure fails the job; no dead letter."""
    job = driver.enqueue("a", max_attempts=3)
    for attempt in (1, 2):
        retried = driver.nack(claim_one(driver).token, f"failure {attempt}", dead_letter=False)
        assert retried is not None
        assert (retried.state, retried.attempt) == (JobState.SCHEDULED, attempt)
    clock.advance(seconds=1)
    got = driver.nack(claim_one(driver).token, "failure 3", dead_letter=False)
    assert got is not None
    assert (got.state, got.attempt, got.finished_at) == (JobState.FAILED, 3, clock.now())
    assert [e.message for e in got.errors] == ["failure 1", "failure 2", "failure 3"]
    assert driver.introspect.dead_letters() == []
    assert driver.introspect.get(job.id) == got


def test_S03_dead_letter_false_after_a_lapsed_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """A reclaimed last attempt nacked with dead_letter=False is failed, its lost attempt on record."""
    job = driver.enqueue("a", max_attempts=2)
    claim_one(driver, worker="w1", lease=10)
    clock.advance(seconds=10)
    again = claim_one(driver, worker="w2")
    assert (again.job.id, again.job.attempt) == (job.id, 2)
    got = driver.nack(again.token, "gone", dead_letter=False)
    assert got is not None
    assert got.state is JobState.FAILED
    assert [e.type for e in got.errors] == ["LeaseExpired", "Error"]
    assert driver.introspect.dead_letters() == []
    assert driver.introspect.stats().count(JobState.FAILED) == 1


def test_S03_dead_letter_decided_per_nack(driver: JobDriver) -> None:
    """Two jobs out of attempts: the one nacked dead_letter=True is dead, the dead_letter=False one failed."""
    kept = driver.enqueue("a", max_attempts=1)
    dropped = driver.enqueue("a", max_attempts=1)
    claimed = {c.job.id: c.token for c in driver.claim(["default"], worker_id="w", limit=2, lease=LEASE).claimed}
    assert driver.nack(claimed[dropped.id], "drop me", dead_letter=False) is not None
    assert driver.nack(claimed[kept.id], "keep me", dead_letter=True) is not None
    assert (state_of(driver, kept.id), state_of(driver, dropped.id)) == (JobState.DEAD, JobState.FAILED)
    assert [j.id for j in driver.introspect.dead_letters()] == [kept.id]


# --- S04 ------------------------------------------------------------------------------


def test_S04_fail_true_fails_whatever_attempts_remain(driver: JobDriver, clock: ManualClock) -> None:
    """nack(fail=True) makes the job failed on its first of many attempts."""
    driver.enqueue("a", max_attempts=10)
    got = driver.nack(claim_one(driver).token, PaymentDeclined("terminal"), fail=True, retry_at=clock.now())
    assert got is not None
    assert got.state is JobState.FAILED
    assert got.finished_at == clock.now()
    assert got.attempt == 1
    assert got.last_error is not None
    assert got.last_error.type == "PaymentDeclined"
    assert driver.claim(["default"], worker_id="w2", lease=LEASE).claimed == ()


def test_S04_fail_wins_over_give_back_and_dead_letter(driver: JobDriver) -> None:
    """fail=True is failed even with counts_as_attempt=False or on the last attempt."""
    driver.enqueue("a", max_attempts=1)
    driver.enqueue("b", max_attempts=5)
    first = driver.nack(claim_one(driver).token, "x", fail=True)
    second = driver.nack(claim_one(driver).token, "x", fail=True, counts_as_attempt=False)
    assert first is not None
    assert second is not None
    assert (first.state, second.state) == (JobState.FAILED, JobState.FAILED)


def test_S04_fail_with_give_back_fails_with_the_attempt_given_back(driver: JobDriver) -> None:
    """counts_as_attempt=False still gives the attempt back when fail=True decides the state."""
    driver.enqueue("a", max_attempts=3)
    failed = driver.nack(claim_one(driver).token, "x", fail=True, counts_as_attempt=False)
    assert failed is not None
    assert (failed.state, failed.attempt) == (JobState.FAILED, 0)
    assert failed.errors[-1].attempt == 1


# --- S05 ------------------------------------------------------------------------------


def test_S05_give_back_the_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """counts_as_attempt=False gives the attempt back, retries, and the next claim is attempt 1 again."""
    job = driver.enqueue("a", max_attempts=3)
    token = claim_one(driver).token
    got = driver.nack(token, "shutting down", counts_as_attempt=False)
    assert got is not None
    assert (got.state, got.attempt, got.claim_no) == (JobState.SCHEDULED, 0, 1)
    assert got.last_error is not None
    assert got.last_error.type == "Error"
    again = claim_one(driver, worker="w2")
    assert again.job.id == job.id
    assert (again.job.attempt, again.job.claim_no) == (1, 2)


def test_S05_give_back_on_last_attempt_is_not_dead(driver: JobDriver, clock: ManualClock) -> None:
    """A given-back final attempt is retried, not dead-lettered."""
    driver.enqueue("a", max_attempts=1)
    retry_at = clock.now() + timedelta(seconds=10)
    got = driver.nack(claim_one(driver).token, "drain", counts_as_attempt=False, retry_at=retry_at)
    assert got is not None
    assert (got.state, got.attempt, got.run_at) == (JobState.SCHEDULED, 0, retry_at)


def test_S05_park_suspends_until_resume(driver: JobDriver, clock: ManualClock) -> None:
    """park=True moves the job to suspended; it is not claimed until resume makes it ready."""
    job = driver.enqueue("a", max_attempts=3)
    token = claim_one(driver).token
    parked = driver.nack(token, "waiting for approval", park=True)
    assert parked is not None
    assert (parked.state, parked.attempt, parked.lease_expires_at, parked.worker_id) == (
        JobState.SUSPENDED, 1, None, None,
    )
    assert parked.finished_at is None
    clock.advance(days=1)
    assert driver.claim(["default"], worker_id="w", lease=LEASE).claimed == ()
    resumed = driver.introspect.resume(job.id)
    assert (resumed.state, resumed.run_at) == (JobState.READY, clock.now())
    again = claim_one(driver, worker="w2")
    assert (again.job.id, again.job.attempt) == (job.id, 2)


def test_S05_park_with_give_back(driver: JobDriver) -> None:
    """park=True with counts_as_attempt=False suspends with the attempt given back."""
    job = driver.enqueue("a")
    parked = driver.nack(claim_one(driver).token, "wait", park=True, counts_as_attempt=False)
    assert parked is not None
    assert (parked.state, parked.attempt) == (JobState.SUSPENDED, 0)
    driver.introspect.resume(job.id)
    assert claim_one(driver).job.attempt == 1


def test_S05_resume_after_parking_the_last_attempt_grants_one_more(driver: JobDriver) -> None:
    """A job parked on its last attempt resumes with one attempt left, never beyond its maximum."""
    job = driver.enqueue("a", max_attempts=2)
    driver.nack(claim_one(driver).token, "first failure")
    parked = driver.nack(claim_one(driver).token, "wait for approval", park=True)
    assert parked is not None
    assert (parked.state, parked.attempt) == (JobState.SUSPENDED, 2)
    resumed = driver.introspect.resume(job.id)
    assert (resumed.state, resumed.attempt) == (JobState.READY, 1)
    again = claim_one(driver)
    assert again.job.attempt == 2 == again.job.max_attempts
    dead = driver.nack(again.token, "still failing")
    assert dead is not None
    assert dead.state is JobState.DEAD
    assert [e.message for e in dead.errors] == ["first failure", "wait for approval", "still failing"]


def test_S05_park_wins_over_dead_letter(driver: JobDriver) -> None:
    """Parking on the last attempt suspends rather than dead-letters."""
    job = driver.enqueue("a", max_attempts=1)
    parked = driver.nack(claim_one(driver).token, "wait", park=True)
    assert parked is not None
    assert parked.state is JobState.SUSPENDED
    assert driver.introspect.resume(job.id).state is JobState.READY


@pytest.mark.parametrize("setup", ["ready", "scheduled", "running", "done"])
def test_S05_resume_refuses_what_is_not_suspended(driver: JobDriver, setup: str) -> None:
    """resume is refused JC_JOB_NOT_RESUMABLE for anything but a suspended job."""
    job = driver.enqueue("a", delay=60 if setup == "scheduled" else None)
    if setup in ("running", "done"):
        token = claim_one(driver).token
        if setup == "done":
            driver.ack(token)
    before = driver.introspect.get(job.id)
    with refused("JC_JOB_NOT_RESUMABLE"):
        driver.introspect.resume(job.id)
    assert driver.introspect.get(job.id) == before


def test_S05_resume_unknown_refused(driver: JobDriver) -> None:
    """resume of an id no job has is refused JC_JOB_NOT_FOUND."""
    job = driver.enqueue("a")
    driver.introspect.remove(job.id)
    with refused("JC_JOB_NOT_FOUND"):
        driver.introspect.resume(job.id)


# --- S06 ------------------------------------------------------------------------------


def test_S06_every_settle_answers_the_job_as_it_stands(driver: JobDriver) -> None:
    """ack and each nack target answer exactly what get() then reads."""
    specs = [JobSpec(name=n, max_attempts=2) for n in ("ack", "retry", "fail", "park", "back")]
    jobs = driver.enqueue_many(specs)
    claimed = driver.claim(["default"], worker_id="w", limit=5, lease=LEASE).claimed
    tokens = {c.job.name: c.token for c in claimed}
    answers = [
        driver.ack(tokens["ack"], [1]),
        driver.nack(tokens["retry"], "x"),
        driver.nack(tokens["fail"], "x", fail=True),
        driver.nack(tokens["park"], "x", park=True),
        driver.nack(tokens["back"], "x", counts_as_attempt=False),
    ]
    assert [a.state if a else None for a in answers] == [
        JobState.DONE, JobState.SCHEDULED, JobState.FAILED, JobState.SUSPENDED, JobState.SCHEDULED,
    ]
    for job, answer in zip(jobs, answers, strict=True):
        assert answer == driver.introspect.get(job.id)


def test_S06_transition_that_did_not_land_answers_none(driver: JobDriver) -> None:
    """Settling twice: the second answers None and leaves the first outcome in place."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    first = driver.nack(token, "x", fail=True)
    assert driver.ack(token, "second") is None
    assert driver.nack(token, "third") is None
    assert driver.introspect.get(job.id) == first


# --- S07 ------------------------------------------------------------------------------


def _four_claims_one_reclaimed(driver: JobDriver, clock: ManualClock) -> tuple[list[Job], list[Claimed], Claimed]:
    """Four jobs claimed by w1; the leases of jobs 0 and 3 lapse and w2 reclaims job 0.

    Answers ``(jobs, w1's claims, w2's claim)``: w1's token of job 0 is stale, its token of
    job 3 lapsed but still current (nobody reclaimed it), those of jobs 1 and 2 renewed.
    """
    jobs = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(4)])
    first = list(driver.claim(["default"], worker_id="w1", limit=4, lease=10).claimed)
    clock.advance(seconds=5)
    for c in first[1:3]:
        assert driver.heartbeat(c.token, 60)
    clock.advance(seconds=5)
    stolen = claim_one(driver, worker="w2")
    assert stolen.job.id == jobs[0].id
    return jobs, first, stolen


def test_S07_ack_many_mixed_tokens_in_input_order(driver: JobDriver, clock: ManualClock) -> None:
    """Each item is fenced on its own token; answers follow input order, stale ones None."""
    jobs, first, stolen = _four_claims_one_reclaimed(driver, clock)
    items = [
        (first[2].token, "r2"),
        (first[0].token, "stale"),
        (stolen.token, "r0"),
        (first[3].token, "r3-late-but-unreclaimed"),
        (first[1].token, None),
    ]
    answers = driver.ack_many(items)
    assert [a.id if a else None for a in answers] == [jobs[2].id, None, jobs[0].id, jobs[3].id, jobs[1].id]
    assert [a.result if a else "-" for a in answers] == ["r2", "-", "r0", "r3-late-but-unreclaimed", None]
    for answer in answers:
        if answer is not None:
            assert answer == driver.introspect.get(answer.id)
            assert answer.state is JobState.DONE


def test_S07_same_token_twice_lands_once(driver: JobDriver) -> None:
    """A token repeated in one batch lands the first time only."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    answers = driver.ack_many([(token, "first"), (token, "second")])
    assert answers[0] is not None
    assert answers[1] is None
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.result == "first"


def test_S07_empty_batch(driver: JobDriver) -> None:
    """ack_many([]) answers []."""
    assert driver.ack_many([]) == []


def test_S07_bad_result_refuses_the_batch(driver: JobDriver) -> None:
    """One unstorable result refuses the whole batch before anything is written."""
    driver.enqueue_many([JobSpec(name="a"), JobSpec(name="a")])
    claimed = driver.claim(["default"], worker_id="w", limit=2, lease=LEASE).claimed
    before = [driver.introspect.get(c.job.id) for c in claimed]
    with refused("JC_PAYLOAD_INVALID"):
        driver.ack_many([(claimed[0].token, "fine"), (claimed[1].token, float("nan"))])
    assert [driver.introspect.get(c.job.id) for c in claimed] == before


@pytest.mark.parametrize(
    "items",
    ["text", [("only-one",)], [(None, 1)], [ClaimToken(job_id="1", worker_id="w", claim_no=1)]],
    ids=["str", "short_pair", "none_token", "bare_token"],
)
def test_S07_malformed_items_refused(driver: JobDriver, items: Any) -> None:
    """Items that are not (token, result) pairs are refused JC_OPTION_INVALID."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    with refused("JC_OPTION_INVALID"):
        driver.ack_many([(token, "ok"), *items] if isinstance(items, list) else items)
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.state is JobState.RUNNING


def _two_claimed(driver: JobDriver, worker: str = "w1", lease: Any = LEASE) -> tuple[list[Job], list[Claimed]]:
    jobs = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(2)])
    claimed = list(driver.claim(["default"], worker_id=worker, limit=2, lease=lease).claimed)
    assert [c.job.id for c in claimed] == [j.id for j in jobs]
    return jobs, claimed


def test_S07_reclaimed_token_in_a_batch_leaves_the_new_holder_alone(driver: JobDriver, clock: ManualClock) -> None:
    """A batch holding a token superseded by another worker's reclaim lands only its current item."""
    jobs, first = _two_claimed(driver, lease=10)
    clock.advance(seconds=5)
    assert driver.heartbeat(first[1].token, 60)
    clock.advance(seconds=5)
    stolen = claim_one(driver, worker="w2")
    assert stolen.job.id == jobs[0].id
    held = driver.introspect.get(jobs[0].id)
    answers = driver.ack_many([(first[0].token, "stale"), (first[1].token, "mine")])
    assert [a.id if a else None for a in answers] == [None, jobs[1].id]
    assert driver.introspect.get(jobs[0].id) == held
    assert driver.ack_many([(stolen.token, "new holder"), (first[0].token, "stale again")])[1] is None
    got = driver.introspect.get(jobs[0].id)
    assert got is not None
    assert (got.state, got.result) == (JobState.DONE, "new holder")


def test_S07_cancelled_jobs_token_in_a_batch_lands_nothing(driver: JobDriver) -> None:
    """A job cancelled under its worker stays cancelled when a batch acks it; the rest of the batch lands."""
    jobs, claimed = _two_claimed(driver)
    cancelled = driver.introspect.cancel(jobs[0].id, "operator")
    assert cancelled is not None
    answers = driver.ack_many([(claimed[0].token, "too late"), (claimed[1].token, "fine")])
    assert [a.state if a else None for a in answers] == [None, JobState.DONE]
    assert driver.introspect.get(jobs[0].id) == cancelled


def test_S07_forged_tokens_in_a_batch_land_nothing(driver: JobDriver) -> None:
    """Tokens with another worker id or another claim_no, batched with a real one, change nothing."""
    jobs, claimed = _two_claimed(driver)
    before = driver.introspect.get(jobs[1].id)
    forged = [
        attrs.evolve(claimed[1].token, worker_id="w2"),
        attrs.evolve(claimed[1].token, claim_no=claimed[1].token.claim_no + 1),
        attrs.evolve(claimed[1].token, claim_no=claimed[1].token.claim_no - 1),
    ]
    answers = driver.ack_many([(forged[0], "x"), (forged[1], "y"), (claimed[0].token, "real"), (forged[2], "z")])
    assert [a.id if a else None for a in answers] == [None, None, jobs[0].id, None]
    assert driver.introspect.get(jobs[1].id) == before


def test_S07_a_batch_naming_another_workers_job_lands_only_its_own(driver: JobDriver) -> None:
    """A worker whose batch names a job another worker holds (same claim number) settles only its own job."""
    mine = driver.enqueue("a")
    theirs = driver.enqueue("a")
    own = claim_one(driver, worker="w1").token
    held = claim_one(driver, worker="w2")
    assert (own.claim_no, held.token.claim_no, held.job.id) == (1, 1, theirs.id)
    before = driver.introspect.get(theirs.id)
    answers = driver.ack_many([(attrs.evolve(own, job_id=theirs.id), "not mine"), (own, "mine")])
    assert [a.id if a else None for a in answers] == [None, mine.id]
    assert driver.introspect.get(theirs.id) == before
    assert driver.ack(held.token, "theirs") is not None


def test_S07_old_claim_of_the_same_worker_in_a_batch_lands_nothing(driver: JobDriver) -> None:
    """After a retry the same worker claims again; a batch with its old and new tokens lands the new one once."""
    job = driver.enqueue("a", max_attempts=3)
    old = claim_one(driver, worker="w1").token
    assert driver.nack(old, "retry") is not None
    new = claim_one(driver, worker="w1").token
    assert new.claim_no == old.claim_no + 1
    answers = driver.ack_many([(old, "old"), (new, "new"), (old, "old again")])
    assert [a.result if a else None for a in answers] == [None, "new", None]
    got = driver.introspect.get(job.id)
    assert got is not None
    assert (got.state, got.result, got.attempt) == (JobState.DONE, "new", 2)


# --- S07 with landed_only ----------------------------------------------------------------


def _lean(driver: JobDriver) -> LandedAcks:
    return cast(LandedAcks, driver)


# The S07 scenarios run on every driver: the front door offers landed_only=True everywhere,
# answering it from full acks where the store lacks ack_landed_only.


def test_S07_landed_only_flags_in_input_order(driver: JobDriver, clock: ManualClock) -> None:
    """landed_only=True fences each item as a plain ack_many does and answers True/False in input order."""
    jobs, first, _ = _four_claims_one_reclaimed(driver, clock)
    items = [(first[2].token, "r2"), (first[0].token, "stale"), (first[3].token, "r3"), (first[1].token, None)]
    assert _lean(driver).ack_many(items, landed_only=True) == [True, False, True, True]
    stored = [driver.introspect.get(j.id) for j in jobs]
    assert [j.state if j else None for j in stored] == [JobState.RUNNING, JobState.DONE, JobState.DONE, JobState.DONE]
    assert [j.result if j else "-" for j in stored] == [None, None, "r2", "r3"]
    assert stored[0] is not None
    assert (stored[0].worker_id, stored[0].claim_no) == ("w2", 2)  # the stale ack left the reclaim alone
    assert stored[2] is not None
    assert (stored[2].finished_at, stored[2].lease_expires_at, stored[2].worker_id) == (clock.now(), None, None)


def test_S07_landed_only_same_token_twice_lands_once(driver: JobDriver) -> None:
    """A token repeated in a landed_only batch lands the first time only."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    assert _lean(driver).ack_many([(token, "first"), (token, "second")], landed_only=True) == [True, False]
    got = driver.introspect.get(job.id)
    assert got is not None
    assert (got.state, got.result) == (JobState.DONE, "first")


def test_S07_landed_only_single_and_empty(driver: JobDriver) -> None:
    """One item answers [True] or [False] (a settled token lands no second time); none answers []."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    assert _lean(driver).ack_many([], landed_only=True) == []
    assert _lean(driver).ack_many([(token, {"n": 1})], landed_only=True) == [True]
    assert _lean(driver).ack_many([(token, {"n": 2})], landed_only=True) == [False]
    got = driver.introspect.get(job.id)
    assert got is not None
    assert (got.state, got.result) == (JobState.DONE, {"n": 1})


@pytest.mark.parametrize("flag", [1, "yes", None], ids=repr)
def test_S07_landed_only_must_be_a_bool(driver: JobDriver, flag: Any) -> None:
    """landed_only that is not True or False is refused JC_OPTION_INVALID and nothing is written."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    with refused("JC_OPTION_INVALID"):
        driver.ack_many([(token, "ok")], landed_only=flag)  # type: ignore[call-arg]
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.state is JobState.RUNNING


def test_S07_landed_only_bad_result_refuses_the_batch(driver: JobDriver) -> None:
    """With landed_only too, one unstorable result refuses the whole batch before anything is written."""
    driver.enqueue_many([JobSpec(name="a"), JobSpec(name="a")])
    claimed = driver.claim(["default"], worker_id="w", limit=2, lease=LEASE).claimed
    before = [driver.introspect.get(c.job.id) for c in claimed]
    with refused("JC_PAYLOAD_INVALID"):
        _lean(driver).ack_many([(claimed[0].token, "fine"), (claimed[1].token, float("nan"))], landed_only=True)
    assert [driver.introspect.get(c.job.id) for c in claimed] == before

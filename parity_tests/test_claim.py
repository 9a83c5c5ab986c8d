"""Parity scenarios for rules C01-C10: what a claim hands out, in what order, reclaim and burial."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from jobcore.parity._support import LEASE, all_jobs, claim_one, finished_job, refused, together

from jobcore import validate as v
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import JobError, JobSpec, JobState

LEASE_EXPIRED_TEXT = "lease expired before the attempt finished"


def _ids(result: Any) -> list[str]:
    return [c.job.id for c in result.claimed]


# --- C01 ------------------------------------------------------------------------------


def test_C01_future_job_claimed_once_due_not_before(driver: JobDriver, clock: ManualClock) -> None:
    """A scheduled job is not claimed a millisecond early, and is claimed at its run_at."""
    job = driver.enqueue("a", delay=timedelta(seconds=10))
    clock.advance(timedelta(seconds=10) - timedelta(milliseconds=1))
    assert driver.claim(["default"], worker_id="w", lease=LEASE).claimed == ()
    clock.advance(milliseconds=1)
    assert claim_one(driver).job.id == job.id


def test_C01_only_ready_and_scheduled_jobs_are_claimed(driver: JobDriver) -> None:
    """Running, suspended and finished jobs are never handed out."""
    for state in ("done", "failed", "dead", "cancelled"):
        finished_job(driver, state, queue="q")
    parked = driver.enqueue("parked", queue="q")
    driver.nack(claim_one(driver, "q").token, "wait", park=True)
    running = driver.enqueue("running", queue="q")
    claim_one(driver, "q")
    result = driver.claim(["q"], worker_id="w2", limit=10, lease=LEASE)
    assert result.claimed == ()
    assert result.buried == ()
    parked_now = driver.introspect.get(parked.id)
    running_now = driver.introspect.get(running.id)
    assert parked_now is not None
    assert running_now is not None
    assert (parked_now.state, running_now.state) == (JobState.SUSPENDED, JobState.RUNNING)


def test_C01_retry_waits_for_its_retry_at(driver: JobDriver, clock: ManualClock) -> None:
    """A nacked job scheduled at retry_at is claimable only from retry_at on."""
    job = driver.enqueue("a")
    retry_at = clock.now() + timedelta(minutes=1)
    driver.nack(claim_one(driver).token, "later", retry_at=retry_at)
    clock.advance(seconds=59)
    assert driver.claim(["default"], worker_id="w", lease=LEASE).claimed == ()
    clock.set(retry_at)
    assert claim_one(driver).job.id == job.id


# --- C02 ------------------------------------------------------------------------------


def test_C02_higher_priority_first(driver: JobDriver) -> None:
    """Higher priority is claimed first, whatever the enqueue order."""
    low = driver.enqueue("a", priority=-5)
    mid = driver.enqueue("a")
    high = driver.enqueue("a", priority=7)
    result = driver.claim(["default"], worker_id="w", limit=3, lease=LEASE)
    assert _ids(result) == [high.id, mid.id, low.id]


def test_C02_earlier_run_at_before_enqueue_order(driver: JobDriver, clock: ManualClock) -> None:
    """At equal priority, an earlier run_at goes first, then enqueue order."""
    now = clock.now()
    first = driver.enqueue("a")
    backdated = driver.enqueue("a", run_at=now - timedelta(minutes=1))
    delayed = driver.enqueue("a", delay=5)
    second = driver.enqueue("a")
    clock.advance(seconds=10)
    later = driver.enqueue("a")
    result = driver.claim(["default"], worker_id="w", limit=5, lease=LEASE)
    assert _ids(result) == [backdated.id, first.id, second.id, delayed.id, later.id]


def test_C02_enqueue_order_breaks_ties(driver: JobDriver) -> None:
    """Same priority and run_at: enqueue order, in one batch and across calls."""
    jobs = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(3)])
    extra = driver.enqueue("a", 3)
    result = driver.claim(["default"], worker_id="w", limit=2, lease=LEASE)
    assert _ids(result) == [jobs[0].id, jobs[1].id]
    result = driver.claim(["default"], worker_id="w", limit=5, lease=LEASE)
    assert _ids(result) == [jobs[2].id, extra.id]


def test_C02_a_small_claim_takes_the_best_of_many_due(driver: JobDriver, clock: ManualClock) -> None:
    """A claim of one job takes the highest priority among many due, not the oldest."""
    older = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(5)])
    clock.advance(seconds=1)
    urgent = driver.enqueue("a", priority=1)
    assert _ids(driver.claim(["default"], worker_id="w", limit=1, lease=LEASE)) == [urgent.id]
    assert _ids(driver.claim(["default"], worker_id="w", limit=2, lease=LEASE)) == [older[0].id, older[1].id]


def test_C02_order_spans_the_named_queues(driver: JobDriver, clock: ManualClock) -> None:
    """Claiming from several queues merges them in one order."""
    a_low = driver.enqueue("a", queue="qa")
    clock.advance(seconds=1)
    b_high = driver.enqueue("b", queue="qb", priority=1)
    b_low = driver.enqueue("b", queue="qb")
    result = driver.claim(["qb", "qa"], worker_id="w", limit=3, lease=LEASE)
    assert _ids(result) == [b_high.id, a_low.id, b_low.id]


def test_C02_retried_job_orders_by_its_new_run_at(driver: JobDriver, clock: ManualClock) -> None:
    """A retry's run_at is its new place in line."""
    retried = driver.enqueue("a")
    waiting = driver.enqueue("a")
    token = claim_one(driver).token
    driver.nack(token, "again", retry_at=clock.now() + timedelta(seconds=1))
    clock.advance(seconds=2)
    result = driver.claim(["default"], worker_id="w", limit=2, lease=LEASE)
    assert _ids(result) == [waiting.id, retried.id]


# --- C03 ------------------------------------------------------------------------------


def test_C03_second_claimer_gets_nothing_while_lease_live(driver: JobDriver, clock: ManualClock) -> None:
    """Once claimed, a job is not handed to another worker until its lease lapses."""
    driver.enqueue("a")
    claim_one(driver, worker="w1", lease=60)
    clock.advance(seconds=59)
    assert driver.claim(["default"], worker_id="w2", limit=5, lease=LEASE).claimed == ()


def test_C03_concurrent_claimers_never_share_a_job(driver: JobDriver) -> None:
    """Threads claiming at once together take every job exactly once."""
    jobs = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(12)])

    def drain(index: int) -> list[str]:
        taken: list[str] = []
        while True:
            result = driver.claim(["default"], worker_id=f"w{index}", limit=2, lease=LEASE)
            if not result.claimed:
                return taken
            taken.extend(c.job.id for c in result.claimed)

    taken = [job_id for ids in together(4, drain) for job_id in ids]
    assert sorted(taken) == sorted(j.id for j in jobs)


def test_C03_overlapping_queue_lists_share_nothing(driver: JobDriver) -> None:
    """Claims naming the same queues in different orders split the jobs between them."""
    jobs = driver.enqueue_many([JobSpec(name="a", queue=q) for q in ("qa", "qb", "qa", "qb")])
    first = driver.claim(["qa", "qb"], worker_id="w1", limit=3, lease=LEASE)
    second = driver.claim(["qb", "qa"], worker_id="w2", limit=3, lease=LEASE)
    assert not set(_ids(first)) & set(_ids(second))
    assert sorted(_ids(first) + _ids(second)) == sorted(j.id for j in jobs)


def test_C03_concurrent_reclaim_goes_to_one_claimer(driver: JobDriver, clock: ManualClock) -> None:
    """Claimers racing for one lapsed job: exactly one reclaims it, with one LeaseExpired entry."""
    job = driver.enqueue("a", max_attempts=5)
    claim_one(driver, worker="w0", lease=10)
    clock.advance(seconds=10)
    results = together(4, lambda i: driver.claim(["default"], worker_id=f"w{i + 1}", limit=2, lease=LEASE))
    winners = [c for r in results for c in r.claimed]
    assert [c.job.id for c in winners] == [job.id]
    got = driver.introspect.get(job.id)
    assert got is not None
    assert (got.attempt, got.claim_no, got.worker_id) == (2, 2, winners[0].token.worker_id)
    assert [e.type for e in got.errors] == ["LeaseExpired"]


# --- C04 ------------------------------------------------------------------------------


def test_C04_claim_reads_only_named_queues(driver: JobDriver) -> None:
    """Jobs of other queues are left alone."""
    other = driver.enqueue("a", queue="other")
    mine = driver.enqueue("a", queue="mine")
    result = driver.claim(["mine", "absent"], worker_id="w", limit=5, lease=LEASE)
    assert _ids(result) == [mine.id]
    assert driver.introspect.get(other.id) == other


@pytest.mark.parametrize("queues", [[], (), iter([])], ids=["list", "tuple", "iterator"])
def test_C04_empty_queue_list_refused(driver: JobDriver, queues: Any) -> None:
    """No queues is refused JC_CLAIM_QUEUES_EMPTY; it never means all queues."""
    job = driver.enqueue("a")
    with refused("JC_CLAIM_QUEUES_EMPTY"):
        driver.claim(queues, worker_id="w", lease=LEASE)
    assert driver.introspect.get(job.id) == job


def test_C04_lapsed_job_of_another_queue_untouched(driver: JobDriver, clock: ManualClock) -> None:
    """A claim neither reclaims nor buries lapsed jobs of queues it did not name."""
    retry = driver.enqueue("a", queue="other")
    final = driver.enqueue("a", queue="other", max_attempts=1)
    driver.claim(["other"], worker_id="w1", limit=2, lease=10)
    clock.advance(seconds=11)
    result = driver.claim(["mine"], worker_id="w2", limit=5, lease=LEASE)
    assert (result.claimed, result.buried) == ((), ())
    for job_id in (retry.id, final.id):
        job = driver.introspect.get(job_id)
        assert job is not None
        assert (job.state, job.worker_id, job.errors) == (JobState.RUNNING, "w1", ())


# --- C05 ------------------------------------------------------------------------------


def test_C05_limit_caps_the_batch(driver: JobDriver) -> None:
    """claim(limit=n) answers at most n jobs, and fewer when fewer are due."""
    driver.enqueue_many([JobSpec(name="a") for _ in range(5)])
    assert len(driver.claim(["default"], worker_id="w", limit=3, lease=LEASE).claimed) == 3
    assert len(driver.claim(["default"], worker_id="w", limit=3, lease=LEASE).claimed) == 2
    assert len(driver.claim(["default"], worker_id="w", limit=3, lease=LEASE).claimed) == 0


@pytest.mark.parametrize("limit", [0, -1, v.MAX_CLAIM_BATCH + 1, True, 2.0, "2", None, math.nan])
def test_C05_limit_out_of_range_refused(driver: JobDriver, limit: Any) -> None:
    """A limit that is not an int in 1..MAX_CLAIM_BATCH is refused and nothing is claimed."""
    job = driver.enqueue("a")
    with refused("JC_OPTION_INVALID"):
        driver.claim(["default"], worker_id="w", limit=limit, lease=LEASE)
    assert driver.introspect.get(job.id) == job


def test_C05_largest_limit_accepted(driver: JobDriver) -> None:
    """limit=MAX_CLAIM_BATCH is in range."""
    driver.enqueue("a")
    assert len(driver.claim(["default"], worker_id="w", limit=v.MAX_CLAIM_BATCH, lease=LEASE).claimed) == 1


# --- C06 ------------------------------------------------------------------------------


def test_C06_claimed_job_is_running_with_lease(driver: JobDriver, clock: ManualClock) -> None:
    """A claimed job is running, held by the worker, lease now + lease, claim_no and attempt + 1."""
    job = driver.enqueue("a", {"x": 1})
    clock.advance(seconds=3)
    now = clock.now()
    claimed = claim_one(driver, worker="w-7", lease=timedelta(seconds=45))
    got = claimed.job
    assert got.id == job.id
    assert got.state is JobState.RUNNING
    assert got.worker_id == "w-7"
    assert got.lease_expires_at == now + timedelta(seconds=45)
    assert (got.claim_no, got.attempt) == (1, 1)
    assert got.attempted_at == now
    assert got.payload == {"x": 1}
    assert (claimed.token.job_id, claimed.token.worker_id, claimed.token.claim_no) == (job.id, "w-7", 1)
    assert got.token == claimed.token
    assert driver.introspect.get(job.id) == got


def test_C06_lease_as_seconds_number(driver: JobDriver, clock: ManualClock) -> None:
    """A lease given as seconds (int or float) means the same as a timedelta."""
    driver.enqueue("a")
    driver.enqueue("a")
    now = clock.now()
    driver.enqueue("a")
    first = claim_one(driver, lease=30)
    second = claim_one(driver, lease=0.25)
    third = claim_one(driver, lease=1.0019)  # sub-millisecond parts are truncated, like every time
    assert first.job.lease_expires_at == now + timedelta(seconds=30)
    assert second.job.lease_expires_at == now + timedelta(milliseconds=250)
    assert third.job.lease_expires_at == now + timedelta(milliseconds=1001)


def test_C06_each_claim_moves_claim_no_and_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """A retried job's second claim is attempt 2, claim_no 2, with a new token."""
    driver.enqueue("a")
    first = claim_one(driver)
    driver.nack(first.token, "again")
    second = claim_one(driver, worker="w2")
    assert (second.job.attempt, second.job.claim_no) == (2, 2)
    assert second.token != first.token


# --- C07 ------------------------------------------------------------------------------


def test_C07_lapsed_lease_is_reclaimed_with_history(driver: JobDriver, clock: ManualClock) -> None:
    """A lapsed running job is claimable again; the lost attempt is recorded as LeaseExpired."""
    job = driver.enqueue("a", max_attempts=3)
    first = claim_one(driver, worker="w1", lease=10)
    clock.advance(seconds=10)  # now == lease_expires_at: lapsed
    now = clock.now()
    second = claim_one(driver, worker="w2", lease=20)
    got = second.job
    assert got.id == job.id
    assert (got.state, got.worker_id, got.attempt, got.claim_no) == (JobState.RUNNING, "w2", 2, 2)
    assert got.lease_expires_at == now + timedelta(seconds=20)
    assert got.errors == (JobError(type="LeaseExpired", message=LEASE_EXPIRED_TEXT, at=now, attempt=1),)
    assert got.last_error == got.errors[0]
    assert second.token != first.token


def test_C07_not_reclaimed_before_the_lease_lapses(driver: JobDriver, clock: ManualClock) -> None:
    """One millisecond before lease_expires_at the job still belongs to its holder."""
    driver.enqueue("a")
    claim_one(driver, worker="w1", lease=10)
    clock.advance(timedelta(seconds=10) - timedelta(milliseconds=1))
    assert driver.claim(["default"], worker_id="w2", lease=LEASE).claimed == ()


def test_C07_lapsed_reclaimed_before_ready_jobs(driver: JobDriver, clock: ManualClock) -> None:
    """Lapsed leases are reclaimed before ready jobs of the queue, even higher-priority ones."""
    lapsed = driver.enqueue("a", priority=-10)
    claim_one(driver, worker="w1", lease=5)
    clock.advance(seconds=6)
    urgent = driver.enqueue("a", priority=100)
    result = driver.claim(["default"], worker_id="w2", limit=1, lease=LEASE)
    assert _ids(result) == [lapsed.id]
    result = driver.claim(["default"], worker_id="w2", limit=1, lease=LEASE)
    assert _ids(result) == [urgent.id]


def test_C07_lapsed_jobs_reclaimed_in_claim_order(driver: JobDriver, clock: ManualClock) -> None:
    """Among lapsed jobs: higher priority first, then earlier run_at, then enqueue order (C02)."""
    late = driver.enqueue("a", priority=1, run_at=clock.now() + timedelta(seconds=1))
    low = driver.enqueue("a", priority=0)
    first = driver.enqueue("a", priority=1)
    second = driver.enqueue("a", priority=1)
    clock.advance(seconds=1)
    driver.claim(["default"], worker_id="w1", limit=4, lease=5)
    clock.advance(seconds=5)
    order = [_ids(driver.claim(["default"], worker_id="w2", limit=1, lease=LEASE)) for _ in range(4)]
    assert order == [[first.id], [second.id], [late.id], [low.id]]


def test_C07_lapsed_job_of_one_queue_before_due_jobs_of_another(driver: JobDriver, clock: ManualClock) -> None:
    """A claim naming several queues takes their lapsed jobs before any ready job of any of them."""
    lapsed = driver.enqueue("a", queue="q2", priority=-10)
    claim_one(driver, "q2", worker="w1", lease=5)
    clock.advance(seconds=5)
    urgent = driver.enqueue("a", queue="q1", priority=100)
    result = driver.claim(["q1", "q2"], worker_id="w2", limit=1, lease=LEASE)
    assert _ids(result) == [lapsed.id]
    assert _ids(driver.claim(["q2", "q1"], worker_id="w2", limit=1, lease=LEASE)) == [urgent.id]


def test_C07_several_lapsed_jobs_over_several_claims(driver: JobDriver, clock: ManualClock) -> None:
    """Lapsed jobs not taken by a small claim stay reclaimable by the next one."""
    jobs = driver.enqueue_many([JobSpec(name="a", payload=i) for i in range(3)])
    driver.claim(["default"], worker_id="w1", limit=3, lease=5)
    clock.advance(seconds=5)
    ready = driver.enqueue("a")
    first = driver.claim(["default"], worker_id="w2", limit=2, lease=LEASE)
    second = driver.claim(["default"], worker_id="w3", limit=2, lease=LEASE)
    assert _ids(first) == [jobs[0].id, jobs[1].id]
    assert _ids(second) == [jobs[2].id, ready.id]
    assert [c.job.errors[-1].type for c in second.claimed[:1]] == ["LeaseExpired"]
    assert second.claimed[1].job.errors == ()


def test_C07_reclaim_twice_records_each_lost_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """Each lapse adds its own LeaseExpired entry, naming the attempt it ended."""
    driver.enqueue("a", max_attempts=5)
    claim_one(driver, worker="w1", lease=5)
    clock.advance(seconds=5)
    claim_one(driver, worker="w2", lease=5)
    clock.advance(seconds=5)
    third = claim_one(driver, worker="w3", lease=5)
    assert [(e.type, e.attempt) for e in third.job.errors] == [("LeaseExpired", 1), ("LeaseExpired", 2)]
    assert third.job.attempt == 3


def test_C07_reclaim_moves_attempted_at_and_lease(driver: JobDriver, clock: ManualClock) -> None:
    """The reclaiming claim sets attempted_at and the lease from its own now."""
    driver.enqueue("a")
    claim_one(driver, worker="w1", lease=10)
    clock.advance(minutes=10)
    got = claim_one(driver, worker="w2", lease=5).job
    assert got.attempted_at == clock.now()
    assert got.lease_expires_at == clock.now() + timedelta(seconds=5)


def test_C07_repeated_heartbeats_reclaimed_once(driver: JobDriver, clock: ManualClock) -> None:
    """Heartbeats that set the same expiry twice still leave one job to reclaim, handed out once."""
    job = driver.enqueue("a")
    token = claim_one(driver, worker="w1", lease=10).token
    assert driver.heartbeat(token, 10) is True
    assert driver.heartbeat(token, 10) is True
    clock.advance(seconds=10)
    result = driver.claim(["default"], worker_id="w2", limit=5, lease=LEASE)
    assert _ids(result) == [job.id]
    assert [e.type for e in result.claimed[0].job.errors] == ["LeaseExpired"]
    assert driver.claim(["default"], worker_id="w3", limit=5, lease=LEASE).claimed == ()


def test_C07_cancelled_running_job_is_not_reclaimed(driver: JobDriver, clock: ManualClock) -> None:
    """A running job cancelled before its lease lapsed is neither reclaimed nor rescued."""
    job = driver.enqueue("a")
    claim_one(driver, lease=10)
    cancelled = driver.introspect.cancel(job.id)
    clock.advance(seconds=20)
    result = driver.claim(["default"], worker_id="w2", limit=5, lease=LEASE)
    assert (result.claimed, result.buried) == ((), ())
    assert driver.introspect.rescue().requeued == 0
    assert driver.introspect.get(job.id) == cancelled


# --- C08 ------------------------------------------------------------------------------


def test_C08_final_attempt_lapse_is_buried_dead(driver: JobDriver, clock: ManualClock) -> None:
    """A lapsed job on its final attempt is settled dead by the claim that finds it, never handed out."""
    job = driver.enqueue("crashy", max_attempts=1)
    claim_one(driver, worker="w1", lease=10)
    clock.advance(seconds=10)
    now = clock.now()
    result = driver.claim(["default"], worker_id="w2", limit=5, lease=LEASE)
    assert result.claimed == ()
    assert len(result.buried) == 1
    buried = result.buried[0]
    assert buried.id == job.id
    assert buried.state is JobState.DEAD
    assert (buried.lease_expires_at, buried.worker_id) == (None, None)
    assert buried.finished_at == now
    assert buried.attempt == 1
    assert buried.last_error is not None
    assert (buried.last_error.type, buried.last_error.at, buried.last_error.attempt) == (
        "LeaseLapsedFinalAttempt", now, 1,
    )
    assert [e.type for e in buried.errors] == ["LeaseLapsedFinalAttempt"]
    assert driver.introspect.get(job.id) == buried


def test_C08_drop_exhausted_buries_failed(driver: JobDriver, clock: ManualClock) -> None:
    """A job named in drop_exhausted is settled failed instead of dead; others stay dead."""
    dropped = driver.enqueue("droppable", max_attempts=1)
    kept = driver.enqueue("keeper", max_attempts=1)
    driver.claim(["default"], worker_id="w1", limit=2, lease=10)
    clock.advance(seconds=11)
    result = driver.claim(["default"], worker_id="w2", lease=LEASE, drop_exhausted=["droppable", "unrelated"])
    states = {j.id: j.state for j in result.buried}
    assert states == {dropped.id: JobState.FAILED, kept.id: JobState.DEAD}
    assert all(j.last_error is not None and j.last_error.type == "LeaseLapsedFinalAttempt" for j in result.buried)
    assert [j.id for j in driver.introspect.dead_letters()] == [kept.id]


def test_C08_buried_reported_once_to_one_claim(driver: JobDriver, clock: ManualClock) -> None:
    """The buried job appears in exactly one claim result; later claims and rescue see nothing."""
    job = driver.enqueue("crashy", max_attempts=1)
    claim_one(driver, lease=10)
    clock.advance(seconds=10)
    first = driver.claim(["default"], worker_id="w2", lease=LEASE)
    second = driver.claim(["default"], worker_id="w3", lease=LEASE)
    clock.advance(hours=1)
    third = driver.claim(["default"], worker_id="w4", lease=LEASE)
    rescued = driver.introspect.rescue()
    assert [j.id for j in first.buried] == [job.id]
    assert (second.buried, third.buried, rescued.buried, rescued.requeued) == ((), (), (), 0)
    assert (second.claimed, third.claimed) == ((), ())


def test_C08_burial_ignores_the_claim_limit(driver: JobDriver, clock: ManualClock) -> None:
    """Every lapsed final-attempt job of the queues is buried, even past the claim's limit."""
    doomed = driver.enqueue_many([JobSpec(name="crashy", max_attempts=1) for _ in range(3)])
    driver.claim(["default"], worker_id="w1", limit=3, lease=10)
    clock.advance(seconds=10)
    waiting = driver.enqueue("fine")
    result = driver.claim(["default"], worker_id="w2", limit=1, lease=LEASE)
    assert sorted(j.id for j in result.buried) == sorted(j.id for j in doomed)
    assert _ids(result) == [waiting.id]


def test_C08_final_attempt_after_retries_and_reclaims(driver: JobDriver, clock: ManualClock) -> None:
    """A job that reached its last attempt through a reclaim is buried when that lease lapses too."""
    job = driver.enqueue("crashy", max_attempts=2)
    claim_one(driver, worker="w1", lease=10)
    clock.advance(seconds=10)
    assert claim_one(driver, worker="w2", lease=10).job.attempt == 2
    clock.advance(seconds=10)
    result = driver.claim(["default"], worker_id="w3", lease=LEASE)
    assert result.claimed == ()
    assert [j.id for j in result.buried] == [job.id]
    assert [(e.type, e.attempt) for e in result.buried[0].errors] == [
        ("LeaseExpired", 1), ("LeaseLapsedFinalAttempt", 2),
    ]


def test_C08_buried_token_is_dead(driver: JobDriver, clock: ManualClock) -> None:
    """The crashed holder's token no longer settles or renews a buried job."""
    driver.enqueue("crashy", max_attempts=1)
    token = claim_one(driver, lease=10).token
    clock.advance(seconds=10)
    buried = driver.claim(["default"], worker_id="w2", lease=LEASE).buried[0]
    assert driver.heartbeat(token, LEASE) is False
    assert driver.ack(token, "late") is None
    assert driver.nack(token, "late") is None
    assert driver.introspect.get(buried.id) == buried


def test_C08_heartbeat_keeps_final_attempt_alive(driver: JobDriver, clock: ManualClock) -> None:
    """A final-attempt job whose holder heartbeats in time is neither buried nor reclaimed."""
    job = driver.enqueue("slow", max_attempts=1)
    token = claim_one(driver, lease=10).token
    clock.advance(seconds=9)
    assert driver.heartbeat(token, 10) is True
    clock.advance(seconds=9)
    result = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert (result.claimed, result.buried) == ((), ())
    done = driver.ack(token, "ok")
    assert done is not None
    assert (done.id, done.state) == (job.id, JobState.DONE)


def test_C08_concurrent_claims_bury_once(driver: JobDriver, clock: ManualClock) -> None:
    """Claims racing over a lapsed final attempt: one of them reports the burial, once."""
    job = driver.enqueue("crashy", max_attempts=1)
    claim_one(driver, lease=10)
    clock.advance(seconds=10)
    results = together(4, lambda i: driver.claim(["default"], worker_id=f"w{i + 1}", lease=LEASE))
    buried = [j for r in results for j in r.buried]
    assert [j.id for j in buried] == [job.id]
    assert all(r.claimed == () for r in results)
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.state is JobState.DEAD
    assert [e.type for e in got.errors] == ["LeaseLapsedFinalAttempt"]


def test_C08_claim_racing_rescue_buries_once(driver: JobDriver, clock: ManualClock) -> None:
    """A claim and a rescue racing over a lapsed final attempt bury it once between them."""
    job = driver.enqueue("crashy", max_attempts=1)
    claim_one(driver, lease=10)
    clock.advance(seconds=10)
    claimed, rescued = together(2, lambda i: (
        driver.claim(["default"], worker_id="w2", lease=LEASE) if i == 0 else driver.introspect.rescue()
    ))
    assert [j.id for j in (*claimed.buried, *rescued.buried)] == [job.id]
    got = driver.introspect.get(job.id)
    assert got is not None
    assert [e.type for e in got.errors] == ["LeaseLapsedFinalAttempt"]


# --- C09 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lease",
    [0, -1, 0.0, math.nan, math.inf, -math.inf, True, "30", None, timedelta(0), timedelta(seconds=-1),
     v.MAX_LEASE + timedelta(milliseconds=1), 0.0005, timedelta(microseconds=999)],
    ids=["zero", "negative", "zero_float", "nan", "inf", "neg_inf", "bool", "str", "none", "zero_delta",
         "negative_delta", "over_max", "half_ms", "under_min_delta"],
)
def test_C09_bad_lease_refused(driver: JobDriver, lease: Any) -> None:
    """A lease that is not a positive finite duration is refused; nothing is claimed."""
    job = driver.enqueue("a")
    with refused("JC_OPTION_INVALID"):
        driver.claim(["default"], worker_id="w", lease=lease)
    assert driver.introspect.get(job.id) == job


def test_C09_refused_claim_buries_nothing(driver: JobDriver, clock: ManualClock) -> None:
    """A refused claim changes nothing, not even a pending burial or reclaim."""
    final = driver.enqueue("a", max_attempts=1)
    retry = driver.enqueue("a", max_attempts=2)
    driver.claim(["default"], worker_id="w1", limit=2, lease=5)
    clock.advance(seconds=5)
    before = {j.id: j for j in all_jobs(driver)}
    with refused("JC_OPTION_INVALID"):
        driver.claim(["default"], worker_id="w2", lease=0)
    assert {j.id: j for j in all_jobs(driver)} == before
    result = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert [j.id for j in result.buried] == [final.id]
    assert _ids(result) == [retry.id]


def test_C09_smallest_and_largest_lease_accepted(driver: JobDriver, clock: ManualClock) -> None:
    """1 ms and MAX_LEASE are both positive finite leases."""
    driver.enqueue("a")
    driver.enqueue("a")
    now = clock.now()
    assert claim_one(driver, lease=timedelta(milliseconds=1)).job.lease_expires_at == now + timedelta(milliseconds=1)
    assert claim_one(driver, lease=v.MAX_LEASE).job.lease_expires_at == now + v.MAX_LEASE


# --- C10 ------------------------------------------------------------------------------


def test_C10_rescue_requeues_lapsed_jobs_in_every_queue(driver: JobDriver, clock: ManualClock) -> None:
    """rescue puts lapsed jobs with attempts left back to ready in every queue, history recorded."""
    a = driver.enqueue("a", queue="qa")
    b = driver.enqueue("b", queue="qb")
    live = driver.enqueue("c", queue="qc")
    driver.claim(["qa", "qb"], worker_id="w1", limit=2, lease=10)
    driver.claim(["qc"], worker_id="w1", lease=60)
    clock.advance(seconds=10)
    now = clock.now()
    result = driver.introspect.rescue()
    assert (result.requeued, result.buried) == (2, ())
    for job_id in (a.id, b.id):
        job = driver.introspect.get(job_id)
        assert job is not None
        assert (job.state, job.worker_id, job.lease_expires_at, job.run_at) == (JobState.READY, None, None, now)
        assert job.attempt == 1
        assert job.errors == (JobError(type="LeaseExpired", message=LEASE_EXPIRED_TEXT, at=now, attempt=1),)
    untouched = driver.introspect.get(live.id)
    assert untouched is not None
    assert untouched.state is JobState.RUNNING
    assert untouched.errors == ()


def test_C10_rescue_kills_the_old_token(driver: JobDriver, clock: ManualClock) -> None:
    """After rescue the old holder's token no longer lands; the next claim is attempt 2."""
    driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    clock.advance(seconds=11)
    driver.introspect.rescue()
    assert driver.heartbeat(token, LEASE) is False
    assert driver.ack(token) is None
    assert driver.nack(token, "late") is None
    again = claim_one(driver, worker="w2")
    assert (again.job.attempt, again.job.claim_no) == (2, 2)
    assert driver.ack(token) is None


def test_C10_rescue_buries_final_attempts(driver: JobDriver, clock: ManualClock) -> None:
    """A lapsed final-attempt job is buried dead by rescue, as C08, and reported once."""
    final = driver.enqueue("a", max_attempts=1, queue="qa")
    retry = driver.enqueue("a", max_attempts=2, queue="qb")
    driver.claim(["qa", "qb"], worker_id="w1", limit=2, lease=10)
    clock.advance(seconds=10)
    result = driver.introspect.rescue()
    assert result.requeued == 1
    assert [j.id for j in result.buried] == [final.id]
    buried = result.buried[0]
    assert buried.state is JobState.DEAD
    assert buried.last_error is not None
    assert buried.last_error.type == "LeaseLapsedFinalAttempt"
    assert driver.introspect.get(final.id) == buried
    got = driver.claim(["qa", "qb"], worker_id="w2", limit=5, lease=LEASE)
    assert got.buried == ()
    assert _ids(got) == [retry.id]


def test_C10_rescue_twice_changes_nothing_more(driver: JobDriver, clock: ManualClock) -> None:
    """A second rescue right away answers zero and leaves every job as it was."""
    driver.enqueue("a")
    driver.enqueue("b", max_attempts=1)
    driver.claim(["default"], worker_id="w1", limit=2, lease=10)
    clock.advance(seconds=10)
    first = driver.introspect.rescue()
    after_first = all_jobs(driver)
    second = driver.introspect.rescue()
    assert (first.requeued, len(first.buried)) == (1, 1)
    assert (second.requeued, second.buried) == (0, ())
    assert all_jobs(driver) == after_first


def test_C10_rescue_racing_a_claim_records_one_lost_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """A rescue and a claim racing over one lapsed job record its lost attempt once."""
    job = driver.enqueue("a", max_attempts=5)
    claim_one(driver, lease=10)
    clock.advance(seconds=10)
    together(2, lambda i: (
        driver.claim(["default"], worker_id="w2", lease=LEASE) if i == 0 else driver.introspect.rescue()
    ))
    got = driver.introspect.get(job.id)
    assert got is not None
    assert [e.type for e in got.errors] == ["LeaseExpired"]
    assert got.state in (JobState.READY, JobState.RUNNING)
    assert got.attempt == (2 if got.state is JobState.RUNNING else 1)


def test_C10_rescue_with_nothing_lapsed(driver: JobDriver) -> None:
    """rescue on a store without lapsed leases answers zero."""
    driver.enqueue("a")
    claim_one(driver)
    assert driver.introspect.rescue().requeued == 0

"""Parity scenarios for rules G01-G04: progress stored on the job, fenced, checked, per attempt."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import attrs
from jobcore.parity._support import LEASE, all_jobs, claim_one, make_worker, refused, running, wait_until

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import Job, JobState, Progress
from jobcore.registry import JobContext, Registry


def _stored(driver: JobDriver, job_id: str) -> Job:
    job = driver.introspect.get(job_id)
    assert job is not None
    return job


# --- G01 ------------------------------------------------------------------------------


def test_G01_progress_is_stored_and_read_back_with_the_store_time(driver: JobDriver, clock: ManualClock) -> None:
    """A current token's progress lands, every read shows it stamped with store time; the next replaces it."""
    job = driver.enqueue("a")
    assert job.progress is None
    token = claim_one(driver).token
    assert _stored(driver, job.id).progress is None
    clock.advance(seconds=3)
    assert driver.progress(token, 0.25, "a quarter: 25 of 100 rows") is True
    expected = Progress(value=0.25, message="a quarter: 25 of 100 rows", updated_at=clock.now())
    assert _stored(driver, job.id).progress == expected
    assert [j.progress for j in all_jobs(driver) if j.id == job.id] == [expected]
    clock.advance(seconds=2)
    assert driver.progress(token, None, "only a message, no fraction") is True
    assert _stored(driver, job.id).progress == Progress(
        value=None, message="only a message, no fraction", updated_at=clock.now()
    )
    assert driver.progress(token, 1) is True
    got = _stored(driver, job.id).progress
    assert got == Progress(value=1.0, message=None, updated_at=clock.now())
    assert got is not None
    assert type(got.value) is float


def test_G01_progress_moves_nothing_else(driver: JobDriver, clock: ManualClock) -> None:
    """Storing progress leaves the lease, state, attempt and history as they were: only ``progress`` changes."""
    job = driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    before = _stored(driver, job.id)
    clock.advance(seconds=4)
    assert driver.progress(token, 0.5, "half") is True
    after = _stored(driver, job.id)
    assert attrs.evolve(after, progress=None) == before
    assert after.lease_expires_at == before.lease_expires_at  # not a heartbeat
    clock.advance(seconds=7)  # past the lease: progress did not extend it
    result = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert [c.job.id for c in result.claimed] == [job.id]


def test_G01_text_that_looks_like_an_operator_or_markup_is_stored_as_given(driver: JobDriver) -> None:
    """A message is data: quotes, ``$`` operators, JSON and markup come back byte for byte."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    for text in ('{"$set": {"state": "done"}}', "'; DROP TABLE jobs; --", "<b>bold</b> & é \u2028", ""):
        assert driver.progress(token, 0.0, text) is True
        got = _stored(driver, job.id)
        assert got.progress is not None
        assert got.progress.message == text
        assert got.state is JobState.RUNNING


def test_G01_a_worker_stores_what_the_handler_reports(driver: JobDriver) -> None:
    """ctx.progress reaches the store while the handler runs, and its last report before the job settles."""
    registry = Registry()
    reported, release = threading.Event(), threading.Event()

    @registry.job(name="rows")
    def rows(payload: Any, ctx: JobContext) -> str:
        for n in range(1, 501):
            ctx.progress(n / 1000, f"row {n} of 1000")
        reported.set()
        release.wait(10)
        ctx.progress(1.0, "all 1000 rows")
        return "ok"

    job = driver.enqueue("rows")
    with running(make_worker(driver, registry, progress_interval=0.05)):
        assert reported.wait(10)
        mid = wait_until(
            lambda: (p := _stored(driver, job.id).progress) is not None and p.value == 0.5 and p,
            what="the mid-run progress stored",
        )
        assert mid.message == "row 500 of 1000"
        release.set()
        done = wait_until(lambda: (j := _stored(driver, job.id)).state is JobState.DONE and j, what="the job done")
    assert done.progress is not None
    assert (done.progress.value, done.progress.message) == (1.0, "all 1000 rows")


# --- G02 ------------------------------------------------------------------------------


def test_G02_a_superseded_token_changes_nothing(driver: JobDriver, clock: ManualClock) -> None:
    """After a reclaim the old holder's progress answers False; the new holder's report stands."""
    job = driver.enqueue("a")
    old = claim_one(driver, lease=10).token
    assert driver.progress(old, 0.9, "old holder") is True
    clock.advance(seconds=15)
    new = claim_one(driver, worker="w2").token
    assert driver.progress(new, 0.1, "new holder") is True
    before = _stored(driver, job.id)
    clock.advance(seconds=1)
    assert driver.progress(old, 0.95, "old holder again") is False
    assert _stored(driver, job.id) == before


def test_G02_tokens_of_finished_cancelled_removed_or_unknown_jobs_change_nothing(
    driver: JobDriver, clock: ManualClock
) -> None:
    """Settled, cancelled, removed, unknown and forged tokens answer False and write nothing."""
    done = driver.enqueue("a", queue="q1")
    token = claim_one(driver, "q1").token
    assert driver.progress(token, 0.5, "before the ack") is True
    assert driver.ack(token) is not None
    kept = _stored(driver, done.id)
    clock.advance(seconds=1)
    assert driver.progress(token, 0.9, "after the ack") is False
    assert _stored(driver, done.id) == kept

    cancelled = driver.enqueue("a", queue="q2")
    cancelled_token = claim_one(driver, "q2").token
    driver.introspect.cancel(cancelled.id, "stop")
    kept = _stored(driver, cancelled.id)
    assert driver.progress(cancelled_token, 0.5) is False
    assert _stored(driver, cancelled.id) == kept

    removed = driver.enqueue("a", queue="q3")
    removed_token = claim_one(driver, "q3").token
    driver.introspect.cancel(removed.id, "stop")
    driver.introspect.remove(removed.id)
    assert driver.progress(removed_token, 0.5) is False
    assert driver.introspect.get(removed.id) is None

    live = driver.enqueue("a", queue="q4")
    live_token = claim_one(driver, "q4").token
    forged = [
        attrs.evolve(live_token, worker_id="w2"),
        attrs.evolve(live_token, claim_no=live_token.claim_no + 1),
        attrs.evolve(live_token, claim_no=True),
        attrs.evolve(live_token, claim_no=2**63),
        attrs.evolve(live_token, job_id="999999999"),
        attrs.evolve(live_token, job_id="not-an-id"),
    ]
    for token in forged:
        assert driver.progress(token, 0.5, "forged") is False, token
    assert _stored(driver, live.id).progress is None


# --- G03 ------------------------------------------------------------------------------

BAD: list[tuple[Any, Any]] = [
    (float("nan"), None), (float("inf"), None), (-float("inf"), None), (-0.001, None), (1.001, None), (2, None),
    (True, None), ("50%", None), ([0.5], None), (None, 42), (None, b"bytes"), (None, "nul \x00 inside"),
    (None, "unpaired \ud800 surrogate"), (0.5, "x" * 501),
]


def test_G03_bad_values_are_refused_and_nothing_is_written(driver: JobDriver, clock: ManualClock) -> None:
    """Bad values and messages are refused with JC_OPTION_INVALID; the stored progress stays as it was."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    assert driver.progress(token, 0.5, "ok") is True
    kept = _stored(driver, job.id)
    clock.advance(seconds=1)
    for value, message in BAD:
        with refused("JC_OPTION_INVALID"):
            driver.progress(token, value, message)
    assert _stored(driver, job.id) == kept
    for edge in (0, 0.0, 1, 1.0):
        assert driver.progress(token, edge) is True
        got = _stored(driver, job.id).progress
        assert got is not None
        assert got.value == float(edge)


def test_G03_refused_even_for_a_stale_token_and_for_a_non_token(driver: JobDriver) -> None:
    """Arguments are checked before the token: a stale token with a bad value is refused, not answered."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    assert driver.ack(token) is not None
    with refused("JC_OPTION_INVALID"):
        driver.progress(token, float("nan"))
    with refused("JC_OPTION_INVALID"):
        driver.progress("not a token", 0.5)  # type: ignore[arg-type]
    assert _stored(driver, job.id).progress is None


# --- G04 ------------------------------------------------------------------------------


def test_G04_a_settled_attempt_keeps_its_last_progress(driver: JobDriver, clock: ManualClock) -> None:
    """Ack, a retry, fail and the dead-letter queue all keep the attempt's last progress."""
    outcomes: dict[str, Job | None] = {}
    for queue, settle in (
        ("done", lambda t: driver.ack(t, 1)),
        ("retry", lambda t: driver.nack(t, "boom", retry_at=clock.now() + timedelta(minutes=5))),
        ("failed", lambda t: driver.nack(t, "boom", fail=True)),
        ("dead", lambda t: driver.nack(t, "boom")),
    ):
        job = driver.enqueue("a", queue=queue, max_attempts=1 if queue == "dead" else 3)
        token = claim_one(driver, queue).token
        clock.advance(seconds=1)
        assert driver.progress(token, 0.4, f"stopped at 40% ({queue})") is True
        stored = _stored(driver, job.id).progress
        clock.advance(seconds=1)
        answer = settle(token)
        assert answer is not None
        assert answer.progress == stored
        outcomes[queue] = _stored(driver, job.id)
        assert outcomes[queue].progress == stored  # type: ignore[union-attr]
    assert {q: j.state for q, j in outcomes.items() if j is not None} == {
        "done": JobState.DONE, "retry": JobState.SCHEDULED, "failed": JobState.FAILED, "dead": JobState.DEAD,
    }


def test_G04_the_next_claim_starts_without_progress(driver: JobDriver, clock: ManualClock) -> None:
    """A retried job keeps its last attempt's progress until the next claim, which clears it."""
    job = driver.enqueue("a", max_attempts=3)
    token = claim_one(driver).token
    assert driver.progress(token, 0.7, "first attempt") is True
    assert driver.nack(token, "boom") is not None
    assert _stored(driver, job.id).progress is not None
    again = claim_one(driver)
    assert again.job.id == job.id
    assert again.job.progress is None
    assert _stored(driver, job.id).progress is None
    assert driver.progress(again.token, 0.1, "second attempt") is True
    assert _stored(driver, job.id).progress == Progress(value=0.1, message="second attempt", updated_at=clock.now())


def test_G04_a_reclaim_clears_progress_and_a_burial_keeps_it(driver: JobDriver, clock: ManualClock) -> None:
    """A lapsed lease reclaimed starts over without progress; one buried on its final attempt keeps it."""
    reclaimed = driver.enqueue("a", queue="again", max_attempts=2)
    buried = driver.enqueue("a", queue="again", max_attempts=1, priority=-1)
    first = driver.claim(["again"], worker_id="w1", limit=2, lease=10).claimed
    assert [c.job.id for c in first] == [reclaimed.id, buried.id]
    for claimed in first:
        assert driver.progress(claimed.token, 0.3, "then the worker died") is True
    kept = _stored(driver, buried.id).progress
    clock.advance(seconds=15)
    result = driver.claim(["again"], worker_id="w2", limit=2, lease=LEASE)
    assert [c.job.id for c in result.claimed] == [reclaimed.id]
    assert result.claimed[0].job.progress is None
    assert _stored(driver, reclaimed.id).progress is None
    assert [j.id for j in result.buried] == [buried.id]
    assert result.buried[0].progress == kept
    assert _stored(driver, buried.id).progress == kept
    assert _stored(driver, buried.id).state is JobState.DEAD


def test_G04_operator_verbs_keep_progress_until_the_next_claim(driver: JobDriver) -> None:
    """Cancelling a running job, requeueing it and promoting it keep its progress; the claim that follows clears it."""
    job = driver.enqueue("a", max_attempts=5)
    token = claim_one(driver).token
    assert driver.progress(token, 0.6, "cancelled at 60%") is True
    kept = _stored(driver, job.id).progress
    assert kept is not None
    cancelled = driver.introspect.cancel(job.id, "operator")
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.progress == kept
    requeued = driver.introspect.requeue(job.id)
    assert requeued.state is JobState.READY
    assert requeued.progress == kept
    again = claim_one(driver)
    assert (again.job.id, again.job.progress) == (job.id, None)
    assert _stored(driver, job.id).progress is None

"""Parity scenarios for rules R01-R02: pruning finished jobs by a retention policy.

Time moves only through the scenario's ManualClock; ages are counted from each job's
``finished_at``. Data stays tiny (a handful of jobs), because the MongoDB stand-in
server is slow.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from jobcore.parity._support import all_jobs, claim_one, finished_job, refused

from jobcore import validate as v
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.errors import JobcoreError
from jobcore.records import PruneResult, RetentionPolicy

FINISHED = ("cancelled", "dead", "done", "failed")
ZERO = RetentionPolicy(done=0, failed=0, cancelled=0, dead=0)
"""Every finished job is eligible as soon as it finished."""


def _per_state(counts: Any, **given: int) -> None:
    """``counts`` names every finished state; those in ``given`` have that count, the rest 0."""
    got = {str(state): n for state, n in counts.items()}
    want = {state: given.get(state, 0) for state in FINISHED}
    assert got == want


def _check(result: PruneResult, removed: dict[str, int], remaining: dict[str, int]) -> None:
    _per_state(result.removed, **removed)
    _per_state(result.remaining, **remaining)


def _refusal(call: Callable[[], object]) -> JobcoreError | None:
    """The coded error ``call`` raised, or None when it was accepted."""
    try:
        call()
    except JobcoreError as exc:
        return exc
    return None


def _ids(driver: JobDriver) -> set[str]:
    return {job.id for job in all_jobs(driver)}


# --- R01 ------------------------------------------------------------------------------


def test_R01_default_policy_prunes_each_state_after_its_age(driver: JobDriver, clock: ManualClock) -> None:
    """Defaults: done after 1 day, failed and cancelled after 7, dead after 30, each exactly at its cutoff."""
    jobs = {state: finished_job(driver, state) for state in FINISHED}
    assert RetentionPolicy() == RetentionPolicy(
        done=timedelta(days=1),
        failed=timedelta(days=7),
        cancelled=timedelta(days=7),
        dead=timedelta(days=30),
    )
    clock.advance(timedelta(days=1) - timedelta(milliseconds=1))
    _check(driver.introspect.prune(), removed={}, remaining={})
    clock.advance(timedelta(milliseconds=1))
    _check(driver.introspect.prune(), removed={"done": 1}, remaining={})
    assert driver.introspect.get(jobs["done"].id) is None
    clock.advance(days=6)
    _check(driver.introspect.prune(None), removed={"failed": 1, "cancelled": 1}, remaining={})
    clock.advance(days=23)
    assert _ids(driver) == {jobs["dead"].id}
    _check(driver.introspect.prune(), removed={"dead": 1}, remaining={})
    assert _ids(driver) == set()


def test_R01_custom_ages_and_the_cutoff_is_inclusive(driver: JobDriver, clock: ManualClock) -> None:
    """A job finished exactly ``age`` ago is eligible; one finished a millisecond later is not."""
    policy = RetentionPolicy(done=60, failed=timedelta(0), cancelled=timedelta(hours=1), dead=None)
    old = finished_job(driver, "done")
    failed = finished_job(driver, "failed")
    clock.advance(milliseconds=1)
    young = finished_job(driver, "done")
    cancelled = finished_job(driver, "cancelled")
    _check(driver.introspect.prune(policy), removed={"failed": 1}, remaining={})
    clock.set(old.finished_at + timedelta(seconds=60))  # type: ignore[operator]
    _check(driver.introspect.prune(policy, dry_run=True), removed={}, remaining={"done": 1})
    _check(driver.introspect.prune(policy), removed={"done": 1}, remaining={})
    assert driver.introspect.get(young.id) is not None
    clock.advance(milliseconds=1)
    _check(driver.introspect.prune(policy), removed={"done": 1}, remaining={})
    assert _ids(driver) == {cancelled.id}
    assert failed.id not in _ids(driver)


def test_R01_none_age_keeps_a_state_forever(driver: JobDriver, clock: ManualClock) -> None:
    """A state whose age is None is never pruned, however old; the others still are."""
    kept = finished_job(driver, "dead")
    finished_job(driver, "done")
    clock.advance(days=36_000)
    policy = RetentionPolicy(done=0, failed=0, cancelled=0, dead=None)
    _check(driver.introspect.prune(policy), removed={"done": 1}, remaining={})
    forever = RetentionPolicy(done=None, failed=None, cancelled=None, dead=None)
    _check(driver.introspect.prune(forever), removed={}, remaining={})
    assert _ids(driver) == {kept.id}


def test_R01_never_prunes_a_live_job(driver: JobDriver, clock: ManualClock) -> None:
    """Live jobs stay, including a running one that finished long ago and was requeued."""
    history = finished_job(driver, "done", queue="again")
    clock.advance(days=400)
    driver.introspect.requeue(history.id)
    running = claim_one(driver, "again")
    assert running.job.id == history.id
    ready = driver.enqueue("live", queue="ready")
    scheduled = driver.enqueue("live", queue="later", delay=timedelta(days=400))
    parked = driver.enqueue("live", queue="parked")
    driver.nack(claim_one(driver, "parked").token, "wait", park=True)
    live = {history.id, ready.id, scheduled.id, parked.id}
    clock.advance(days=300)  # the running job's lease lapsed: still running until claimed or rescued
    _check(driver.introspect.prune(ZERO), removed={}, remaining={})
    assert _ids(driver) == live
    assert driver.introspect.get(history.id).state == "running"  # type: ignore[union-attr]


def test_R01_oldest_finished_first_across_states(driver: JobDriver, clock: ManualClock) -> None:
    """Rows go in finished_at order, whatever their state or enqueue order."""
    first = driver.enqueue("a", queue="qa")
    second = driver.enqueue("b", queue="qb")
    third = driver.enqueue("c", queue="qc")
    clock.advance(seconds=1)
    driver.ack(claim_one(driver, "qc").token, None)  # third finishes first: done
    clock.advance(seconds=1)
    driver.introspect.cancel(first.id)  # then first: cancelled
    clock.advance(seconds=1)
    driver.nack(claim_one(driver, "qb").token, "boom", fail=True)  # then second: failed
    _check(driver.introspect.prune(ZERO, limit=1), removed={"done": 1}, remaining={"cancelled": 1, "failed": 1})
    assert _ids(driver) == {first.id, second.id}
    _check(driver.introspect.prune(ZERO, limit=1, batch=1), removed={"cancelled": 1}, remaining={"failed": 1})
    assert _ids(driver) == {second.id}
    assert third.id not in _ids(driver)


def test_R01_equal_finished_at_goes_in_enqueue_order(driver: JobDriver, clock: ManualClock) -> None:
    """Rows finished in the same millisecond go in enqueue order, whatever their state."""
    jobs = [driver.enqueue(name, queue=f"q{name}") for name in "abc"]
    clock.advance(seconds=1)
    for job, verb in zip(jobs[::-1], ("ack", "fail", "cancel"), strict=True):  # all at one instant
        if verb == "cancel":
            driver.introspect.cancel(job.id)
        elif verb == "ack":
            driver.ack(claim_one(driver, job.queue).token, None)
        else:
            driver.nack(claim_one(driver, job.queue).token, "boom", fail=True)
    _check(driver.introspect.prune(ZERO, limit=1), removed={"cancelled": 1}, remaining={"failed": 1, "done": 1})
    assert _ids(driver) == {jobs[1].id, jobs[2].id}
    _check(driver.introspect.prune(ZERO, limit=1), removed={"failed": 1}, remaining={"done": 1})
    assert _ids(driver) == {jobs[2].id}


def test_R01_limit_bounds_a_call_and_the_next_call_continues(driver: JobDriver, clock: ManualClock) -> None:
    """limit < eligible leaves remaining > 0; the next call takes the rest; a third removes nothing."""
    for _ in range(5):
        finished_job(driver, "done")
        clock.advance(milliseconds=10)
    _check(driver.introspect.prune(ZERO, limit=3, batch=2), removed={"done": 3}, remaining={"done": 2})
    _check(driver.introspect.prune(ZERO, limit=3, batch=2), removed={"done": 2}, remaining={})
    again = driver.introspect.prune(ZERO, limit=3, batch=2)
    _check(again, removed={}, remaining={})
    assert (again.total_removed, again.total_remaining) == (0, 0)
    assert _ids(driver) == set()


def test_R01_batch_larger_or_smaller_than_limit_removes_limit(driver: JobDriver) -> None:
    """Batches only slice the work: batch 1 or batch 1000 with limit 2 both remove 2 per call."""
    for _ in range(4):
        finished_job(driver, "dead")
    _check(driver.introspect.prune(ZERO, limit=2, batch=1), removed={"dead": 2}, remaining={"dead": 2})
    _check(driver.introspect.prune(ZERO, limit=2, batch=v.MAX_BULK_ROWS), removed={"dead": 2}, remaining={})


def test_R01_dry_run_writes_nothing_and_counts_everything_eligible(driver: JobDriver, clock: ManualClock) -> None:
    """dry_run deletes nothing and answers every eligible row as remaining, whatever the limit."""
    for state in ("done", "done", "failed"):
        finished_job(driver, state)
    driver.enqueue("live")
    clock.advance(days=8)
    before = all_jobs(driver)
    result = driver.introspect.prune(limit=1, dry_run=True)
    _check(result, removed={}, remaining={"done": 2, "failed": 1})
    assert result.total_remaining == 3
    assert all_jobs(driver) == before


def test_R01_refusals_are_coded_and_write_nothing(driver: JobDriver, clock: ManualClock) -> None:
    """A junk policy, limit, batch or dry_run is refused JC_OPTION_INVALID and nothing is deleted."""
    finished_job(driver, "done")
    clock.advance(days=2)
    before = all_jobs(driver)
    bad: list[dict[str, Any]] = [
        {"policy": "7d"},
        {"policy": {"done": 60}},
        {"policy": RetentionPolicy(done=-1)},
        {"policy": RetentionPolicy(failed=timedelta(milliseconds=-1))},
        {"policy": RetentionPolicy(dead=v.MAX_DELAY + timedelta(days=1))},
        {"limit": 0},
        {"limit": v.MAX_PRUNE_ROWS + 1},
        {"limit": True},
        {"limit": 2.0},
        {"limit": "10"},
        {"batch": 0},
        {"batch": v.MAX_BULK_ROWS + 1},
        {"batch": False},
        {"batch": None},
        {"dry_run": "yes"},
        {"dry_run": 0},
    ]
    for kwargs in bad:
        policy = kwargs.pop("policy", None)
        exc = _refusal(lambda: driver.introspect.prune(policy, **kwargs))  # noqa: B023 - called at once
        call = f"prune({policy!r}, **{kwargs!r})"
        assert exc is not None, f"{call} was accepted (validate.check_prune refuses it)"
        assert (exc.code, bool(exc.cause), bool(exc.fix)) == ("JC_OPTION_INVALID", True, True), call
    assert all_jobs(driver) == before
    with refused("JC_OPTION_INVALID"):
        RetentionPolicy(done="1d")  # type: ignore[arg-type]


# --- R02 ------------------------------------------------------------------------------


def test_R02_pruning_a_finished_key_holder_frees_nothing(driver: JobDriver, clock: ManualClock) -> None:
    """A key is free or held the same before and after its finished holders are pruned."""
    kept = finished_job(driver, "failed", key="k1")
    pruned = finished_job(driver, "done", key="k2")
    finished_job(driver, "done", key="k3")
    holder = driver.enqueue("job", queue="held", key="k3")
    assert holder.duplicate is False  # k3 was already free once its first holder finished
    clock.advance(days=2)
    result = driver.introspect.prune(RetentionPolicy(done=0, failed=None))
    _check(result, removed={"done": 2}, remaining={})
    assert driver.introspect.get(pruned.id) is None
    assert driver.introspect.get(kept.id) is not None
    # k1 (finished holder kept) and k2 (finished holder pruned) answer alike: free.
    again_kept, again_pruned = driver.enqueue("job", key="k1"), driver.enqueue("job", key="k2")
    assert (again_kept.duplicate, again_pruned.duplicate) == (False, False)
    # k3 is still held by its live holder, which pruning never touched.
    dup = driver.enqueue("job", queue="held", key="k3")
    assert (dup.duplicate, dup.id) == (True, holder.id)

"""Parity scenarios for rules D01-D05: jobs that wait on other jobs (``depends_on``).

Parents wait in queue ``p``, children in ``c``, so a claim of ``p`` never meets a child.
The drivers without the ``dependencies`` capability are held to D04's refusal only: every
other scenario carries ``requires("dependencies")``.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from jobcore.parity._support import LEASE, WAIT, all_jobs, claim_one, finished_job, refused, state_of, together

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import Job, JobFilter, JobSpec, JobState, RetentionPolicy

needs = pytest.mark.requires("dependencies")
SUSPENDED, READY, SCHEDULED, CANCELLED = JobState.SUSPENDED, JobState.READY, JobState.SCHEDULED, JobState.CANCELLED


def _parent(driver: JobDriver, **options: Any) -> Job:
    return driver.enqueue("part", queue="p", **options)


def _claim(driver: JobDriver, job: Job) -> Any:
    """Claim exactly ``job`` from its queue (it has top priority there)."""
    claimed = claim_one(driver, job.queue)
    assert claimed.job.id == job.id, f"queue {job.queue} handed out {claimed.job.id}, not {job.id}"
    return claimed


def _ack(driver: JobDriver, job: Job, result: Any = None) -> Job:
    answer = driver.ack(_claim(driver, job).token, result)
    assert answer is not None
    assert answer.state is JobState.DONE
    return answer


def _claimable(driver: JobDriver, queue: str = "c") -> list[str]:
    return [c.job.id for c in driver.claim([queue], worker_id="wc", limit=50, lease=LEASE).claimed]


def _cancelled_for(driver: JobDriver, child: Job, parent: Job, how: str) -> None:
    got = driver.introspect.get(child.id)
    assert got is not None
    assert got.state is CANCELLED, f"child {child.id} is {got.state}"
    assert got.last_error is not None
    assert got.last_error.type == "Cancelled"
    assert got.last_error.message == f"parent job {parent.id} ended {how}"
    assert got.finished_at is not None


# --- D01 ------------------------------------------------------------------------------


@needs
def test_D01_a_child_waits_until_every_parent_is_done(driver: JobDriver) -> None:
    """A child is suspended, never claimed, until its last parent is done; then it is due at once."""
    a, b = _parent(driver), _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[a.id, b])
    assert child.state is SUSPENDED
    assert _claimable(driver) == []
    _ack(driver, a)
    assert state_of(driver, child.id) is SUSPENDED
    assert _claimable(driver) == []
    _ack(driver, b)
    assert state_of(driver, child.id) is READY
    assert _claimable(driver) == [child.id]


@needs
def test_D01_a_child_of_done_parents_is_due_at_once(driver: JobDriver) -> None:
    """Depending only on jobs already done waits for nothing."""
    done = finished_job(driver, "done", queue="p")
    child = driver.enqueue("report", queue="c", depends_on=[done])
    assert child.state is READY
    assert _claimable(driver) == [child.id]


@needs
def test_D01_a_fan_out_fan_in_group_in_one_batch(driver: JobDriver) -> None:
    """enqueue_many stores parts and a final job depending on them by position; it runs last."""
    specs = [JobSpec(name="part", payload={"n": n}, queue="p") for n in range(4)]
    specs.append(JobSpec(name="report", queue="c", depends_on=range(4)))
    *parts, report = driver.enqueue_many(specs)
    assert [p.state for p in parts] == [READY] * 4
    assert report.state is SUSPENDED
    assert [j.id for j in driver.introspect.parents(report.id)] == [p.id for p in parts]
    for part in parts[:3]:
        _ack(driver, part, {"n": part.payload["n"] * 10})
    assert _claimable(driver) == []
    _ack(driver, parts[3], {"n": 30})
    claimed = claim_one(driver, "c")
    assert claimed.job.id == report.id
    assert sorted(j.result["n"] for j in driver.introspect.parents(report.id)) == [0, 10, 20, 30]


@needs
@pytest.mark.requires("notify")
def test_D01_a_released_child_wakes_its_queue(driver: JobDriver) -> None:
    """The ack of the last parent wakes subscribers of the child's queue, as an enqueue would."""
    parent = _parent(driver)
    driver.enqueue("report", queue="c", depends_on=[parent])
    woken = threading.Event()
    sub = driver.subscribe(["c"], lambda queue: woken.set())
    try:
        token = _claim(driver, parent).token
        time.sleep(0.2)  # a wake-up from before the ack (none is expected) would have come by now
        woken.clear()
        assert driver.ack(token, 1) is not None
        assert woken.wait(WAIT)
    finally:
        sub.close()


@needs
def test_D01_a_child_due_later_becomes_scheduled(driver: JobDriver, clock: ManualClock) -> None:
    """A released child keeps its own run_at: scheduled until then, claimed once due."""
    parent = _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[parent], delay=timedelta(minutes=5))
    assert child.state is SUSPENDED
    _ack(driver, parent)
    got = driver.introspect.get(child.id)
    assert got is not None
    assert got.state is SCHEDULED
    assert got.run_at == child.run_at
    assert _claimable(driver) == []
    clock.advance(minutes=5)
    assert _claimable(driver) == [child.id]


@needs
def test_D01_workers_racing_the_last_acks_release_the_child_once(driver: JobDriver) -> None:
    """Parents acked at the same instant by many threads: the child is released, exactly once."""
    for _ in range(5):  # each round a fresh group: the race has several chances to go wrong
        parents = driver.enqueue_many([JobSpec(name="part", queue="p") for _ in range(8)])
        child = driver.enqueue("report", queue="c", depends_on=parents)
        tokens = [c.token for c in driver.claim(["p"], worker_id="w", limit=8, lease=LEASE).claimed]
        assert len(tokens) == 8
        acked = together(8, lambda i, tokens=tokens: driver.ack(tokens[i], i))  # type: ignore[misc]
        assert all(job is not None and job.state is JobState.DONE for job in acked)
        assert state_of(driver, child.id) is READY
        assert _claimable(driver) == [child.id]
        assert _claimable(driver) == []


@needs
def test_D01_a_child_enqueued_while_its_parent_is_acked_is_never_stranded(driver: JobDriver) -> None:
    """A child stored while its parent is being acked ends ready, whichever step lands first."""
    def race(parent: Job, token: Any) -> Job:
        answers = together(2, lambda i: driver.ack(token) if i == 0 else driver.enqueue(
            "report", queue="c", depends_on=[parent.id]))
        return answers[1]  # type: ignore[no-any-return]

    for _ in range(5):
        parent = _parent(driver)
        child = race(parent, _claim(driver, parent).token)
        assert state_of(driver, child.id) is READY
        assert _claimable(driver) == [child.id]


# --- D02 ------------------------------------------------------------------------------


def _end(driver: JobDriver, clock: ManualClock, parent: Job, how: str) -> None:
    if how == "cancelled":
        assert driver.introspect.cancel(parent.id, "stop") is not None
        return
    claimed = _claim(driver, parent)
    if how == "failed":
        assert driver.nack(claimed.token, "boom", fail=True) is not None
    elif how == "dead":
        assert driver.nack(claimed.token, "boom") is not None
    else:  # buried: the final attempt's lease lapsed, and the next claim of its queue buries it
        clock.advance(LEASE + timedelta(seconds=1))
        assert [j.id for j in driver.claim(["p"], worker_id="w2", lease=LEASE).buried] == [parent.id]


@needs
@pytest.mark.parametrize("how", ["failed", "dead", "cancelled", "buried"])
def test_D02_a_parent_ending_otherwise_cancels_children_and_grandchildren(
    driver: JobDriver, clock: ManualClock, how: str
) -> None:
    """The children and their own children are cancelled, each entry naming its parent."""
    parent = _parent(driver, max_attempts=1)
    other = _parent(driver)
    child = driver.enqueue("merge", queue="c", depends_on=[parent, other])
    grandchild = driver.enqueue("report", queue="c", depends_on=[child])
    _end(driver, clock, parent, "dead" if how == "buried" else how)
    _cancelled_for(driver, child, parent, "dead" if how == "buried" else how)
    _cancelled_for(driver, grandchild, child, "cancelled")
    assert state_of(driver, other.id) is READY  # a sibling parent is not touched
    assert _claimable(driver) == []


@needs
def test_D02_on_parent_failure_run_waits_for_every_parent_to_finish(driver: JobDriver) -> None:
    """With on_parent_failure="run" a failed parent counts as finished: the child runs once all did."""
    a, b = _parent(driver), _parent(driver)
    child = driver.enqueue("cleanup", queue="c", depends_on=[a, b], on_parent_failure="run")
    assert driver.nack(_claim(driver, a).token, "boom", fail=True) is not None
    assert state_of(driver, child.id) is SUSPENDED
    _ack(driver, b)
    assert _claimable(driver) == [child.id]


# --- D03 ------------------------------------------------------------------------------


@needs
def test_D03_a_refused_group_writes_nothing(driver: JobDriver) -> None:
    """One unknown parent in a group refuses the whole batch: no part, no final job is stored."""
    before = {j.id for j in all_jobs(driver)}
    specs = [JobSpec(name="part", queue="p"), JobSpec(name="part", queue="p")]
    specs.append(JobSpec(name="report", queue="c", depends_on=[0, 1, "987654321"]))
    with refused("JC_DEPENDENCY_NOT_FOUND"):
        driver.enqueue_many(specs)
    assert {j.id for j in all_jobs(driver)} == before


@needs
def test_D03_a_group_member_answered_by_its_key_holder_links_to_the_holder(driver: JobDriver) -> None:
    """A spec whose key a live job holds answers that job; a later spec depending on it waits on the holder."""
    holder = driver.enqueue("part", queue="p", key="k1")
    first, report = driver.enqueue_many([
        JobSpec(name="part", queue="p", key="k1"), JobSpec(name="report", queue="c", depends_on=[0]),
    ])
    assert first.duplicate
    assert first.id == holder.id
    assert [j.id for j in driver.introspect.parents(report.id)] == [holder.id]
    _ack(driver, holder)
    assert _claimable(driver) == [report.id]


# --- D04 ------------------------------------------------------------------------------


@needs
@pytest.mark.parametrize("missing", ["987654321", "not-an-id"])
def test_D04_an_unknown_parent_is_refused_and_nothing_written(driver: JobDriver, missing: str) -> None:
    """depends_on naming no stored job is JC_DEPENDENCY_NOT_FOUND, and no job is stored."""
    with refused("JC_DEPENDENCY_NOT_FOUND"):
        driver.enqueue("report", queue="c", depends_on=[missing])
    assert all_jobs(driver) == []


@needs
def test_D04_a_removed_parent_is_unknown(driver: JobDriver) -> None:
    """A parent removed before the child is enqueued is as unknown as one never stored."""
    parent = _parent(driver)
    assert driver.introspect.remove(parent.id) is not None
    with refused("JC_DEPENDENCY_NOT_FOUND"):
        driver.enqueue("report", queue="c", depends_on=[parent.id])
    assert all_jobs(driver) == []


@pytest.mark.parametrize("links", [[0], [1], [2, 0]], ids=["itself", "later", "later-and-earlier"])
def test_D04_a_cycle_in_a_batch_is_refused(driver: JobDriver, links: list[int]) -> None:
    """A spec naming itself or a later spec (the only way to draw a cycle) is JC_DEPENDENCY_INVALID."""
    specs = [JobSpec(name="a", depends_on=links), JobSpec(name="b", depends_on=[0]), JobSpec(name="c")]
    with refused("JC_DEPENDENCY_INVALID"):
        driver.enqueue_many(specs)
    assert all_jobs(driver) == []


@pytest.mark.parametrize("bad", [
    {"depends_on": "123"}, {"depends_on": [1.5]}, {"depends_on": [True]}, {"depends_on": [0]},
    {"depends_on": [None]}, {"depends_on": [str(n) for n in range(1, 1002)]}, {"depends_on": 7},
], ids=["a-string", "a-float", "a-bool", "a-position-outside-a-batch", "none-item", "too-many", "an-int"])
def test_D04_depends_on_junk_is_refused(driver: JobDriver, bad: dict[str, Any]) -> None:
    """Anything but ids, Jobs and (in a batch) earlier positions, or over 1000 parents, is refused first."""
    with refused("JC_DEPENDENCY_INVALID"):
        driver.enqueue("report", **bad)
    assert all_jobs(driver) == []


@pytest.mark.parametrize("mode", ["", "never", None, 1])
def test_D04_an_unknown_on_parent_failure_is_refused(driver: JobDriver, mode: Any) -> None:
    """on_parent_failure is "cancel" or "run"; anything else is JC_OPTION_INVALID."""
    with refused("JC_OPTION_INVALID"):
        driver.enqueue("report", on_parent_failure=mode)
    with refused("JC_OPTION_INVALID"):
        driver.enqueue_many([{"name": "report", "depends_on": [], "on_parent_failure": mode}])
    assert all_jobs(driver) == []


@needs
@pytest.mark.parametrize("state", ["failed", "dead", "cancelled"])
def test_D04_a_parent_that_already_ended_otherwise_is_refused_unless_run(driver: JobDriver, state: str) -> None:
    """The child could never run: JC_DEPENDENCY_INVALID, nothing written; with "run" it is due at once."""
    parent = finished_job(driver, state, queue="p")
    with refused("JC_DEPENDENCY_INVALID"):
        driver.enqueue("report", queue="c", depends_on=[parent])
    assert [j.id for j in all_jobs(driver)] == [parent.id]
    child = driver.enqueue("report", queue="c", depends_on=[parent], on_parent_failure="run")
    assert child.state is READY


def test_D04_a_store_without_dependencies_refuses_depends_on(driver: JobDriver) -> None:
    """Without the capability, depends_on is JC_NOT_SUPPORTED and nothing is written; jobs have no relatives."""
    plain = driver.enqueue("part")
    driver.capabilities = driver.capabilities - {"dependencies"}  # type: ignore[misc]
    with refused("JC_NOT_SUPPORTED"):
        driver.enqueue("report", depends_on=[plain])
    with refused("JC_NOT_SUPPORTED"):
        driver.enqueue_many([JobSpec(name="part"), JobSpec(name="report", depends_on=[0])])
    assert [j.id for j in all_jobs(driver)] == [plain.id]
    assert driver.introspect.children(plain.id) == []


# --- D05 ------------------------------------------------------------------------------


@needs
def test_D05_parents_and_children_are_listed(driver: JobDriver) -> None:
    """introspect.parents and .children list a job's relatives, oldest first; an unknown id is not found."""
    a, b = _parent(driver), _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[b, a, b.id])
    other = driver.enqueue("audit", queue="c", depends_on=[a])
    assert [j.id for j in driver.introspect.parents(child.id)] == [a.id, b.id]
    assert [j.id for j in driver.introspect.children(a.id)] == [child.id, other.id]
    assert [j.id for j in driver.introspect.children(b.id)] == [child.id]
    assert driver.introspect.parents(a.id) == []
    assert driver.introspect.children(child.id) == []
    with refused("JC_JOB_NOT_FOUND"):
        driver.introspect.parents("987654321")
    with refused("JC_JOB_NOT_FOUND"):
        driver.introspect.children("x")


@needs
def test_D05_resume_runs_a_waiting_child_now(driver: JobDriver) -> None:
    """An operator's resume overrides the wait: the child is due now, and its parents' end later changes nothing."""
    parent = _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[parent])
    assert driver.introspect.resume(child.id).state is READY
    assert driver.ack(_claim(driver, child).token) is not None
    assert driver.nack(_claim(driver, parent).token, "boom", fail=True) is not None
    assert state_of(driver, child.id) is JobState.DONE


@needs
def test_D05_requeue_of_a_child_cancelled_for_its_parent_runs_it(driver: JobDriver) -> None:
    """Requeue (an operator's word) makes a cancelled child ready whatever its parents did."""
    parent = _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[parent])
    driver.introspect.cancel(parent.id)
    assert driver.introspect.requeue(child.id).state is READY
    assert _claimable(driver) == [child.id]


@needs
def test_D05_cancel_many_cancels_the_children_of_every_parent_it_cancels(driver: JobDriver) -> None:
    """A bulk cancel cascades like a single one; the count is of the jobs it matched."""
    a, b = _parent(driver), _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[a])
    result = driver.introspect.cancel_many(JobFilter(queue="p"), reason="stop")
    assert (result.affected, result.remaining) == (2, 0)
    assert state_of(driver, b.id) is CANCELLED
    _cancelled_for(driver, child, a, "cancelled")


@needs
def test_D05_removing_a_done_parent_neither_strands_nor_releases(driver: JobDriver) -> None:
    """A done parent removed still counts as done: the child keeps waiting on the other, then runs."""
    done, live = _parent(driver), _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[done, live])
    _ack(driver, done)
    assert driver.introspect.remove(done.id) is not None
    assert state_of(driver, child.id) is SUSPENDED
    assert [j.id for j in driver.introspect.parents(child.id)] == [live.id]
    _ack(driver, live)
    assert _claimable(driver) == [child.id]


@needs
def test_D05_pruning_done_parents_neither_strands_nor_releases(driver: JobDriver, clock: ManualClock) -> None:
    """Pruning a done parent is removal: the child waits for the rest, then runs."""
    done, live = _parent(driver), _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[done, live])
    _ack(driver, done)
    clock.advance(hours=2)
    pruned = driver.introspect.prune(RetentionPolicy(done=timedelta(hours=1)))
    assert pruned.total_removed == 1
    assert state_of(driver, child.id) is SUSPENDED
    _ack(driver, live)
    assert _claimable(driver) == [child.id]


@needs
def test_D05_removing_an_unfinished_parent_cancels_its_children(driver: JobDriver) -> None:
    """A parent removed before it finished can never be done: children are cancelled naming it."""
    parent, other = _parent(driver), _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[parent, other])
    assert driver.introspect.remove(parent.id) is not None
    _cancelled_for(driver, child, parent, "removed")
    assert [j.id for j in driver.introspect.parents(child.id)] == [other.id]


@needs
def test_D05_removing_a_waiting_child_leaves_its_parent_alone(driver: JobDriver) -> None:
    """A removed child is gone from its parent's children; the parent settles as usual."""
    parent = _parent(driver)
    child = driver.enqueue("report", queue="c", depends_on=[parent])
    assert driver.introspect.remove(child.id) is not None
    assert driver.introspect.children(parent.id) == []
    _ack(driver, parent)
    assert all_jobs(driver, JobFilter(queue="c")) == []

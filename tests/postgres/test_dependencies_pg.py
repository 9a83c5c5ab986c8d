"""Rules D on PostgreSQL: the interleavings the parity race scenarios may or may not hit,
forced here with a caller's open transaction (transactional enqueue).

The enqueue of a child locks the parents it names; an ack of a parent waits on that lock
(up to ``SETTLE_LOCK_WAIT``, then answers ``JC_DB_LOCKED`` and is tried again), and the
trigger that settles the parent's children then runs with a fresh snapshot, so it sees the
child committed meanwhile. What each job ends as is read back from the store.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest

from jobcore.errors import BackendLocked
from jobcore.records import JobState

LEASE = 30


def _state(driver: Any, job_id: str) -> JobState:
    job = driver.introspect.get(job_id)
    assert job is not None
    return job.state  # type: ignore[no-any-return]


def _acked_while(driver: Any, pg_url: str, settle: Any, held: bool) -> tuple[str, str]:
    """Hold a child's enqueue open and settle its parent meanwhile, then commit.

    The enqueue holds the parent's row. ``held=False``: it commits 30 ms into the settle,
    which waits on the row (within the driver's ``SETTLE_LOCK_WAIT``) and then lands.
    ``held=True``: it stays open, so the settle answers ``JC_DB_LOCKED`` having changed
    nothing, and lands when tried again after the commit, as a worker tries it."""
    parent = driver.enqueue("part", queue="p")
    token = driver.claim(["p"], worker_id="w", lease=LEASE).claimed[0].token
    answers: list[Any] = []
    with psycopg.connect(pg_url) as conn:
        child = driver.enqueue("report", queue="c", depends_on=[parent], connection=conn)
        assert child.state is JobState.SUSPENDED
        if held:
            with pytest.raises(BackendLocked):
                settle(token)
            assert _state(driver, parent.id) is JobState.RUNNING
            conn.commit()
            answers.append(settle(token))
        else:
            worker = threading.Thread(target=lambda: answers.append(settle(token)))
            worker.start()
            time.sleep(0.03)
            conn.commit()
            worker.join(10)
    assert answers
    assert answers[0] is not None
    return parent.id, child.id


@pytest.mark.parametrize("held", [False, True], ids=["waited", "retried"])
def test_an_ack_waiting_on_a_childs_enqueue_releases_the_child(driver: Any, pg_url: str, held: bool) -> None:
    _, child = _acked_while(driver, pg_url, lambda token: driver.ack(token, 1), held)
    assert _state(driver, child) is JobState.READY
    assert [c.job.id for c in driver.claim(["c"], worker_id="w", lease=LEASE).claimed] == [child]


@pytest.mark.parametrize("held", [False, True], ids=["waited", "retried"])
def test_a_failure_waiting_on_a_childs_enqueue_cancels_the_child(driver: Any, pg_url: str, held: bool) -> None:
    parent, child = _acked_while(driver, pg_url, lambda token: driver.nack(token, "boom", fail=True), held)
    job = driver.introspect.get(child)
    assert job is not None
    assert job.state is JobState.CANCELLED
    assert job.last_error is not None
    assert job.last_error.message == f"parent job {parent} ended failed"


def test_a_rolled_back_enqueue_leaves_no_child_and_the_parent_settles_alone(driver: Any, pg_url: str) -> None:
    parent = driver.enqueue("part", queue="p")
    with psycopg.connect(pg_url) as conn:
        driver.enqueue("report", queue="c", depends_on=[parent], connection=conn)
        conn.rollback()
    token = driver.claim(["p"], worker_id="w", lease=LEASE).claimed[0].token
    assert driver.ack(token, 1) is not None
    assert driver.introspect.children(parent.id) == []
    assert driver.claim(["c"], worker_id="w", lease=LEASE).claimed == ()


def test_two_parents_acked_in_overlapping_transactions_release_the_child(driver: Any, pg_url: str) -> None:
    """Write skew, forced: each ack's trigger runs before the other commits. The later one
    (the driver's ack: its first try waits ``SETTLE_LOCK_WAIT`` on the child, its second as
    long as it takes) waits on the child's lock and then sees the earlier parent done, so
    the child is released."""
    first, second = driver.enqueue("part", queue="p"), driver.enqueue("part", queue="p")
    child = driver.enqueue("report", queue="c", depends_on=[first, second])
    tokens = {c.job.id: c.token for c in driver.claim(["p"], worker_id="w", limit=2, lease=LEASE).claimed}

    def items(job_id: str) -> dict[str, Any]:
        token = tokens[job_id]
        return {
            "items": json.dumps([[int(job_id), token.worker_id, token.claim_no, None]]), "now": driver._now(),
            "finished": driver.finish_channel,
        }

    done: list[int] = []
    with psycopg.connect(pg_url) as one:
        assert len(one.execute(driver.q.ACK_MANY, items(first.id)).fetchall()) == 1  # open, not committed

        def later() -> None:
            done.append(len([a for a in driver.ack_many([(tokens[second.id], None)]) if a is not None]))

        worker = threading.Thread(target=later)
        worker.start()
        time.sleep(0.3)
        assert done == []  # waiting on the child, locked by the first ack's trigger
        one.commit()
        worker.join(10)
    assert done == [1]
    assert _state(driver, child.id) is JobState.READY

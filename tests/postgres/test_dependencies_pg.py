"""Rules D on PostgreSQL: the interleavings the parity race scenarios may or may not hit,
forced here with a caller's open transaction (transactional enqueue).

The enqueue of a child locks the parents it names; an ack of a parent waits on that lock,
and the trigger that settles the parent's children then runs with a fresh snapshot, so it
sees the child committed meanwhile. What each job ends as is read back from the store.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from jobcore.records import JobState

LEASE = 30


def _state(driver: Any, job_id: str) -> JobState:
    job = driver.introspect.get(job_id)
    assert job is not None
    return job.state  # type: ignore[no-any-return]


def _acked_while(driver: Any, pg_url: str, settle: Any) -> tuple[str, str]:
    """Hold a child's enqueue open, settle its parent meanwhile (it must wait), then commit."""
    parent = driver.enqueue("part", queue="p")
    token = driver.claim(["p"], worker_id="w", lease=LEASE).claimed[0].token
    answers: list[Any] = []
    with psycopg.connect(pg_url) as conn:
        child = driver.enqueue("report", queue="c", depends_on=[parent], connection=conn)
        assert child.state is JobState.SUSPENDED
        worker = threading.Thread(target=lambda: answers.append(settle(token)))
        worker.start()
        time.sleep(0.3)
        assert answers == []  # the settle waits on the parent's row, locked by the enqueue
        conn.commit()
    worker.join(10)
    assert answers
    assert answers[0] is not None
    return parent.id, child.id


def test_an_ack_waiting_on_a_childs_enqueue_releases_the_child(driver: Any, pg_url: str) -> None:
    _, child = _acked_while(driver, pg_url, lambda token: driver.ack(token, 1))
    assert _state(driver, child) is JobState.READY
    assert [c.job.id for c in driver.claim(["c"], worker_id="w", lease=LEASE).claimed] == [child]


def test_a_failure_waiting_on_a_childs_enqueue_cancels_the_child(driver: Any, pg_url: str) -> None:
    parent, child = _acked_while(driver, pg_url, lambda token: driver.nack(token, "boom", fail=True))
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

"""A job's row locked by another session: a worker's calls on it do not wait, the rest land.

An open transaction holding a row of the jobs table (an operator's ``SELECT ... FOR UPDATE``
in psql left open, a bulk ``UPDATE`` of the table, an application's transaction) used to hold
every worker call on that row until the statement timeout (9 s by default): a heartbeat, and
the worker's whole ack batch with it, so one locked job made a worker's other jobs lapse and
run again (510 completed jobs ran twice in ``tests/faults/test_row_lock.py``'s scenario).

Now the worker verbs (heartbeat, heartbeat_many, progress, start, ack, ack_many, nack) wait at most
``SETTLE_LOCK_WAIT`` on such a row and answer ``JC_DB_LOCKED``, nothing of that job changed;
a batch carries out its other items first and says which were locked.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver
from psycopg import sql

from jobcore.errors import BackendLocked, BackendTimeout
from jobcore.records import Claimed, JobState

LEASE = timedelta(seconds=30)
WAIT_BOUND = 2.0
"""Seconds a call on a locked row may take (the driver's wait is 0.1 s; a loaded machine is slow).
Before, each waited for the statement timeout: 9 s by default, here ``STATEMENT_TIMEOUT``."""
STATEMENT_TIMEOUT = 6_000


@contextlib.contextmanager
def row_locked(pg_url: str, driver: Any, job_id: str, mode: str = "FOR UPDATE") -> Iterator[psycopg.Connection[Any]]:
    """Another session's open transaction holding job ``job_id``'s row (``mode``)."""
    with psycopg.connect(pg_url) as conn:
        got = conn.execute(
            sql.SQL("SELECT id FROM {} WHERE id = %s " + mode).format(sql.Identifier(driver.schema, "jobs")),
            (int(job_id),),
        ).fetchall()
        assert got, f"job {job_id} not found to lock"
        yield conn
        conn.rollback()


def _claimed(driver: Any, count: int, *, start: bool = True) -> list[Claimed]:
    for n in range(count):
        driver.enqueue("locked.work", payload={"n": n})
    claimed = list(driver.claim(["default"], worker_id="w1", limit=count, lease=LEASE, start=start).claimed)
    assert len(claimed) == count
    return claimed


@pytest.fixture
def slow_driver(make: Any) -> Any:
    """A driver whose statements the server cancels after STATEMENT_TIMEOUT ms, as in production."""
    return make(statement_timeout=timedelta(milliseconds=STATEMENT_TIMEOUT))


def timed(call: Any) -> tuple[Any, float]:
    began = time.monotonic()
    try:
        return call(), time.monotonic() - began
    except Exception as exc:  # the answer is the error
        return exc, time.monotonic() - began


def test_an_ack_batch_with_one_locked_row_lands_the_others_at_once(slow_driver: Any, pg_url: str) -> None:
    driver = slow_driver
    claimed = _claimed(driver, 4)
    with row_locked(pg_url, driver, claimed[1].job.id):
        answer, took = timed(lambda: driver.ack_many([(c.token, {"n": i}) for i, c in enumerate(claimed)]))
        assert took < WAIT_BOUND, f"the batch waited {took:.1f}s on one locked row"
        assert isinstance(answer, BackendLocked), answer
        assert answer.code == "JC_DB_LOCKED"
        assert answer.locked == (1,)
        assert answer.answers is not None
        assert [a is not None for a in answer.answers] == [True, False, True, True]
        assert f"job {claimed[1].job.id} not settled" in answer.cause
        states = [driver.introspect.get(c.job.id).state for c in claimed]
        assert states == [JobState.DONE, JobState.RUNNING, JobState.DONE, JobState.DONE]
    # The lock gone, the locked item lands on its own token: its lease was never lost.
    job = driver.ack(claimed[1].token, {"n": 1})
    assert job is not None
    assert (job.state, job.result) == (JobState.DONE, {"n": 1})


def test_a_landed_only_batch_answers_the_same_way(slow_driver: Any, pg_url: str) -> None:
    driver = slow_driver
    claimed = _claimed(driver, 3)
    with row_locked(pg_url, driver, claimed[0].job.id, "FOR NO KEY UPDATE"):
        answer, took = timed(lambda: driver.ack_many([(c.token, None) for c in claimed], landed_only=True))
        assert took < WAIT_BOUND
        assert isinstance(answer, BackendLocked), answer
        assert (answer.answers, answer.locked) == ([False, True, True], (0,))
    assert driver.ack_many([(claimed[0].token, None)], landed_only=True) == [True]


def test_a_batch_whose_locked_row_is_changed_by_its_holder_answers_it_lost(slow_driver: Any, pg_url: str) -> None:
    """The holder cancels the job and commits while the batch waits: no error, that item did not land."""
    driver = slow_driver
    claimed = _claimed(driver, 2)
    table = sql.Identifier(driver.schema, "jobs")
    with psycopg.connect(pg_url) as conn:
        conn.execute(sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(table), (int(claimed[0].job.id),))
        timer = threading.Timer(0.05, lambda: (conn.execute(
            sql.SQL("UPDATE {} SET state = 'cancelled', worker_id = NULL WHERE id = %s").format(table),
            (int(claimed[0].job.id),),
        ), conn.commit()))
        timer.start()
        answer, _ = timed(lambda: driver.ack_many([(c.token, None) for c in claimed], landed_only=True))
        timer.join()
    assert answer == [False, True]


def test_a_heartbeat_on_a_locked_row_answers_at_once_and_lands_after(slow_driver: Any, pg_url: str) -> None:
    driver = slow_driver
    (one,) = _claimed(driver, 1)
    with row_locked(pg_url, driver, one.job.id):
        answer, took = timed(lambda: driver.heartbeat(one.token, LEASE))
        assert took < WAIT_BOUND, f"the heartbeat waited {took:.1f}s"
        assert isinstance(answer, BackendLocked), answer
        assert isinstance(answer, BackendTimeout)  # whoever retries timeouts retries it
        assert f"job {one.job.id}'s row locked" in answer.cause
        assert "its lease was not renewed" in answer.cause
        answer, took = timed(lambda: driver.progress(one.token, 0.5, "half"))
        assert took < WAIT_BOUND, f"waited {took:.1f}s"
        assert isinstance(answer, BackendLocked), answer
    assert driver.heartbeat(one.token, LEASE) is True
    assert driver.progress(one.token, 0.5, "half") is True


def test_a_nack_on_a_locked_row_answers_at_once_and_changes_nothing(slow_driver: Any, pg_url: str) -> None:
    driver = slow_driver
    (one,) = _claimed(driver, 1)
    with row_locked(pg_url, driver, one.job.id):
        answer, took = timed(lambda: driver.nack(one.token, "boom"))
        assert took < WAIT_BOUND, f"waited {took:.1f}s"
        assert isinstance(answer, BackendLocked), answer
    stored = driver.introspect.get(one.job.id)
    assert (stored.state, stored.errors) == (JobState.RUNNING, ())
    job = driver.nack(one.token, "boom")
    assert job is not None
    assert job.state is JobState.SCHEDULED


def test_a_start_batch_with_one_locked_row_starts_the_others(slow_driver: Any, pg_url: str) -> None:
    driver = slow_driver
    held = _claimed(driver, 3, start=False)
    with row_locked(pg_url, driver, held[2].job.id):
        answer, took = timed(lambda: driver.start([c.token for c in held]))
        assert took < WAIT_BOUND, f"waited {took:.1f}s"
        assert isinstance(answer, BackendLocked), answer
        assert (answer.answers, answer.locked) == ([True, True, False], (2,))
        assert [driver.introspect.get(c.job.id).attempt for c in held] == [1, 1, 0]
    assert driver.start([held[2].token]) == [True]


def test_a_heartbeat_batch_with_one_locked_row_renews_the_others(slow_driver: Any, pg_url: str) -> None:
    """The batch renews every free row at once and names the locked one, whose lease stays as it was."""
    driver = slow_driver
    claimed = _claimed(driver, 3)
    before = [driver.introspect.get(c.job.id).lease_expires_at for c in claimed]
    with row_locked(pg_url, driver, claimed[0].job.id):
        answer, took = timed(lambda: driver.heartbeat_many([c.token for c in claimed], timedelta(minutes=10)))
        assert took < WAIT_BOUND, f"the batch waited {took:.1f}s on one locked row"
        assert isinstance(answer, BackendLocked), answer
        assert (answer.answers, answer.locked) == ([False, True, True], (0,))
        assert "the rows of 1 of the batch's jobs locked" in answer.cause
        assert f"job {claimed[0].job.id} not renewed" in answer.cause
        after = [driver.introspect.get(c.job.id).lease_expires_at for c in claimed]
        assert after[0] == before[0]
        assert all(late - early > timedelta(minutes=5) for early, late in zip(before[1:], after[1:], strict=True))
    assert driver.heartbeat_many([claimed[0].token], LEASE) == [True]


def test_a_short_lock_is_waited_for_not_reported(slow_driver: Any, pg_url: str) -> None:
    """A row held for a moment (as the fleet's own statements hold one) is waited for: the ack lands."""
    driver = slow_driver
    (one,) = _claimed(driver, 1)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(sql.Identifier(driver.schema, "jobs")),
            (int(one.job.id),),
        )
        timer = threading.Timer(0.02, conn.rollback)
        timer.start()
        job = driver.ack(one.token)
        timer.join()
    assert job is not None
    assert job.state is JobState.DONE


def test_an_operator_verb_still_waits_for_the_lock(slow_driver: Any, pg_url: str) -> None:
    """Only the worker's verbs pass a lock by: ``cancel`` waits for the holder as any SQL would."""
    driver = slow_driver
    job = driver.enqueue("locked.work")
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(sql.Identifier(driver.schema, "jobs")),
            (int(job.id),),
        )
        timer = threading.Timer(0.5, conn.rollback)
        timer.start()
        answer, took = timed(lambda: driver.introspect.cancel(job.id))
        timer.join()
    assert not isinstance(answer, Exception), answer
    assert took >= 0.4
    assert driver.introspect.get(job.id).state is JobState.CANCELLED


def test_the_async_driver_passes_a_locked_row_by_too(pg_url: str, pool: Any) -> None:
    import asyncio  # noqa: PLC0415

    from fixtures import postgres as fx  # noqa: PLC0415

    async def scenario() -> None:
        schema = fx.schema_name()
        driver = AsyncPostgresDriver.from_url(f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}")
        try:
            await driver.migrate()
            for n in range(2):
                await driver.enqueue("locked.work", payload={"n": n})
            claimed = (await driver.claim(["default"], worker_id="w1", limit=2, lease=LEASE)).claimed
            with row_locked(pg_url, driver, claimed[0].job.id):
                began = time.monotonic()
                with pytest.raises(BackendLocked) as caught:
                    await driver.ack_many([(c.token, None) for c in claimed], landed_only=True)
                assert time.monotonic() - began < WAIT_BOUND
                assert (caught.value.answers, caught.value.locked) == ([False, True], (0,))
                with pytest.raises(BackendLocked):
                    await driver.heartbeat(claimed[0].token, LEASE)
            assert await driver.ack_many([(claimed[0].token, None)], landed_only=True) == [True]
        finally:
            await driver.close()
            fx.drop_schema(pool, schema)

    asyncio.run(scenario())


def test_a_child_enqueued_in_an_open_transaction_holds_back_only_its_running_parent(
    slow_driver: Any, pg_url: str
) -> None:
    """jobcore's own way to such a lock: ``enqueue(..., depends_on=[running], connection=conn)``
    marks the parent in the caller's transaction, which holds the parent's row until it ends.
    The parent's ack waits for that commit; the batch's other jobs do not, and once the
    transaction commits the parent's ack lands and releases its new child (D01)."""
    driver = slow_driver
    claimed = _claimed(driver, 3)
    parent = claimed[0]
    with psycopg.connect(pg_url) as conn:  # the caller's transaction, open until the block ends
        child = driver.enqueue("locked.child", depends_on=[parent.job.id], connection=conn)
        answer, took = timed(lambda: driver.ack_many([(c.token, None) for c in claimed], landed_only=True))
        assert took < WAIT_BOUND, f"the batch waited {took:.1f}s on the parent's row"
        assert isinstance(answer, BackendLocked), answer
        assert (answer.answers, answer.locked) == ([False, True, True], (0,))
    # Committed: the parent's ack lands now, and its child is released (due) by it.
    assert driver.ack_many([(parent.token, None)], landed_only=True) == [True]
    assert driver.introspect.get(child.id).state is JobState.READY

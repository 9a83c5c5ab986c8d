"""Held claims on PostgreSQL (F04, capability ``deferred_start``): the ``held`` column and ``start``."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import attrs
import psycopg
import pytest
from psycopg import sql

from jobcore.clock import ManualClock
from jobcore.errors import OptionInvalid
from jobcore.records import JobState

LEASE = timedelta(seconds=30)


def _held(pool: Any, driver: Any, job_id: str) -> bool:
    with pool.connection() as conn:
        row = conn.execute(
            sql.SQL("SELECT held FROM {} WHERE id = %s").format(sql.Identifier(driver.schema, "jobs")), (int(job_id),)
        ).fetchone()
    assert row is not None
    return bool(row[0])


def test_the_driver_declares_deferred_start(driver: Any) -> None:
    """The capability the worker looks for, with ``start`` beside it."""
    assert "deferred_start" in driver.capabilities
    assert callable(driver.start)


def test_a_held_claim_that_lapses_costs_nothing_and_is_never_buried(
    driver: Any, pool: Any, clock: ManualClock
) -> None:
    """Held on its only attempt and lapsed: the next claim takes it as it was, no error, no burial."""
    job = driver.enqueue("held", max_attempts=1)
    first = driver.claim(["default"], worker_id="w1", lease=LEASE, start=False).claimed[0]
    # Answered as it will stand once started; the row counts nothing yet.
    assert (first.job.state, first.job.attempt, first.job.attempted_at) == (JobState.RUNNING, 1, clock.now())
    assert first.job.lease_expires_at == clock.now() + LEASE
    stored = driver.introspect.get(job.id)
    assert (stored.attempt, stored.attempted_at) == (0, None)
    assert _held(pool, driver, job.id)
    clock.advance(LEASE)
    again = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert again.buried == ()
    assert [(c.job.id, c.job.attempt, c.job.errors) for c in again.claimed] == [(job.id, 1, ())]
    assert again.claimed[0].job.attempted_at == clock.now()
    assert again.claimed[0].token.claim_no == first.token.claim_no + 1
    assert not _held(pool, driver, job.id)
    assert driver.start([first.token]) == [False]  # the lapsed holder's token is dead


def test_a_held_claim_may_be_reclaimed_held_again(driver: Any, pool: Any, clock: ManualClock) -> None:
    """Held, lapsed, claimed held again: still attempt 0, still no error; starting it then counts once."""
    job = driver.enqueue("held", max_attempts=1)
    driver.claim(["default"], worker_id="w1", lease=LEASE, start=False)
    clock.advance(LEASE)
    second = driver.claim(["default"], worker_id="w2", lease=LEASE, start=False).claimed[0]
    assert (second.job.attempt, second.job.errors) == (1, ())  # answered as it will stand once started
    assert driver.introspect.get(job.id).attempt == 0
    assert driver.start([second.token]) == [True]
    started = driver.introspect.get(job.id)
    assert started is not None
    assert (started.attempt, started.attempted_at) == (1, clock.now())


def test_rescue_puts_a_lapsed_held_claim_back_unchanged(driver: Any, pool: Any, clock: ManualClock) -> None:
    """rescue: a lapsed held job goes back ready with its attempt and history as they were."""
    job = driver.enqueue("held", max_attempts=1)
    driver.claim(["default"], worker_id="w1", lease=LEASE, start=False)
    clock.advance(LEASE)
    rescued = driver.introspect.rescue()
    assert (rescued.requeued, rescued.buried) == (1, ())
    back = driver.introspect.get(job.id)
    assert back is not None
    assert (back.state, back.attempt, back.errors, back.worker_id) == (JobState.READY, 0, (), None)
    assert not _held(pool, driver, job.id)


def test_a_started_attempt_that_lapses_counts_and_is_buried_on_the_last(
    driver: Any, clock: ManualClock
) -> None:
    """start makes the attempt count: lapsing then on the only attempt buries the job (C08), and
    with attempts left the lapse is recorded as LeaseExpired (C07)."""
    poison = driver.enqueue("poison", max_attempts=1)
    retry = driver.enqueue("retry", max_attempts=2)
    taken = driver.claim(["default"], worker_id="w1", limit=2, lease=LEASE, start=False).claimed
    assert driver.start([c.token for c in taken]) == [True, True]
    clock.advance(LEASE)
    result = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert [(j.id, j.state, j.last_error.type if j.last_error else None) for j in result.buried] == [
        (poison.id, JobState.DEAD, "LeaseLapsedFinalAttempt")
    ]
    assert [(c.job.id, c.job.attempt) for c in result.claimed] == [(retry.id, 2)]
    assert [(e.type, e.attempt) for e in result.claimed[0].job.errors] == [("LeaseExpired", 1)]


def test_start_is_fenced_idempotent_and_answers_in_input_order(driver: Any, clock: ManualClock) -> None:
    """A current token answers True (again after it started, changing nothing); a stale or
    foreign one False; a repeated token answers at each of its places."""
    a, b = driver.enqueue("a"), driver.enqueue("b")
    taken = {c.job.id: c for c in driver.claim(["default"], worker_id="w", limit=2, lease=LEASE, start=False).claimed}
    ta, tb = taken[a.id].token, taken[b.id].token
    stale = attrs.evolve(ta, claim_no=ta.claim_no - 1)
    foreign = attrs.evolve(tb, worker_id="someone-else")
    assert driver.start([ta, stale, ta, foreign]) == [True, False, True, False]
    first = driver.introspect.get(a.id)
    assert first is not None
    assert (first.attempt, first.attempted_at) == (1, clock.now())
    clock.advance(seconds=5)
    assert driver.start([tb, ta]) == [True, True]
    again = driver.introspect.get(a.id)
    assert again is not None
    assert (again.attempt, again.attempted_at, again.lease_expires_at) == (
        1, first.attempted_at, first.lease_expires_at,
    )
    started_b = driver.introspect.get(b.id)
    assert started_b is not None
    assert (started_b.attempt, started_b.attempted_at) == (1, clock.now())
    assert driver.start([]) == []
    assert driver.ack(ta) is not None
    assert driver.start([ta]) == [False]  # finished: no longer current


def test_start_and_claim_refuse_what_is_not_theirs(driver: Any) -> None:
    """Not a token in the batch, or a start flag that is not a real bool: JC_OPTION_INVALID, nothing written."""
    job = driver.enqueue("x")
    for junk in (["not a token"], "tokens", None, 7):
        with pytest.raises(OptionInvalid) as info:
            driver.start(junk)
        assert info.value.code == "JC_OPTION_INVALID"
    for flag in ("no", 0, 1, None):
        with pytest.raises(OptionInvalid):
            driver.claim(["default"], worker_id="w", lease=LEASE, start=flag)
    kept = driver.introspect.get(job.id)
    assert kept is not None
    assert kept.state is JobState.READY


def test_settling_a_held_claim_starts_it_first(driver: Any, clock: ManualClock) -> None:
    """ack / ack_many count the held attempt; nack counts it (or gives it back: attempt unchanged)."""
    jobs = [driver.enqueue(n, max_attempts=1) for n in ("acked", "landed", "given_back", "failed_once")]
    taken = {
        c.job.id: c.token
        for c in driver.claim(["default"], worker_id="w", limit=4, lease=LEASE, start=False).claimed
    }
    done = driver.ack(taken[jobs[0].id], "ok")
    assert done is not None
    assert (done.state, done.attempt, done.attempted_at) == (JobState.DONE, 1, clock.now())
    assert driver.ack_many([(taken[jobs[1].id], None)], landed_only=True) == [True]
    landed = driver.introspect.get(jobs[1].id)
    assert landed is not None
    assert (landed.state, landed.attempt) == (JobState.DONE, 1)
    back = driver.nack(taken[jobs[2].id], "given back unstarted", counts_as_attempt=False)
    assert back is not None
    assert (back.state, back.attempt) == (JobState.SCHEDULED, 0)
    assert back.errors[-1].attempt == 1  # the entry names the attempt the settle ended
    dead = driver.nack(taken[jobs[3].id], "boom")
    assert dead is not None
    assert (dead.state, dead.attempt) == (JobState.DEAD, 1)  # its only attempt, started by the nack


def test_cancel_clears_a_held_claim(driver: Any, pool: Any) -> None:
    """A cancelled held job is finished and holds nothing; its token stops matching."""
    job = driver.enqueue("x")
    token = driver.claim(["default"], worker_id="w", lease=LEASE, start=False).claimed[0].token
    assert driver.introspect.cancel(job.id) is not None
    assert not _held(pool, driver, job.id)
    assert driver.start([token]) == [False]


def test_start_is_a_hot_update(driver: Any, pg_url: str) -> None:
    """START sets no indexed column (nor state), so PostgreSQL updates the row in place (HOT)."""
    driver.enqueue("x")
    token = driver.claim(["default"], worker_id="w", lease=LEASE, start=False).claimed[0].token
    # A session of its own: a backend's unflushed counts of earlier statements would add up here.
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction(force_rollback=True):
        rows = conn.execute(driver.q.START, {
            "items": json.dumps([[int(token.job_id), token.worker_id, token.claim_no]]), "now": None,
        }).fetchall()
        assert rows == [(1,)]
        counts = conn.execute(
            "SELECT pg_stat_get_xact_tuples_updated(%(t)s::regclass),"
            " pg_stat_get_xact_tuples_hot_updated(%(t)s::regclass)",
            {"t": sql.Identifier(driver.schema, "jobs").as_string(conn)},
        ).fetchone()
    assert counts == (1, 1)

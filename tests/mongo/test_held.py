"""Held claims on the MongoDB driver (rule F04, capability ``deferred_start``).

``claim(..., start=False)`` hands jobs out running under a fresh token with their attempt
not started, marked ``held: true`` in the document while held; ``start(tokens)`` starts
them, fenced on each token. What the documents hold is checked here beside the answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from pymongo import MongoClient, monitoring

from fixtures import mongo as fx
from jobcore.clock import ManualClock
from jobcore.errors import OptionInvalid
from jobcore.records import ClaimToken, JobState

LEASE = timedelta(seconds=30)


def _doc(driver: MongoDriver, job_id: str) -> dict[str, Any]:
    found = driver._jobs.find_one({"_id": int(job_id)})
    assert found is not None
    return found


def _hold(driver: MongoDriver, limit: int = 1, worker: str = "w1") -> list[Any]:
    return list(driver.claim(["default"], worker_id=worker, limit=limit, lease=LEASE, start=False).claimed)


def test_deferred_start_is_declared(driver: MongoDriver) -> None:
    """The driver offers held claims on every server, standalone included."""
    assert "deferred_start" in driver.capabilities


def test_a_held_claim_is_running_with_its_attempt_unstarted(driver: MongoDriver, clock: ManualClock) -> None:
    """start=False: running, a new token and lease, attempt and attempted_at unmoved, `held` stored."""
    job = driver.enqueue("a")
    taken = _hold(driver)[0]
    # Answered as it will stand once started; the document counts nothing yet.
    assert (taken.job.state, taken.job.attempt, taken.job.attempted_at) == (JobState.RUNNING, 1, clock.now())
    assert taken.token.claim_no == 1
    assert taken.job.lease_expires_at == clock.now() + LEASE
    stored = _doc(driver, job.id)
    assert stored["held"] is True
    assert "attempted_at" not in stored
    assert driver.start([taken.token]) == [True]
    stored = _doc(driver, job.id)
    assert "held" not in stored
    assert (stored["attempt"], stored["attempted_at"]) == (1, clock.now())
    assert stored["lease_expires_at"] == clock.now() + LEASE  # start does not move the lease


def test_a_lapsed_held_claim_costs_nothing_and_is_never_buried(driver: MongoDriver, clock: ManualClock) -> None:
    """Held and lapsed on its only attempt, three times over: reclaimed held again, rescued, never buried."""
    job = driver.enqueue("a", max_attempts=1)
    first = _hold(driver)[0]
    clock.advance(LEASE)
    again = driver.claim(["default"], worker_id="w2", lease=LEASE, start=False)
    assert again.buried == ()
    assert [(c.job.id, c.job.attempt, c.token.claim_no) for c in again.claimed] == [(job.id, 1, 2)]
    assert _doc(driver, job.id)["held"] is True
    assert driver.start([first.token]) == [False]
    clock.advance(LEASE)
    rescued = driver.introspect.rescue()
    assert (rescued.requeued, rescued.buried) == (1, ())
    stored = _doc(driver, job.id)
    assert (stored["state"], stored["attempt"], stored["errors"]) == ("ready", 0, [])
    assert "held" not in stored
    taken = driver.claim(["default"], worker_id="w3", lease=LEASE).claimed[0]
    assert (taken.job.attempt, taken.job.errors) == (1, ())
    assert "held" not in _doc(driver, job.id)


def test_a_started_attempt_that_lapses_counts_and_buries_on_the_last(driver: MongoDriver, clock: ManualClock) -> None:
    """Started, then lapsed: LeaseExpired recorded on reclaim; on the last attempt buried (C08), by claim and rescue."""
    retried, poison = driver.enqueue("r", max_attempts=2), driver.enqueue("p", max_attempts=1)
    held = {c.job.id: c for c in _hold(driver, limit=2)}
    assert driver.start([held[retried.id].token, held[poison.id].token]) == [True, True]
    clock.advance(LEASE)
    result = driver.claim(["default"], worker_id="w2", lease=LEASE, start=False)
    assert [(j.id, j.state, j.attempt) for j in result.buried] == [(poison.id, JobState.DEAD, 1)]
    assert [(c.job.id, c.job.attempt) for c in result.claimed] == [(retried.id, 2)]  # as it will stand started
    assert [e.type for e in result.claimed[0].job.errors] == ["LeaseExpired"]
    assert driver.start([result.claimed[0].token]) == [True]
    clock.advance(LEASE)
    swept = driver.introspect.rescue()
    assert (swept.requeued, [(j.id, j.state) for j in swept.buried]) == (0, [(retried.id, JobState.DEAD)])


def test_start_is_fenced_idempotent_and_answers_in_order(driver: MongoDriver, clock: ManualClock) -> None:
    """A batch of current, repeated, started, superseded and junk tokens answers each in input order,
    moving each held attempt once."""
    a, b, c = (driver.enqueue(n) for n in "abc")
    held = {t.job.id: t.token for t in _hold(driver, limit=3)}
    assert driver.start([held[a.id]]) == [True]
    assert driver.start([held[a.id], held[b.id], held[b.id]]) == [True, True, True]  # all matched: no read
    assert [_doc(driver, j.id)["attempt"] for j in (a, b, c)] == [1, 1, 0]
    driver.introspect.cancel(c.id)
    ghost = ClaimToken(job_id="999999", worker_id="w1", claim_no=1)
    junk = ClaimToken(job_id="not-an-id", worker_id="w1", claim_no=1)
    stale = ClaimToken(job_id=a.id, worker_id="w1", claim_no=held[a.id].claim_no + 1)
    assert driver.start([held[c.id], ghost, junk, stale]) == [False] * 4  # none matched: no read
    assert driver.start([junk, held[b.id], held[c.id], stale, held[a.id]]) == [False, True, False, False, True]
    assert [_doc(driver, j.id)["attempt"] for j in (a, b, c)] == [1, 1, 0]
    assert driver.start([]) == []


def test_start_refuses_what_is_not_a_token_and_claim_a_start_that_is_not_a_bool(driver: MongoDriver) -> None:
    """start([...]) with a non-token, or claim(start=...) with a non-bool, is JC_OPTION_INVALID and writes nothing."""
    job = driver.enqueue("a")
    taken = _hold(driver)[0]
    for junk in (["not a token"], [taken.token, None], "abc", taken.token, 5):
        with pytest.raises(OptionInvalid) as caught:
            driver.start(junk)
        assert caught.value.code == "JC_OPTION_INVALID"
    assert _doc(driver, job.id)["attempt"] == 0
    driver.enqueue("b")
    for flag in ("no", 0, 1, None):
        with pytest.raises(OptionInvalid):
            driver.claim(["default"], worker_id="w", lease=LEASE, start=flag)  # type: ignore[arg-type]
    assert driver._jobs.count_documents({"state": "running"}) == 1


def test_settling_a_held_claim_starts_it_first(driver: MongoDriver) -> None:
    """ack, ack_many and nack of held tokens count the attempt; a held job given back keeps its attempt."""
    jobs = [driver.enqueue(n) for n in ("ack", "batch1", "batch2", "nack", "give-back", "park")]
    held = {c.job.id: c.token for c in _hold(driver, limit=len(jobs))}
    done = driver.ack(held[jobs[0].id], "ok")
    assert done is not None
    assert (done.state, done.attempt, done.attempted_at is not None) == (JobState.DONE, 1, True)
    batch = driver.ack_many([(held[jobs[1].id], 1), (held[jobs[2].id], 2)])
    assert [(j.state, j.attempt) for j in batch if j is not None] == [(JobState.DONE, 1)] * 2
    failed = driver.nack(held[jobs[3].id], RuntimeError("boom"))
    assert failed is not None
    assert (failed.state, failed.attempt, [(e.type, e.attempt) for e in failed.errors]) == (
        JobState.SCHEDULED, 1, [("RuntimeError", 1)],
    )
    back = driver.nack(held[jobs[4].id], "given back unstarted", counts_as_attempt=False)
    assert back is not None
    assert (back.state, back.attempt) == (JobState.SCHEDULED, 0)
    parked = driver.nack(held[jobs[5].id], "park", park=True, counts_as_attempt=False)
    assert parked is not None
    assert (parked.state, parked.attempt) == (JobState.SUSPENDED, 0)
    assert driver._jobs.count_documents({"held": {"$exists": True}}) == 0


def test_cancelling_a_held_job_clears_the_hold(driver: MongoDriver) -> None:
    """An operator's cancel of a held job leaves no `held` behind, and its token starts nothing."""
    job = driver.enqueue("a")
    taken = _hold(driver)[0]
    assert driver.introspect.cancel(job.id) is not None
    assert "held" not in _doc(driver, job.id)
    assert driver.start([taken.token]) == [False]


class _Commands(monitoring.CommandListener):
    """Names of the commands a client sent, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def listened(server: fx.MongoServer) -> Iterator[tuple[MongoClient[Any], _Commands]]:
    """A client of its own whose commands are recorded (requested before ``make``, so it outlives it)."""
    seen = _Commands()
    client: MongoClient[Any] = MongoClient(server.url, event_listeners=[seen])
    yield client, seen
    client.close()


def test_start_takes_one_round_trip_unless_the_batch_is_mixed(
    listened: tuple[MongoClient[Any], _Commands], make: Any,
) -> None:
    """One bulk write answers a batch whose tokens are all current (or none); a mixed batch adds one read."""
    client, seen = listened
    driver = make(client=client)
    a, b = driver.enqueue("a"), driver.enqueue("b")
    held = {c.job.id: c.token for c in _hold(driver, limit=2)}
    stale = ClaimToken(job_id=a.id, worker_id="w1", claim_no=99)
    for tokens, answers, sent in [
        ([held[a.id]], [True], ["update"]),
        ([held[a.id], held[b.id]], [True, True], ["update"]),
        ([stale, stale], [False, False], ["update"]),
        ([held[a.id], stale], [True, False], ["update", "find"]),
    ]:
        seen.names.clear()
        assert driver.start(tokens) == answers
        assert seen.names == sent

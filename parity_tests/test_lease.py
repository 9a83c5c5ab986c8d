"""Parity scenarios for rules L01-L04: heartbeats, and tokens that no longer match."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, cast

import attrs
import pytest
from jobcore.parity._support import LEASE, all_jobs, claim_one, refused, together

from jobcore import validate as v
from jobcore.clock import ManualClock
from jobcore.driver import BatchHeartbeats, JobDriver
from jobcore.records import JobState

# --- L01 ------------------------------------------------------------------------------


def test_L01_heartbeat_moves_the_lease(driver: JobDriver, clock: ManualClock) -> None:
    """A current token's heartbeat sets lease_expires_at to now + lease and answers True."""
    job = driver.enqueue("a")
    claimed = claim_one(driver, lease=10)
    clock.advance(seconds=4)
    assert driver.heartbeat(claimed.token, timedelta(seconds=30)) is True
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.lease_expires_at == clock.now() + timedelta(seconds=30)
    assert (got.state, got.worker_id, got.claim_no, got.attempt) == (JobState.RUNNING, "w1", 1, 1)


def test_L01_heartbeat_may_shorten_the_lease(driver: JobDriver, clock: ManualClock) -> None:
    """The new expiry is now + lease even when that is sooner than before."""
    job = driver.enqueue("a")
    token = claim_one(driver, lease=600).token
    assert driver.heartbeat(token, 1.5) is True
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.lease_expires_at == clock.now() + timedelta(milliseconds=1500)


def test_L01_heartbeats_keep_the_job_from_reclaim(driver: JobDriver, clock: ManualClock) -> None:
    """A holder heartbeating within its lease keeps the job far past the first lease."""
    driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    for _ in range(5):
        clock.advance(seconds=8)
        assert driver.heartbeat(token, 10) is True
    assert driver.claim(["default"], worker_id="w2", lease=LEASE).claimed == ()
    done = driver.ack(token, 1)
    assert done is not None
    assert done.attempt == 1
    assert done.errors == ()


def test_L01_late_heartbeat_before_reclaim_lands(driver: JobDriver, clock: ManualClock) -> None:
    """A heartbeat after the lease lapsed but before any reclaim still lands."""
    job = driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    clock.advance(seconds=15)
    assert driver.heartbeat(token, 10) is True
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.lease_expires_at == clock.now() + timedelta(seconds=10)
    result = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert (result.claimed, result.buried) == ((), ())
    assert driver.introspect.rescue().requeued == 0
    done = driver.ack(token, "mine")
    assert done is not None
    assert (done.state, done.result, done.errors) == (JobState.DONE, "mine", ())


def test_L01_late_heartbeat_saves_a_final_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """A late heartbeat on the final attempt, before any claim looked, prevents burial."""
    driver.enqueue("a", max_attempts=1)
    token = claim_one(driver, lease=10).token
    clock.advance(seconds=30)
    assert driver.heartbeat(token, 10) is True
    assert driver.claim(["default"], worker_id="w2", lease=LEASE).buried == ()


def test_L01_only_the_exact_token_is_current(driver: JobDriver) -> None:
    """Another worker id or another claim_no with the same job id does not match."""
    job = driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    before = driver.introspect.get(job.id)
    for forged in (
        attrs.evolve(token, worker_id="w2"),
        attrs.evolve(token, claim_no=token.claim_no + 1),
        attrs.evolve(token, claim_no=token.claim_no - 1),
    ):
        assert driver.heartbeat(forged, 60) is False
        assert driver.ack(forged, "x") is None
        assert driver.nack(forged, "x") is None
    assert driver.introspect.get(job.id) == before


def test_L01_a_worker_cannot_renew_a_job_another_holds(driver: JobDriver, clock: ManualClock) -> None:
    """A heartbeat naming a job another worker holds (same claim number) answers False and moves nothing."""
    driver.enqueue("a")
    theirs = driver.enqueue("a")
    own = claim_one(driver, worker="w1", lease=10).token
    held = claim_one(driver, worker="w2", lease=10).token
    assert held.claim_no == own.claim_no
    before = driver.introspect.get(theirs.id)
    clock.advance(seconds=5)
    assert driver.heartbeat(attrs.evolve(own, job_id=theirs.id), 600) is False
    assert driver.introspect.get(theirs.id) == before
    assert driver.heartbeat(own, 600) is True
    clock.advance(seconds=5)  # w2's lease lapses on time; w1 renewed its own
    assert claim_one(driver, worker="w3").job.id == theirs.id


def _batch(driver: JobDriver) -> BatchHeartbeats:
    return cast(BatchHeartbeats, driver)


def test_L01_heartbeat_many_renews_each_current_token(driver: JobDriver, clock: ManualClock) -> None:
    """A batch renews each current token (a late one too), answers False, changing nothing, for any other."""
    # Superseded, settled and forged tokens answer False; a token given twice answers twice.
    for n in range(5):
        driver.enqueue("a", payload=n, max_attempts=5)
    live = driver.claim(["default"], worker_id="w1", limit=2, lease=10).claimed
    late = claim_one(driver, worker="w1", lease=2)
    done = claim_one(driver, worker="w1", lease=10)
    lapsed = claim_one(driver, worker="w1", lease=1)
    assert driver.ack(done.token) is not None
    clock.advance(seconds=1.5)  # lapsed's lease ran out: w2 takes it over
    assert claim_one(driver, worker="w2", lease=600).job.id == lapsed.job.id
    superseded = lapsed.token
    clock.advance(seconds=1)  # now late's ran out too, and nothing reclaimed it
    forged = attrs.evolve(live[0].token, worker_id="w9")
    untouched = {c.job.id: driver.introspect.get(c.job.id) for c in (done, lapsed)}
    tokens = [live[0].token, superseded, live[1].token, done.token, late.token, forged, live[0].token]
    assert _batch(driver).heartbeat_many(tokens, timedelta(seconds=40)) == [True, False, True, False, True, False, True]
    for claimed in (*live, late):
        got = driver.introspect.get(claimed.job.id)
        assert got is not None
        assert (got.state, got.worker_id, got.lease_expires_at) == (
            JobState.RUNNING, "w1", clock.now() + timedelta(seconds=40),
        )
    assert {job_id: driver.introspect.get(job_id) for job_id in untouched} == untouched
    assert _batch(driver).heartbeat_many([], 40) == []
    clock.advance(seconds=30)  # the renewed leases still run: nothing is reclaimed
    assert driver.claim(["default"], worker_id="w3", limit=10, lease=LEASE).claimed == ()


# --- L02 ------------------------------------------------------------------------------


def test_L02_superseded_token_changes_nothing(driver: JobDriver, clock: ManualClock) -> None:
    """After a reclaim, the old token gets False/None and the job is untouched."""
    job = driver.enqueue("a", max_attempts=5)
    old = claim_one(driver, worker="w1", lease=10).token
    clock.advance(seconds=10)
    new = claim_one(driver, worker="w2", lease=60).token
    snapshot = driver.introspect.get(job.id)
    assert driver.heartbeat(old, 600) is False
    assert driver.ack(old, "stale") is None
    assert driver.nack(old, ValueError("stale")) is None
    assert driver.nack(old, "stale", fail=True) is None
    assert driver.nack(old, "stale", park=True) is None
    assert driver.ack_many([(old, "stale")]) == [None]
    assert driver.introspect.get(job.id) == snapshot
    assert driver.heartbeat(new, 60) is True


def test_L02_new_holders_result_counts(driver: JobDriver, clock: ManualClock) -> None:
    """The new holder's ack lands; the old holder's later ack does not overwrite it."""
    job = driver.enqueue("a")
    old = claim_one(driver, worker="w1", lease=10).token
    clock.advance(seconds=11)
    new = claim_one(driver, worker="w2").token
    done = driver.ack(new, {"by": "w2"})
    assert done is not None
    assert driver.ack(old, {"by": "w1"}) is None
    assert driver.nack(old, "w1 failed") is None
    got = driver.introspect.get(job.id)
    assert got is not None
    assert (got.state, got.result) == (JobState.DONE, {"by": "w2"})
    assert got == done


def test_L02_same_worker_reclaiming_gets_a_new_token(driver: JobDriver, clock: ManualClock) -> None:
    """Even the same worker id reclaiming its own lapsed job invalidates its older token."""
    job = driver.enqueue("a")
    old = claim_one(driver, worker="w1", lease=10).token
    clock.advance(seconds=10)
    new = claim_one(driver, worker="w1").token
    assert new != old
    held = driver.introspect.get(job.id)
    assert driver.heartbeat(old, 600) is False
    assert driver.introspect.get(job.id) == held
    assert driver.ack(old) is None
    assert driver.ack(new) is not None


def test_L02_superseded_heartbeat_does_not_extend_the_new_lease(driver: JobDriver, clock: ManualClock) -> None:
    """An old holder's heartbeat after a reclaim leaves the new lease to lapse on time."""
    job = driver.enqueue("a", max_attempts=5)
    old = claim_one(driver, worker="w1", lease=10).token
    clock.advance(seconds=10)
    claim_one(driver, worker="w2", lease=20)
    clock.advance(seconds=5)
    assert driver.heartbeat(old, 600) is False
    clock.advance(seconds=15)  # the new holder's lease lapses now, as it would have without the old heartbeat
    third = claim_one(driver, worker="w3")
    assert (third.job.id, third.job.claim_no) == (job.id, 3)


def test_L02_late_ack_racing_a_reclaim_never_both(driver: JobDriver, clock: ManualClock) -> None:
    """A late ack and a reclaim racing: exactly one lands, and the job shows that one."""
    job = driver.enqueue("a", max_attempts=5)
    old = claim_one(driver, worker="w1", lease=10).token
    clock.advance(seconds=10)
    acked, claimed = together(2, lambda i: (
        driver.ack(old, "late") if i == 0 else driver.claim(["default"], worker_id="w2", lease=LEASE)
    ))
    got = driver.introspect.get(job.id)
    assert got is not None
    if acked is not None:
        assert claimed.claimed == ()
        assert (got.state, got.result, got.errors) == (JobState.DONE, "late", ())
    else:
        assert [c.job.id for c in claimed.claimed] == [job.id]
        assert (got.state, got.worker_id, got.result) == (JobState.RUNNING, "w2", None)


# --- L03 ------------------------------------------------------------------------------


def _assert_token_dead(driver: JobDriver, token: Any, job_id: str) -> None:
    before = driver.introspect.get(job_id)
    assert driver.heartbeat(token, 60) is False
    assert driver.ack(token, "late") is None
    assert driver.nack(token, "late") is None
    assert driver.ack_many([(token, "late")]) == [None]
    assert driver.introspect.get(job_id) == before


def test_L03_cancelled_job_token_is_dead(driver: JobDriver) -> None:
    """A token of a job cancelled under its worker answers False/None."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    assert driver.introspect.cancel(job.id, "stop") is not None
    _assert_token_dead(driver, token, job.id)


def test_L03_removed_job_token_is_dead(driver: JobDriver) -> None:
    """A token of a job that was cancelled and then removed answers False/None."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    driver.introspect.cancel(job.id)
    assert driver.introspect.remove(job.id) is not None
    _assert_token_dead(driver, token, job.id)
    assert driver.introspect.get(job.id) is None


@pytest.mark.parametrize("how", ["ack", "nack_dead", "nack_failed", "nack_retry", "nack_park"])
def test_L03_settled_job_token_is_dead(driver: JobDriver, how: str) -> None:
    """Once a token settled its job (finished, retried or parked), it settles nothing more."""
    job = driver.enqueue("a", max_attempts=1 if how == "nack_dead" else 3)
    token = claim_one(driver).token
    answer = {
        "ack": lambda: driver.ack(token, 1),
        "nack_dead": lambda: driver.nack(token, "x"),
        "nack_failed": lambda: driver.nack(token, "x", fail=True),
        "nack_retry": lambda: driver.nack(token, "x"),
        "nack_park": lambda: driver.nack(token, "x", park=True),
    }[how]()
    assert answer is not None
    _assert_token_dead(driver, token, job.id)


def test_L03_requeued_job_old_token_is_dead(driver: JobDriver) -> None:
    """A token from before a requeue never matches the requeued job's new claim."""
    job = driver.enqueue("a")
    old = claim_one(driver).token
    driver.ack(old)
    driver.introspect.requeue(job.id)
    new = claim_one(driver).token
    assert new.claim_no == old.claim_no + 1
    _assert_token_dead(driver, old, job.id)
    assert driver.ack(new) is not None


def test_L03_retried_job_old_token_cannot_heartbeat(driver: JobDriver, clock: ManualClock) -> None:
    """After a retry the same worker claims again: its old token neither renews nor settles the new claim."""
    job = driver.enqueue("a", max_attempts=3)
    old = claim_one(driver, worker="w1", lease=10).token
    assert driver.nack(old, "retry") is not None
    new = claim_one(driver, worker="w1", lease=10).token
    assert (new.worker_id, new.claim_no) == (old.worker_id, old.claim_no + 1)
    _assert_token_dead(driver, old, job.id)
    clock.advance(seconds=10)  # the new claim lapses on time: the old heartbeat moved nothing
    assert claim_one(driver, worker="w2").job.id == job.id


def test_L03_token_for_unknown_job(driver: JobDriver) -> None:
    """A token naming a job id the store never had answers False/None and writes nothing."""
    job = driver.enqueue("a")
    token = claim_one(driver).token
    before = driver.introspect.get(job.id)
    for never in {f"{job.id}0", f"{job.id}1", "0", "no-such-job"} - {job.id}:
        assert driver.introspect.get(never) is None  # the store never had it
        forged = attrs.evolve(token, job_id=never)
        assert driver.heartbeat(forged, 60) is False
        assert driver.ack(forged, "x") is None
        assert driver.nack(forged, "x") is None
        assert driver.ack_many([(forged, "x"), (forged, "y")]) == [None, None]
        assert driver.introspect.get(never) is None  # and still has not
    assert driver.introspect.get(job.id) == before
    assert [j.id for j in all_jobs(driver)] == [job.id]
    assert driver.ack(token, "mine") is not None


OUT_OF_RANGE_CLAIM_NOS = [2**63, 2**64, 2**70, -1, -(2**70)]
"""Claim numbers no store holds (beyond a signed 64-bit integer, or negative)."""


@pytest.mark.parametrize("claim_no", OUT_OF_RANGE_CLAIM_NOS, ids=["2**63", "2**64", "2**70", "-1", "-(2**70)"])
def test_L03_claim_numbers_beyond_64_bits_match_nothing(driver: JobDriver, claim_no: int) -> None:
    """A token whose claim_no no store can hold answers as superseded; the job is untouched."""
    job = driver.enqueue("a")
    real = claim_one(driver).token
    before = driver.introspect.get(job.id)
    odd = attrs.evolve(real, claim_no=claim_no)
    assert driver.heartbeat(odd, 60) is False
    assert driver.ack(odd, {"r": 1}) is None
    assert driver.nack(odd, "boom") is None
    assert driver.ack_many([(odd, None)]) == [None]
    if "deferred_start" in driver.capabilities:
        assert driver.start([odd]) == [False]  # type: ignore[attr-defined]
    assert driver.introspect.get(job.id) == before
    assert driver.ack(real) is not None


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_L03_claim_number_of_another_type_matches_nothing(driver: JobDriver, kind: str) -> None:
    """A claim_no equal in value to the current one but not an int (True for 1, 1.0) matches nothing."""
    job = driver.enqueue("a")
    real = claim_one(driver).token
    assert real.claim_no == 1
    odd = attrs.evolve(real, claim_no=True if kind == "bool" else 1.0)
    assert driver.heartbeat(odd, 60) is False
    assert driver.ack(odd) is None
    assert driver.nack(odd, "boom") is None
    got = driver.introspect.get(job.id)
    assert got is not None
    assert got.state is JobState.RUNNING
    assert driver.heartbeat(real, 60) is True


@pytest.mark.parametrize("job_id", [str(2**63), str(2**64), str(2**70), "9" * 19, "9" * 40])
def test_L03_token_ids_beyond_64_bits_match_nothing(driver: JobDriver, job_id: str) -> None:
    """A token naming an id beyond any store's 64-bit ids answers False/None, never an error."""
    driver.enqueue("a")
    real = claim_one(driver).token
    odd = attrs.evolve(real, job_id=job_id)
    assert driver.heartbeat(odd, 60) is False
    assert driver.ack(odd) is None
    assert driver.nack(odd, "boom") is None
    assert driver.ack_many([(odd, None)]) == [None]
    assert driver.heartbeat(real, 60) is True


# --- L04 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lease",
    [0, -5, math.nan, math.inf, -math.inf, True, "10", None, timedelta(0), timedelta(seconds=-1),
     v.MAX_LEASE + timedelta(seconds=1)],
    ids=["zero", "negative", "nan", "inf", "neg_inf", "bool", "str", "none", "zero_delta", "negative_delta",
         "over_max"],
)
def test_L04_bad_heartbeat_lease_refused(driver: JobDriver, lease: Any) -> None:
    """A non-finite or non-positive lease is refused and the lease stays as it was."""
    job = driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    before = driver.introspect.get(job.id)
    with refused("JC_OPTION_INVALID"):
        driver.heartbeat(token, lease)
    assert driver.introspect.get(job.id) == before


def test_L04_refused_even_for_a_stale_token(driver: JobDriver) -> None:
    """The lease is checked before the token: a bad lease is refused, never answered False."""
    driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    driver.ack(token)
    with refused("JC_OPTION_INVALID"):
        driver.heartbeat(token, -1)


def test_L04_heartbeat_many_refuses_the_whole_batch(driver: JobDriver) -> None:
    """A bad lease or one item that is not a ClaimToken refuses the whole batch; no lease moves."""
    # The lease is checked even for stale tokens, as heartbeat checks it.
    job = driver.enqueue("a")
    token = claim_one(driver, lease=10).token
    before = driver.introspect.get(job.id)
    for lease in (0, math.nan, True, "10", None, v.MAX_LEASE + timedelta(seconds=1)):
        with refused("JC_OPTION_INVALID"):
            _batch(driver).heartbeat_many([token], lease)
    for junk in (None, "1", 7, ("1", "w", 1)):
        with refused("JC_OPTION_INVALID"):
            _batch(driver).heartbeat_many([token, junk], 60)
    with refused("JC_OPTION_INVALID"):
        _batch(driver).heartbeat_many(token, 60)  # one token, not a batch of them
    assert driver.introspect.get(job.id) == before
    assert driver.ack(token) is not None
    with refused("JC_OPTION_INVALID"):
        _batch(driver).heartbeat_many([token], -1)


@pytest.mark.parametrize("token", [None, "1", ("1", "w", 1)], ids=["none", "str", "tuple"])
def test_L04_non_token_refused(driver: JobDriver, token: Any) -> None:
    """Something that is not a ClaimToken is refused, not answered False."""
    job = driver.enqueue("a")
    claim_one(driver)
    before = driver.introspect.get(job.id)
    with refused("JC_OPTION_INVALID"):
        driver.heartbeat(token, 10)
    assert driver.introspect.get(job.id) == before

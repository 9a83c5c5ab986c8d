"""Fault scenarios (rules F01-F07): the fault is injected, never waited for, on every driver it applies to.

Faults reach the worker through :class:`~jobcore.parity._faulty.FaultyDriver` (memory
included): a store that stops answering, a call frozen on a stalled connection, a reply
held back or lost. Clock skew needs another process: a client under Debian's
``faketime`` (drivers with ``shared_store``). The heavier faults (a TCP proxy frozen for
real, a server restarted, worker processes paused or killed) live in tests/faults/ of
jobcore's own run.

The worker's local deadlines follow the scenario's ``ManualClock`` (its ``monotonic()``),
so moving the clock moves both the store's leases and the worker's deadlines, as real
time moves both.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from jobcore.parity._faulty import FaultyDriver
from jobcore.parity._proxy import Proxy
from jobcore.parity._skewed import skewed_client
from jobcore.parity._support import LEASE, WAIT, claim_one, job_in, make_worker, running, wait_until

from jobcore.clock import ManualClock
from jobcore.current import connect
from jobcore.driver import DeferredStart, JobDriver
from jobcore.errors import BackendError, LeaseLost, OptionInvalid
from jobcore.records import Job, JobState
from jobcore.registry import JobContext, Registry
from jobcore.worker import Worker

MARGIN = timedelta(seconds=6)
"""The default margin of a 30 s lease (lease/5)."""


def _shared_store(driver_factory: Any) -> tuple[JobDriver, str]:
    """A driver on its store's own clock and the URL another process reaches that store with
    (scenarios for drivers declaring ``shared_store``; skipped on the others)."""
    store: JobDriver = driver_factory(store_clock=True)
    if "shared_store" not in store.capabilities:
        pytest.skip("driver lacks capability shared_store")
    url = getattr(store, "url", None)
    if not isinstance(url, str):
        pytest.fail(f"{type(store).__name__} declares shared_store but has no str `url` reaching its store")
    return store, url


def held(driver: JobDriver) -> DeferredStart:
    """The driver as its ``deferred_start`` side (scenarios marked ``requires("deferred_start")``)."""
    return driver  # type: ignore[return-value]


# -- F01 store time ---------------------------------------------------------------------


def test_F01_a_delay_counts_from_the_store_clock(driver: JobDriver, clock: ManualClock) -> None:
    """``delay`` is counted from the driver's (the store's) clock: the job is due then, not before."""
    job = driver.enqueue("later", delay=timedelta(minutes=30))
    assert job.run_at == job.created_at + timedelta(minutes=30)
    assert job.state is JobState.SCHEDULED
    clock.advance(timedelta(minutes=30) - timedelta(milliseconds=1))
    assert driver.claim(["default"], worker_id="w", lease=LEASE).claimed == ()
    clock.advance(milliseconds=1)
    taken = claim_one(driver)
    assert taken.job.id == job.id


@pytest.mark.parametrize("offset", ["+1h", "-1h"])
def test_F01_a_client_whose_clock_is_off_takes_no_live_lease_and_runs_nothing_early(
    driver_factory: Any, offset: str
) -> None:
    """A client an hour off takes no live lease and nothing early, writes live leases, rescues nothing live."""
    store, url = _shared_store(driver_factory)
    live = store.enqueue("held", queue="f01")
    holder = claim_one(store, "f01", worker="w-correct", lease=timedelta(seconds=60))
    assert holder.job.id == live.id
    later = store.enqueue("later", queue="f01", delay=timedelta(minutes=30))
    due = store.enqueue("due", queue="f01")
    assert store.leases.acquire("f01-slot", 1, "w-correct", 60)

    with skewed_client(url, offset) as client:
        shift = (client.wall() - store.clock.now()).total_seconds()
        assert abs(abs(shift) - 3600) < 60, f"faketime did not shift the client's clock ({shift:.0f}s)"
        before = store.clock.now()
        taken = client.call("claim", queue="f01", lease=30)
        assert [job_id for job_id, _ in taken["claimed"]] == [due.id], "took a live lease or a job not yet due"
        assert taken["buried"] == []
        stored = store.introspect.get(due.id)
        assert stored is not None
        assert stored.lease_expires_at is not None
        lease_left = (stored.lease_expires_at - before).total_seconds()
        assert 25 < lease_left < 35, f"the skewed client wrote a lease {lease_left:.0f}s from store time"
        assert client.call("rescue") == {"requeued": 0, "buried": []}
        assert not client.call("acquire", key="f01-slot", limit=1, holder="w-skewed", ttl=30)
        made = client.call("enqueue", name="delayed", queue="f01-delay", delay=60)
        run_at = datetime.fromisoformat(made["run_at"])
        assert abs((run_at - store.clock.now()).total_seconds() - 60) < 10

    kept = store.introspect.get(live.id)
    assert kept is not None
    assert kept.state is JobState.RUNNING
    assert kept.claim_no == holder.token.claim_no
    waiting = store.introspect.get(later.id)
    assert waiting is not None
    assert waiting.state is JobState.SCHEDULED
    assert store.ack(holder.token, "mine") is not None


# -- F02 local deadline -------------------------------------------------------------------


def test_F02_the_handler_is_called_off_at_its_local_deadline_while_a_heartbeat_hangs(
    driver: JobDriver, clock: ManualClock
) -> None:
    """A renewal stuck on a stalled connection does not delay the call-off: at lease - margin it fires."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    started, signalled = threading.Event(), threading.Event()
    seen: list[BaseException] = []

    @registry.job(name="stuck")
    def stuck(payload: int, ctx: JobContext) -> str:
        started.set()
        if ctx.cancelled.wait(WAIT):
            signalled.set()
            try:
                ctx.check()
            except LeaseLost as exc:
                seen.append(exc)
        return "late"

    job = stuck.enqueue(1, driver=driver)
    worker = make_worker(faulty, registry)  # type: ignore[arg-type]
    try:
        with running(worker):
            assert started.wait(WAIT)
            worker.request_stop(drain_timeout=WAIT)  # claim nothing more: the job below stays this attempt's
            faulty.freeze("heartbeat")
            assert faulty.wait_in_flight("heartbeat"), "no heartbeat hung on the frozen connection"
            clock.advance(LEASE - MARGIN - timedelta(seconds=1))
            assert not signalled.wait(0.1), "called off before lease - margin"
            clock.advance(seconds=1)
            assert signalled.wait(WAIT), "the handler was not called off at its local deadline"
            assert faulty.in_flight["heartbeat"] >= 1, "the call-off waited for the hung heartbeat"
            faulty.thaw()
    finally:
        faulty.heal()
    assert len(seen) == 1
    assert seen[0].code == "JC_LEASE_LOST"
    assert worker.counts["lost"] == 1
    after = driver.introspect.get(job.id)
    assert after is not None
    assert after.result is None  # its outcome was never recorded


def test_F02_a_margin_that_is_not_a_positive_duration_smaller_than_the_lease_is_refused() -> None:
    """``margin`` (and ``lease``) must be positive finite durations, the margin smaller than the lease."""
    for margin in (0, -1, float("nan"), float("inf"), True, "5", 30, 31, timedelta(seconds=30)):
        with pytest.raises(OptionInvalid) as info:
            Worker(["default"], lease=30, margin=margin)  # type: ignore[arg-type]
        assert info.value.code == "JC_OPTION_INVALID"
        assert info.value.fix
    for lease in (0, -1, float("nan"), float("inf")):
        with pytest.raises(OptionInvalid):
            Worker(["default"], lease=lease)
    assert Worker(["default"], lease=30).margin == timedelta(seconds=6)
    assert Worker(["default"], lease=30, margin=29.5).margin == timedelta(seconds=29.5)


# -- F03 no stale start -----------------------------------------------------------------------


def test_F03_a_claim_whose_reply_came_too_late_is_not_started(driver: JobDriver, clock: ManualClock) -> None:
    """A claim answered with less than a margin of lease left is given back unstarted, then run once, fresh."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    attempts: list[int] = []

    @registry.job(name="once")
    def once(payload: int, ctx: JobContext) -> int:
        attempts.append(ctx.attempt)
        return payload

    job = once.enqueue(7, driver=driver)
    faulty.hold_replies("claim")
    try:
        # Renewals far apart, so no heartbeat refreshes the claim before the worker judges it.
        with running(make_worker(faulty, registry, heartbeat_interval=60.0)):  # type: ignore[arg-type]
            assert faulty.wait_in_flight("claim"), "the claim's reply was not held"
            # lease - 2 * margin has passed since the claim was sent: too late to start.
            clock.advance(LEASE - 2 * MARGIN + timedelta(seconds=1))
            faulty.release("claim")
            done = wait_until(lambda: job_in(driver, job.id, "done"), what="the job to run, fresh")
    finally:
        faulty.heal()
    assert attempts == [1], "the stale claim was started"
    assert done.attempt == 1
    assert [e.type for e in done.errors] == ["StaleClaim"]


# -- F04 an unstarted claim costs nothing ------------------------------------------------------


@pytest.mark.requires("deferred_start")
def test_F04_a_held_claim_that_lapses_costs_nothing(driver: JobDriver, clock: ManualClock) -> None:
    """Held (``start=False``) and lapsed, even on its only attempt: claimable again as it was, never buried."""
    job = driver.enqueue("held", max_attempts=1)
    first = held(driver).claim(["default"], worker_id="w1", lease=LEASE, start=False).claimed
    assert [c.job.id for c in first] == [job.id]
    assert first[0].job.state is JobState.RUNNING
    assert first[0].job.attempt == 1  # answered as it will stand once started
    assert first[0].job.lease_expires_at is not None
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert (stored.state, stored.attempt) == (JobState.RUNNING, 0)  # the store counts nothing yet
    clock.advance(LEASE)
    again = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert again.buried == ()
    assert [c.job.id for c in again.claimed] == [job.id]
    assert again.claimed[0].job.attempt == 1
    assert again.claimed[0].job.errors == ()
    assert again.claimed[0].token.claim_no == first[0].token.claim_no + 1


@pytest.mark.requires("deferred_start")
def test_F04_rescue_puts_a_lapsed_held_claim_back_at_no_cost(driver: JobDriver, clock: ManualClock) -> None:
    """``rescue`` requeues a lapsed held job with its attempt unchanged and nothing recorded."""
    job = driver.enqueue("held", max_attempts=1)
    held(driver).claim(["default"], worker_id="w1", lease=LEASE, start=False)
    clock.advance(LEASE)
    rescued = driver.introspect.rescue()
    assert (rescued.requeued, rescued.buried) == (1, ())
    back = driver.introspect.get(job.id)
    assert back is not None
    assert (back.state, back.attempt, back.errors) == (JobState.READY, 0, ())


@pytest.mark.requires("deferred_start")
def test_F04_a_started_attempt_that_lapses_counts_and_is_buried_on_the_last(
    driver: JobDriver, clock: ManualClock
) -> None:
    """``start`` makes the attempt count: lapsing then, on the only attempt, buries the job (C08)."""
    job = driver.enqueue("poison", max_attempts=1)
    claimed = held(driver).claim(["default"], worker_id="w1", lease=LEASE, start=False).claimed[0]
    assert held(driver).start([claimed.token]) == [True]
    started = driver.introspect.get(job.id)
    assert started is not None
    assert started.attempt == 1
    assert started.attempted_at == claimed.job.lease_expires_at - LEASE  # type: ignore[operator]
    clock.advance(LEASE)
    result = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert result.claimed == ()
    assert [(j.id, j.state, j.last_error.type if j.last_error else None) for j in result.buried] == [
        (job.id, JobState.DEAD, "LeaseLapsedFinalAttempt")
    ]


@pytest.mark.requires("deferred_start")
def test_F04_start_is_fenced_and_answers_again_after_a_lost_reply(driver: JobDriver, clock: ManualClock) -> None:
    """``start`` lands once per claim (a repeat answers True, changes nothing); a dead token answers False."""
    job = driver.enqueue("x")
    claimed = held(driver).claim(["default"], worker_id="w1", lease=LEASE, start=False).claimed[0]
    assert held(driver).start([claimed.token, claimed.token]) == [True, True]
    assert held(driver).start([claimed.token]) == [True]
    assert driver.introspect.get(job.id).attempt == 1  # type: ignore[union-attr]
    clock.advance(LEASE)
    again = claim_one(driver, worker="w2")
    assert held(driver).start([claimed.token, again.token]) == [False, True]
    assert driver.introspect.get(job.id).attempt == 2  # type: ignore[union-attr]
    with pytest.raises(OptionInvalid):
        held(driver).start(["not a token"])  # type: ignore[list-item]
    with pytest.raises(OptionInvalid):
        held(driver).claim(["default"], worker_id="w", lease=LEASE, start="no")  # type: ignore[arg-type]


@pytest.mark.requires("deferred_start")
def test_F04_settling_a_held_claim_starts_it_first(driver: JobDriver) -> None:
    """ack of a held token counts its attempt; a held job given back (not counted) keeps its attempt."""
    first, second = driver.enqueue("a"), driver.enqueue("b")
    taken = held(driver).claim(["default"], worker_id="w", limit=2, lease=LEASE, start=False).claimed
    by_id = {c.job.id: c for c in taken}
    done = driver.ack(by_id[first.id].token, "ok")
    assert done is not None
    assert (done.state, done.attempt) == (JobState.DONE, 1)
    back = driver.nack(by_id[second.id].token, "given back unstarted", counts_as_attempt=False)
    assert back is not None
    assert (back.state, back.attempt) == (JobState.SCHEDULED, 0)


@pytest.mark.requires("deferred_start")
def test_F04_cancelling_a_held_claim_records_no_attempt(driver: JobDriver, clock: ManualClock) -> None:
    """An operator's cancel of a held job starts nothing: the Cancelled entry and the job keep attempt 0."""
    job = driver.enqueue("a")
    held(driver).claim(["default"], worker_id="w", lease=LEASE, start=False)
    clock.advance(seconds=1)
    cancelled = driver.introspect.cancel(job.id, "no longer needed")
    assert cancelled is not None
    assert (cancelled.state, cancelled.attempt, cancelled.attempted_at) == (JobState.CANCELLED, 0, None)
    assert [(e.type, e.attempt, e.at) for e in cancelled.errors] == [("Cancelled", 0, clock.now())]


def test_F04_a_worker_that_dies_before_starting_its_claim_spends_no_attempt(
    driver: JobDriver, clock: ManualClock
) -> None:
    """Killed while its claim's reply was on its way: the job lapses at no cost, even on its only attempt."""
    if "deferred_start" not in driver.capabilities:
        pytest.skip("driver lacks capability deferred_start")
    faulty = FaultyDriver(driver)
    registry = Registry()
    runs: list[int] = []

    @registry.job(name="never", max_attempts=1)
    def never(payload: int) -> None:
        runs.append(payload)

    job = never.enqueue(1, driver=driver)
    faulty.hold_replies("claim")
    worker = make_worker(faulty, registry)  # type: ignore[arg-type]
    worker.start()
    killer = threading.Thread(target=worker.kill)
    try:
        assert faulty.wait_in_flight("claim"), "the worker never claimed"
        killer.start()  # kill() waits for the worker to end, and its claim loop waits for the reply
        wait_until(lambda: worker._killed, what="the kill")
    finally:
        faulty.heal()  # the held reply arrives to a dead worker
    killer.join(WAIT)
    assert worker.wait(WAIT)
    clock.advance(LEASE)
    again = driver.claim(["default"], worker_id="w2", lease=LEASE)
    assert again.buried == ()
    assert [(c.job.id, c.job.attempt, c.job.errors) for c in again.claimed] == [(job.id, 1, ())]
    assert runs == []


@pytest.mark.parametrize("strict", [False, True])
def test_F04_a_handler_that_kills_its_worker_still_spends_its_attempt(
    driver: JobDriver, clock: ManualClock, strict: bool
) -> None:
    """A poison job killing its worker is buried at max_attempts (after as many runs strict, one more at most else)."""
    registry = Registry()
    workers: list[Worker] = []
    runs: list[int] = []

    @registry.job(name="poison", max_attempts=2)
    def poison(payload: int, ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        workers[-1].kill()

    job = poison.enqueue(1, driver=driver)
    buried: list[Job] = []
    for _ in range(4):
        workers.append(make_worker(driver, registry, strict_starts=strict))
        workers[-1].start()
        assert workers[-1].wait(WAIT)
        clock.advance(LEASE)
        result = driver.claim(["other"], worker_id="probe", lease=LEASE)
        assert result.claimed == ()
        rescued = driver.introspect.rescue()
        buried += rescued.buried
        if buried:
            break
    assert [(j.id, j.state, j.attempt) for j in buried] == [(job.id, JobState.DEAD, 2)]
    assert len(runs) <= (2 if strict else 3)
    if strict:
        assert runs == [1, 2]


# -- F05 settles retry ---------------------------------------------------------------------------


def test_F05_a_settle_the_store_did_not_answer_is_retried_until_it_lands(driver: JobDriver) -> None:
    """An outage during the ack: the ack is retried, fenced, and the job is done once, never run again."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    runs: Counter[int] = Counter()
    outcomes: list[str] = []

    @registry.job(name="once")
    def once(payload: int) -> int:
        runs[payload] += 1
        return payload

    faulty.settle_failures = 5
    job = once.enqueue(1, driver=driver)
    worker = make_worker(faulty, registry, on_settled=lambda job, outcome: outcomes.append(outcome))  # type: ignore[arg-type]
    with running(worker):
        done = wait_until(lambda: job_in(driver, job.id, "done"), what="the retried ack to land")
    assert runs == {1: 1}
    assert done.attempt == 1
    assert done.result == 1
    assert outcomes == ["completed"]
    assert worker.counts["settle_errors"] == 5


@pytest.mark.parametrize("kind", ["ack", "nack"])
def test_F05_a_settle_whose_reply_was_lost_is_known_to_have_landed(driver: JobDriver, kind: str) -> None:
    """The settle landed but its reply was lost: the retry finds it landed; reported once, nothing run again."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    runs: Counter[int] = Counter()
    outcomes: list[tuple[str, str]] = []

    @registry.job(name="lossy", max_attempts=1)
    def lossy(payload: int) -> int:
        runs[payload] += 1
        if kind == "nack":
            raise RuntimeError("fails for good")
        return payload

    faulty.lose_replies["ack_many" if kind == "ack" else "nack"] = 1
    job = lossy.enqueue(1, driver=driver)
    worker = make_worker(
        faulty, registry, on_settled=lambda job, outcome: outcomes.append((job.id, outcome)),  # type: ignore[arg-type]
    )
    with running(worker):
        final = wait_until(lambda: job_in(driver, job.id, "done", "dead"), what="the job to finish")
        wait_until(lambda: outcomes, what="its ending to be reported")
    assert runs == {1: 1}
    assert final.state is (JobState.DONE if kind == "ack" else JobState.DEAD)
    assert outcomes == [(job.id, "completed" if kind == "ack" else "dead_lettered")]
    assert worker.counts["not_landed"] == 0
    assert worker.counts["settle_errors"] == 1


# -- F06 recovery ------------------------------------------------------------------------------------


def test_F06_after_an_outage_the_worker_claims_again_within_two_seconds(driver: JobDriver) -> None:
    """Store unreachable for a while: the worker neither exits nor hangs, and claims within 2 s of its return."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    ran = threading.Event()

    @registry.job(name="after")
    def after(payload: int) -> None:
        ran.set()

    worker = make_worker(faulty, registry, poll_interval=1.0)  # type: ignore[arg-type]
    with running(worker):
        wait_until(lambda: faulty.calls["claim"] >= 1, what="a first claim")
        faulty.outage = True
        calls = faulty.calls["claim"]
        wait_until(lambda: faulty.calls["claim"] >= calls + 3, what="claims failing during the outage")
        after.enqueue(1, driver=driver)
        faulty.outage = False
        back = time.monotonic()
        assert ran.wait(WAIT), "the worker did not claim after the outage"
        waited = time.monotonic() - back
        assert waited < 2.0, f"claimed {waited:.2f}s after the store came back"
        assert worker._thread is not None
        assert worker._thread.is_alive()


# -- F07 bounded calls -----------------------------------------------------------------------------

BOUND = 1.0
"""The ``call_timeout`` (seconds) the F07 scenario builds its client with."""
CONNECT_BOUND = 5.0
"""The longest a driver may take to give up opening a connection (its default connect bound)."""


def _through(url: str, proxy: Proxy) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@{proxy.host}:{proxy.port}" if auth else f"{proxy.host}:{proxy.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def test_F07_a_call_on_a_stalled_connection_ends_in_a_coded_error_within_its_bound(driver_factory: Any) -> None:
    """Through a network that forwards nothing, a call answers JC_DB_TIMEOUT or JC_DB_UNAVAILABLE within its bound."""
    _, url = _shared_store(driver_factory)
    target = urlsplit(url)
    assert target.hostname is not None
    assert target.port is not None
    with Proxy(target.hostname, target.port) as proxy:
        client = connect(_through(url, proxy), call_timeout=BOUND)
        try:
            job = client.enqueue("f07", queue="f07")
            proxy.freeze()
            # The first call meets its pooled connection stalled (bounded by call_timeout); the
            # next needs a new connection through the stalled network (bounded by the
            # driver's connect bound, 5 s by default on jobcore's drivers).
            for call, bound in (
                (lambda: client.claim(["f07"], worker_id="w", lease=LEASE), BOUND),
                (lambda: client.introspect.get(job.id), CONNECT_BOUND),
            ):
                began = time.monotonic()
                with pytest.raises(BackendError) as info:
                    call()
                took = time.monotonic() - began
                assert info.value.code in ("JC_DB_TIMEOUT", "JC_DB_UNAVAILABLE"), info.value
                assert info.value.cause
                assert info.value.fix
                assert took < bound + 2.0, f"a call on a stalled network took {took:.1f}s against a {bound}s bound"
            proxy.thaw()
            # F06: the next calls simply work. (The stalled claim's bytes may reach the store
            # once the network flows, and take the job under a token nobody holds: it lapses.)
            found = wait_until(lambda: _get_quietly(client, job.id), timeout=BOUND + 5.0, what="a call after the thaw")
            assert found.state in (JobState.READY, JobState.RUNNING)
        finally:
            proxy.thaw()
            client.close()


def _get_quietly(driver: JobDriver, job_id: str) -> Job | None:
    try:
        return driver.introspect.get(job_id)
    except BackendError:
        return None

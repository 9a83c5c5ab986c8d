"""Worker runtime scenarios (rules W01-W07), run through the public ``Worker`` on every driver.

These involve real threads: a worker claims, heartbeats and settles from its own
threads while the scenario moves the driver's ``ManualClock`` and waits on events
with short timeouts. Leases are long in driver time (30 s) and renewed every few
milliseconds of real time, so a lease lapses only when a scenario moves the clock
past it on purpose.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from jobcore.parity._faulty import FaultyDriver
from jobcore.parity._support import WAIT, job_in, make_worker, running, state_of, wait_until

from jobcore import validate as v
from jobcore.backoff import Backoff
from jobcore.clock import ManualClock, to_millis
from jobcore.driver import JobDriver
from jobcore.errors import JobTimeout
from jobcore.records import Job, JobState
from jobcore.registry import JobContext, Registry
from jobcore.worker import ON_SETTLED_TRIES

LEASE = timedelta(seconds=30)


# -- W01 ---------------------------------------------------------------------------------


def test_W01_heartbeats_keep_the_lease_of_a_handler_that_outlives_it(driver: JobDriver, clock: ManualClock) -> None:
    """A handler running for longer than its lease keeps it by heartbeats; it runs once across two workers."""
    registry = Registry()
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    @registry.job(name="long")
    def long(payload: str) -> str:
        runs.append(payload)
        started.set()
        release.wait(WAIT)
        return "finished"

    job = long.enqueue("x", driver=driver)
    # Counts the holder's heartbeats. A worker dates a renewal from before it sends it, so
    # the beat that lands first after the clock moves may still carry the earlier time:
    # the clock moves on only after a beat sent wholly after the move has come back.
    beats = FaultyDriver(driver)
    with running(make_worker(beats, registry, worker_id="w-a")):
        assert started.wait(WAIT)
        with running(make_worker(driver, registry, worker_id="w-b")):
            for _ in range(4):  # 80 s of driver time against a 30 s lease
                clock.advance(seconds=20)
                moved_at = beats.calls["heartbeat"]
                expected = to_millis(clock.now()) + LEASE
                wait_until(
                    lambda expected=expected: driver.introspect.get(job.id).lease_expires_at == expected,  # type: ignore[union-attr,misc]
                    what="a heartbeat after the clock moved",
                )
                # Beat moved_at+2 is dated after the move; once beat moved_at+3 starts, it has come back.
                wait_until(
                    lambda moved_at=moved_at: beats.calls["heartbeat"] >= moved_at + 3,  # type: ignore[misc]
                    what="a renewal dated after the move",
                )
            locked = driver.claim(["default"], worker_id="w-c", lease=LEASE)
            assert locked.claimed == ()
            release.set()
            done = wait_until(lambda: job_in(driver, job.id, "done"), what="the job to finish")
    assert runs == ["x"]
    assert done.attempt == 1
    assert done.result == "finished"
    assert done.errors == ()


# -- W02 ---------------------------------------------------------------------------------


def test_W02_a_cancelled_job_signals_its_handler_and_its_outcome_is_not_recorded(
    driver: JobDriver, clock: ManualClock
) -> None:
    """An operator cancel stops the lease; the handler sees the signal, its result is dropped, claiming goes on."""
    registry = Registry()
    started, saw_signal = threading.Event(), threading.Event()
    outcomes: list[tuple[str, str]] = []

    @registry.job(name="waits")
    def waits(payload: int, ctx: JobContext) -> str:
        if payload == 1:
            started.set()
            if ctx.cancelled.wait(WAIT):
                saw_signal.set()
        return f"result-{payload}"

    first = waits.enqueue(1, driver=driver)
    worker = make_worker(driver, registry, on_settled=lambda job, outcome: outcomes.append((job.id, outcome)))
    with running(worker):
        assert started.wait(WAIT)
        assert driver.introspect.cancel(first.id, "operator said so") is not None
        assert saw_signal.wait(WAIT)
        second = waits.enqueue(2, driver=driver)
        wait_until(lambda: job_in(driver, second.id, "done"), what="the next job to run")
    cancelled = driver.introspect.get(first.id)
    assert cancelled is not None
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.result is None
    assert outcomes == [(second.id, "completed")]
    assert worker.counts["lost"] == 1


def _heartbeats_off(faulty: FaultyDriver) -> None:
    """Make heartbeats fail, and wait until one has: the worker sends them one at a time, so a
    renewal already on its way when the switch flipped has landed by then, and none lands after
    the scenario moves the clock (through an async driver's bridge, one may be in flight a while)."""
    faulty.heartbeat_down = True
    sent = faulty.calls["heartbeat"]
    wait_until(lambda: faulty.calls["heartbeat"] > sent, what="a heartbeat to fail")


def test_W02_a_reclaimed_job_signals_its_handler_and_the_new_holder_result_counts(
    driver: JobDriver, clock: ManualClock
) -> None:
    """When another worker reclaims a lapsed lease, the old handler is called off and its result never lands."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    started, saw_signal = threading.Event(), threading.Event()

    @registry.job(name="slow")
    def slow(payload: int, ctx: JobContext) -> str:
        started.set()
        if ctx.cancelled.wait(WAIT):
            saw_signal.set()
        return "from the old holder"

    job = slow.enqueue(1, driver=driver)
    worker = make_worker(faulty, registry, worker_id="w-old")  # type: ignore[arg-type]
    with running(worker):
        assert started.wait(WAIT)
        wait_until(lambda: driver.introspect.get(job.id).attempt == 1, what="its start to be recorded (F04)")  # type: ignore[union-attr]
        worker.request_stop(drain_timeout=WAIT)  # no more claims: the reclaim below is the other worker's
        _heartbeats_off(faulty)
        clock.advance(LEASE + timedelta(seconds=1))
        taken = driver.claim(["default"], worker_id="w-new", lease=LEASE)
        assert [c.job.id for c in taken.claimed] == [job.id]
        faulty.heartbeat_down = False
        assert saw_signal.wait(WAIT)
        assert driver.ack(taken.claimed[0].token, "from the new holder") is not None
    final = driver.introspect.get(job.id)
    assert final is not None
    assert final.state is JobState.DONE
    assert final.result == "from the new holder"
    assert [e.type for e in final.errors] == ["LeaseExpired"]


def test_W02_no_renewal_landing_for_a_whole_lease_calls_the_handler_off(
    driver: JobDriver, clock: ManualClock
) -> None:
    """Heartbeats failing until the lease lapsed call the handler off; the job runs again, counted once."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    first_started, first_signalled = threading.Event(), threading.Event()

    @registry.job(name="cut_off")
    def cut_off(payload: int, ctx: JobContext) -> str:
        if ctx.attempt == 1:
            first_started.set()
            if ctx.cancelled.wait(WAIT):
                first_signalled.set()
            return "attempt 1"
        return f"attempt {ctx.attempt}"

    job = cut_off.enqueue(1, driver=driver)
    with running(make_worker(faulty, registry)) as worker:  # type: ignore[arg-type]
        assert first_started.wait(WAIT)
        wait_until(lambda: driver.introspect.get(job.id).attempt == 1, what="its start to be recorded (F04)")  # type: ignore[union-attr]
        _heartbeats_off(faulty)
        clock.advance(LEASE)
        assert first_signalled.wait(WAIT)
        faulty.heartbeat_down = False
        final = wait_until(lambda: job_in(driver, job.id, "done"), what="the second attempt to finish")
    assert final.result == "attempt 2"
    assert final.attempt == 2
    assert worker.counts["lost"] == 1


# -- W03 ---------------------------------------------------------------------------------


def test_W03_a_failed_settle_is_logged_and_the_loop_goes_on(
    driver: JobDriver, caplog: pytest.LogCaptureFixture
) -> None:
    """A database error while acking is logged and the ack retried (F05); the worker keeps claiming meanwhile."""
    faulty = FaultyDriver(driver)
    registry = Registry()
    runs: Counter[int] = Counter()

    @registry.job(name="count")
    def count(payload: int) -> int:
        runs[payload] += 1
        return payload

    faulty.settle_failures = 3
    caplog.set_level(logging.WARNING, logger="jobcore")
    first = count.enqueue(1, driver=driver)
    with running(make_worker(faulty, registry)) as worker:  # type: ignore[arg-type]
        wait_until(lambda: worker.counts["settle_errors"] >= 1, what="the settle failure")
        second = count.enqueue(2, driver=driver)
        wait_until(lambda: job_in(driver, second.id, "done"), what="the next job")
        done = wait_until(lambda: job_in(driver, first.id, "done"), what="the retried ack to land")
    assert done.attempt == 1
    assert runs == {1: 1, 2: 1}
    assert worker.counts["settle_errors"] >= 3  # each failed call counts its settles (one, or both jobs')
    # The failing calls were the acks the worker sends in production: landed_only where offered.
    lean = "ack_landed_only" in driver.capabilities
    assert faulty.failed_settles[:3] == [("ack_many", {"landed_only": True} if lean else {})] * 3
    assert any("could not settle job" in r.getMessage() and getattr(r, "job_id", None) == first.id
               for r in caplog.records)


def test_W03_a_settle_that_finds_its_lease_lost_is_logged_and_the_loop_goes_on(
    driver: JobDriver, caplog: pytest.LogCaptureFixture
) -> None:
    """An ack answered ``None`` (the job was cancelled under the handler) is logged; claiming goes on."""
    registry = Registry()
    started, go = threading.Event(), threading.Event()

    @registry.job(name="late")
    def late(payload: int) -> int:
        if payload == 1:
            started.set()
            go.wait(WAIT)
        return payload

    caplog.set_level(logging.WARNING, logger="jobcore")
    first = late.enqueue(1, driver=driver)
    # Heartbeats far apart, so the settle (not the keeper) is the first to meet the lost lease.
    with running(make_worker(driver, registry, heartbeat_interval=60.0)) as worker:
        assert started.wait(WAIT)
        # Once its start is recorded (F04), the ack is the next call to meet the cancel.
        wait_until(lambda: driver.introspect.get(first.id).attempt == 1, what="its start to be recorded")  # type: ignore[union-attr]
        driver.introspect.cancel(first.id)
        go.set()
        wait_until(lambda: worker.counts["not_landed"] == 1, what="the ack that did not land")
        second = late.enqueue(2, driver=driver)
        wait_until(lambda: job_in(driver, second.id, "done"), what="the next job")
    assert state_of(driver, first.id) is JobState.CANCELLED
    assert any("did not land" in r.getMessage() for r in caplog.records)


# -- W04 ---------------------------------------------------------------------------------


def test_W04_stop_drains_in_flight_jobs_and_abandons_them_past_the_timeout(
    driver: JobDriver, clock: ManualClock
) -> None:
    """``stop`` claims nothing new, lets a handler finish within the drain, abandons one still running at its end."""
    registry = Registry()
    quick_started, stuck_started = threading.Event(), threading.Event()
    release_quick, release_stuck = threading.Event(), threading.Event()

    @registry.job(name="quick")
    def quick(payload: int) -> str:
        quick_started.set()
        release_quick.wait(WAIT)
        return "drained"

    @registry.job(name="stuck")
    def stuck(payload: int) -> str:
        stuck_started.set()
        release_stuck.wait(WAIT)
        return "too late"

    done_quick = quick.enqueue(1, driver=driver)
    abandoned = stuck.enqueue(2, driver=driver)
    worker = make_worker(driver, registry, concurrency=2).start()
    try:
        assert quick_started.wait(WAIT)
        assert stuck_started.wait(WAIT)
        # Its start recorded (F04): an attempt whose start never reached the store lost nothing, and
        # a reclaim records nothing for it; this scenario is about one that did start.
        wait_until(lambda: driver.introspect.get(abandoned.id).attempt == 1, what="its start to be recorded")  # type: ignore[union-attr]
        worker.request_stop(drain_timeout=3600.0)  # the drain ends when the scenario says so below
        late = quick.enqueue(3, driver=driver)
        release_quick.set()
        wait_until(lambda: job_in(driver, done_quick.id, "done"), what="the quick job to drain")
        assert worker.in_flight == 1
        worker.request_stop(drain_timeout=0.0)  # the drain's end: what still runs is abandoned
        assert worker.wait(WAIT)
        assert worker.stop() is False  # one job had to be abandoned
        assert state_of(driver, done_quick.id) is JobState.DONE
        assert state_of(driver, late.id) is JobState.READY
        assert state_of(driver, abandoned.id) is JobState.RUNNING
        clock.advance(LEASE)
        reclaimed = driver.claim(["default"], worker_id="w-next", lease=LEASE)
        assert [c.job.id for c in reclaimed.claimed] == [abandoned.id]
        assert reclaimed.claimed[0].job.errors[-1].type == "LeaseExpired"
    finally:
        release_stuck.set()
        worker.stop(0)
    assert worker.counts["abandoned"] == 1
    assert worker.counts["completed"] == 1


def test_W04_stop_with_nothing_in_flight_answers_drained(driver: JobDriver) -> None:
    """A worker with no running handler ends as soon as it is asked, whatever its drain timeout."""
    worker = make_worker(driver, Registry(), drain_timeout=3600.0).start()
    worker.request_stop()
    assert worker.wait(WAIT)  # it did not sit out the hour-long drain timeout
    assert worker.stop() is True


# -- W05 ---------------------------------------------------------------------------------


def test_W05_retries_back_off_exponentially_with_jitter_up_to_a_cap(driver: JobDriver, clock: ManualClock) -> None:
    """Each retry waits base * factor**(n-1), spread by the jitter, never past the cap; then the job is dead."""
    registry = Registry()
    backoff = Backoff(base=10, factor=2, cap=25, jitter=0.1)

    @registry.job(name="flaky", max_attempts=4, backoff=backoff)
    def flaky(payload: int) -> None:
        raise ValueError(f"failure of {payload}")

    jobs = flaky.enqueue_many(range(5), driver=driver)
    first_delays: list[float] = []
    with running(make_worker(driver, registry, concurrency=5)):
        for attempt, (lo, hi) in enumerate([(9, 11), (18, 22), (22.5, 25)], start=1):
            scheduled = [
                wait_until(lambda j=j, n=attempt: (s := job_in(driver, j.id, "scheduled")) and s.attempt == n and s,
                           what=f"retry {attempt}")
                for j in jobs
            ]
            delays = [(s.run_at - s.errors[-1].at).total_seconds() for s in scheduled]
            assert all(lo <= d <= hi for d in delays), (attempt, delays)
            if attempt == 1:
                first_delays = delays
            clock.advance(seconds=hi)
        finals = [wait_until(lambda j=j: job_in(driver, j.id, "dead"), what="dead letter") for j in jobs]
    assert len(set(first_delays)) > 1, "jitter spreads retries of jobs failing together"
    assert all(f.attempt == 4 and f.last_error is not None and f.last_error.type == "ValueError" for f in finals)


def test_W05_a_terminal_exception_type_fails_the_job_at_once(driver: JobDriver) -> None:
    """An exception the job declares terminal (or a subclass of it) fails it on the first attempt."""
    registry = Registry()

    class Fatal(Exception):
        pass

    class VeryFatal(Fatal):
        pass

    outcomes: list[str] = []

    @registry.job(name="fatal", max_attempts=5, terminal=(Fatal,))
    def fatal(payload: int) -> None:
        raise VeryFatal("no point retrying")

    job = fatal.enqueue(1, driver=driver)
    with running(make_worker(driver, registry, on_settled=lambda _job, outcome: outcomes.append(outcome))):
        final = wait_until(lambda: job_in(driver, job.id, "failed"), what="the terminal failure")
    assert final.attempt == 1
    assert final.last_error is not None
    assert final.last_error.type == "VeryFatal"
    assert outcomes == ["failed"]


def test_W05_timeout_cancels_the_handler_then_fails_the_attempt(driver: JobDriver) -> None:
    """A handler running past its timeout sees the signal (ctx.check raises JobTimeout); the attempt fails."""
    registry = Registry()
    checked: list[type[BaseException]] = []

    @registry.job(name="slowpoke", timeout=0.1, max_attempts=2, backoff=Backoff(base=60, jitter=0))
    def slowpoke(payload: int, ctx: JobContext) -> str:
        ctx.cancelled.wait(WAIT)
        try:
            ctx.check()
        except JobTimeout as exc:
            checked.append(type(exc))
        return "never recorded"

    job = slowpoke.enqueue(1, driver=driver)
    with running(make_worker(driver, registry)):
        retry = wait_until(lambda: job_in(driver, job.id, "scheduled"), what="the timed-out attempt to fail")
        wait_until(lambda: checked, what="the handler to see the timeout")
    assert checked == [JobTimeout]
    assert retry.last_error is not None
    assert retry.last_error.type == "JobTimeout"
    assert retry.result is None


def test_W05_concurrency_limit_holds_across_workers(driver: JobDriver, clock: ManualClock) -> None:
    """``concurrency=1`` per key runs one attempt at a time per key across two workers; deferrals cost no attempt."""
    registry = Registry()
    lock = threading.Lock()
    inside: dict[str, str] = {}  # job id -> account, of the handlers running now
    gates: dict[str, threading.Event] = {}

    @registry.job(name="limited", concurrency=1, concurrency_key=lambda p: p["account"])
    def limited(payload: dict[str, Any], ctx: JobContext) -> None:
        with lock:
            inside[ctx.job.id] = payload["account"]
            gate = gates.setdefault(ctx.job.id, threading.Event())
        gate.wait(WAIT)  # held until the scenario has seen every other due job held back
        with lock:
            del inside[ctx.job.id]

    jobs = limited.enqueue_many([{"account": a} for a in "aaabbb"], driver=driver)
    pending = {j.id for j in jobs}

    def settled_round() -> bool:
        """Every pending job is in a handler or held back (scheduled for later): this round is decided."""
        now = clock.now()
        with lock:
            busy = set(inside)
        return all(
            jid in busy or ((j := driver.introspect.get(jid)) is not None
                            and j.state is JobState.SCHEDULED and j.run_at > now)
            for jid in pending
        )

    lease = timedelta(seconds=600)
    workers = [make_worker(driver, registry, concurrency=3, lease=lease, worker_id=f"w{i}") for i in range(2)]
    with running(workers[0]), running(workers[1]):
        for _ in range(30):
            if not pending:
                break
            wait_until(settled_round, what="every due job to run or be held back")
            with lock:
                entered = dict(inside)
            assert sorted(Counter(entered.values()).values()) in ([], [1], [1, 1]), entered
            for jid in entered:
                gates[jid].set()
            for jid in entered:
                wait_until(lambda jid=jid: job_in(driver, jid, "done"), what="a released job to finish")
                pending.discard(jid)
            clock.advance(seconds=2)  # held-back jobs come due again after about a second of driver time
    assert not pending, "limited jobs did not all finish"
    assert sum(w.counts["deferred"] for w in workers) >= 4  # the first round held back two of each account
    assert all(driver.introspect.get(j.id).attempt == 1 for j in jobs)  # type: ignore[union-attr]


# -- W06 ---------------------------------------------------------------------------------


def test_W06_on_settled_fires_once_per_landed_ending(driver: JobDriver, clock: ManualClock) -> None:
    """completed, dead_lettered, dropped, failed and buried fire once each; retries and cancels never."""
    registry = Registry()
    calls: list[tuple[str, str]] = []
    cancel_started = threading.Event()
    no_wait = Backoff(base=0, jitter=0)

    @registry.job(name="ok")
    def ok(payload: int) -> int:
        return payload

    @registry.job(name="flaky", max_attempts=3, backoff=no_wait)
    def flaky(payload: int, ctx: JobContext) -> str:
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")
        return "second try works"

    @registry.job(name="doomed", max_attempts=2, backoff=no_wait)
    def doomed(payload: int) -> None:
        raise RuntimeError("always")

    @registry.job(name="dropped", max_attempts=1, dead_letter=False)
    def dropped(payload: int) -> None:
        raise RuntimeError("always, and nobody keeps it")

    @registry.job(name="ghost", max_attempts=1)
    def ghost(payload: int) -> None:
        raise AssertionError("a buried job never runs again")

    @registry.job(name="cancelled")
    def cancelled(payload: int, ctx: JobContext) -> None:
        cancel_started.set()
        ctx.cancelled.wait(WAIT)

    buried = ghost.enqueue(0, driver=driver)
    assert driver.claim(["default"], worker_id="w-crashed", lease=LEASE).claimed
    clock.advance(LEASE)  # the crashed worker's lease lapses on the job's only attempt

    def on_settled(job: Job, outcome: str) -> None:
        calls.append((job.id, outcome))
        if calls.count((job.id, outcome)) == 1:
            raise RuntimeError("the callback fails once; the worker calls it again")

    jobs = {
        "ok": ok.enqueue(1, driver=driver), "flaky": flaky.enqueue(2, driver=driver),
        "doomed": doomed.enqueue(3, driver=driver), "dropped": dropped.enqueue(4, driver=driver),
        "cancelled": cancelled.enqueue(5, driver=driver),
    }
    with running(make_worker(driver, registry, concurrency=8, on_settled=on_settled)) as worker:
        assert cancel_started.wait(WAIT)
        driver.introspect.cancel(jobs["cancelled"].id)
        wait_until(lambda: len(set(calls)) == 5, what="every ending to be reported")
        wait_until(lambda: worker.counts["lost"] == 1, what="the cancelled attempt to be called off")
    landed = Counter(calls)
    assert set(landed) == {
        (jobs["ok"].id, "completed"), (jobs["flaky"].id, "completed"), (jobs["doomed"].id, "dead_lettered"),
        (jobs["dropped"].id, "dropped"), (buried.id, "buried"),
    }
    assert all(n == 2 for n in landed.values()), landed  # one failing call, one retry, then never again
    assert state_of(driver, buried.id) is JobState.DEAD
    assert state_of(driver, jobs["dropped"].id) is JobState.FAILED


def test_W06_an_on_settled_that_always_raises_is_tried_a_bounded_number_of_times(driver: JobDriver) -> None:
    """A callback that always fails is called ON_SETTLED_TRIES times per ending and never stops the worker."""
    registry = Registry()
    calls: list[str] = []

    @registry.job(name="ok")
    def ok(payload: int) -> int:
        return payload

    def broken(job: Job, outcome: str) -> None:
        calls.append(job.id)
        raise RuntimeError("callback bug")

    with running(make_worker(driver, registry, on_settled=broken)):
        first = ok.enqueue(1, driver=driver)
        wait_until(lambda: job_in(driver, first.id, "done"), what="the first job")
        second = ok.enqueue(2, driver=driver)
        wait_until(lambda: len(calls) == 2 * ON_SETTLED_TRIES, what="the callback tries")
    assert Counter(calls) == {first.id: ON_SETTLED_TRIES, second.id: ON_SETTLED_TRIES}


# -- W07 ---------------------------------------------------------------------------------


class Odd(BaseException):
    """Not an Exception: handlers may still raise it."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot print me")


def test_W07_whatever_a_handler_raises_is_recorded_readably_with_its_type(driver: JobDriver) -> None:
    """Exceptions, BaseExceptions, a raised non-exception, huge or NUL texts and unstorable results land as errors."""
    registry = Registry()
    huge = "x\x00" * (v.MAX_ERROR_TEXT_BYTES * 2)

    def raising(error: Callable[[], Any]) -> Callable[[Any], Any]:
        def handler(payload: Any) -> Any:
            raise error()
        return handler

    cases: dict[str, tuple[Callable[..., Any], str]] = {
        "key_error": (raising(lambda: KeyError("missing")), "KeyError"),
        "base_exception": (raising(lambda: Odd("odd one")), "Odd"),
        "raises_a_non_exception": (raising(lambda: 42), "TypeError"),  # `raise 42` is itself a TypeError
        "huge_text": (raising(lambda: ValueError(huge)), "ValueError"),
        "unprintable": (raising(Unprintable), "Unprintable"),
        "empty_text": (raising(Exception), "Exception"),
        "bad_result": (lambda payload: object(), "PayloadInvalid"),
    }
    for name, (handler, _) in cases.items():
        registry.job(name=name, max_attempts=1)(handler)

    @registry.job(name="async_error", max_attempts=1)
    async def async_error(payload: Any) -> None:
        raise ZeroDivisionError("async handlers too")

    cases["async_error"] = (async_error.fn, "ZeroDivisionError")
    ids = {name: registry.get(name).enqueue(None, driver=driver).id for name in cases}
    with running(make_worker(driver, registry, concurrency=8)):
        finals = {
            name: wait_until(lambda i=i: job_in(driver, i, "dead"), what=f"{name} to be dead-lettered")
            for name, i in ids.items()
        }
    for name, final in finals.items():
        error = final.last_error
        assert error is not None, name
        assert error.type == cases[name][1], (name, error)
        assert error.message, name
        assert "\x00" not in error.message
        assert len(error.message.encode()) <= v.MAX_ERROR_TEXT_BYTES
    assert "missing" in finals["key_error"].last_error.message  # type: ignore[union-attr]
    assert "odd one" in finals["base_exception"].last_error.message  # type: ignore[union-attr]
    assert "must derive from BaseException" in finals["raises_a_non_exception"].last_error.message  # type: ignore[union-attr]
    assert "unprintable" in finals["unprintable"].last_error.message  # type: ignore[union-attr]
    assert finals["huge_text"].last_error.message.startswith("xxx")  # type: ignore[union-attr]


def test_W07_a_shutdown_signal_from_a_handler_stops_the_worker_and_gives_the_job_back(driver: JobDriver) -> None:
    """SystemExit or KeyboardInterrupt is not a job failure: the attempt is given back and the worker stops."""
    registry = Registry()

    @registry.job(name="exits", max_attempts=1)
    def exits(payload: int) -> None:
        raise SystemExit(3)

    job = exits.enqueue(1, driver=driver)
    worker = make_worker(driver, registry).start()
    try:
        assert worker.wait(WAIT)
    finally:
        worker.stop(0)
    back = driver.introspect.get(job.id)
    assert back is not None
    assert back.state in (JobState.SCHEDULED, JobState.READY)
    assert back.attempt == 0
    assert back.last_error is not None
    assert back.last_error.type == "SystemExit"

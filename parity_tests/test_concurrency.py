"""Many threads on one driver: claims never overlap, every job ends exactly once (C03, L02).

Eight threads share one driver object (drivers are thread-safe) and claim,
heartbeat, ack and nack a few hundred jobs at once. Time still comes only from the
ManualClock: the first scenario never moves it (leases are long, so nothing lapses);
the second has a clock thread move it forward in step with the workers' progress, so
leases lapse mid-work, jobs are reclaimed and buried, and stale tokens try to settle.
Nothing sleeps; a wall-clock guard only stops a hung run from hanging the suite.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from jobcore.parity.plugin import START

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import FINISHED_STATES, ClaimToken, Job, JobSpec, JobState

WORKERS = 8
PACE = 8
"""Worker operations per clock move in the moving-clock scenario."""
GUARD_SECONDS = 240.0
"""Wall-clock bound on a scenario, only so a hang fails (before pytest's timeout) instead of blocking.

The MongoDB test server in Python (secantusdb) needs a minute for the first scenario;
the memory driver needs a fraction of a second.
"""
JOBS = int(os.environ.get("JOBCORE_CONCURRENCY_JOBS", "200"))
"""Jobs in the first scenario; the moving-clock one takes 60% of it."""


class Ledger:
    """What the workers saw, recorded under one lock and checked at the end."""

    def __init__(self, total: int) -> None:
        self.lock = threading.Condition()  # also wakes the clock thread on progress
        self.total = total
        self.ended: Counter[str] = Counter()  # job id -> endings that landed (final settle or burial)
        self.claims: defaultdict[str, list[int]] = defaultdict(list)  # job id -> claim_no of each claim
        self.nacks: Counter[str] = Counter()  # landed nacks per job
        self.retries: Counter[str] = Counter()  # landed nacks that left the job scheduled
        self.burials: Counter[str] = Counter()
        self.held: dict[str, ClaimToken] = {}  # job id -> token a worker holds right now
        self.tokens: list[ClaimToken] = []
        self.ops = 0
        self.paced = False  # when set, workers wait for the clock thread every PACE operations
        self.moved_at = 0  # ops when the clock last moved

    @property
    def done(self) -> bool:
        return sum(self.ended.values()) >= self.total

    def idle(self, seen: int) -> None:
        """After an empty claim: wait until some other worker made progress (no spinning on the store)."""
        with self.lock:
            self.lock.wait_for(lambda: self.ops != seen or self.done, timeout=1.0)

    def progress(self) -> None:
        """One more operation done (a claim call or a settle); when paced, let the clock catch up.

        Pacing makes the clock move every PACE operations however the threads are
        scheduled, so leases lapse mid-work on every run, not only on lucky ones.
        """
        with self.lock:
            self.ops += 1
            self.lock.notify_all()
            if self.paced:
                self.lock.wait_for(lambda: self.ops - self.moved_at < 2 * PACE or self.done, timeout=GUARD_SECONDS)

    def claimed(self, token: ClaimToken, *, exclusive: bool) -> None:
        with self.lock:
            if exclusive:
                other = self.held.get(token.job_id)
                assert other is None, f"C03: job {token.job_id} handed to {token} while {other} holds it"
                self.held[token.job_id] = token
            self.claims[token.job_id].append(token.claim_no)
            self.tokens.append(token)

    def release(self, token: ClaimToken) -> None:
        with self.lock:
            if self.held.get(token.job_id) == token:
                del self.held[token.job_id]

    def settled(self, token: ClaimToken, job: Job | None, *, nack: bool) -> None:
        self.progress()
        with self.lock:
            if job is None:
                return
            assert job.id == token.job_id, f"settle of {token} answered job {job.id}"
            assert job.claim_no == token.claim_no, f"L02: settle landed with {token} on claim {job.claim_no}"
            if nack:
                self.nacks[job.id] += 1
                if job.state is JobState.SCHEDULED:
                    self.retries[job.id] += 1
            if job.state in FINISHED_STATES:
                self.ended[job.id] += 1

    def buried(self, jobs: tuple[Job, ...]) -> None:
        with self.lock:
            for job in jobs:
                assert job.state in FINISHED_STATES, f"C08: buried job {job.id} is {job.state}"
                self.burials[job.id] += 1
                self.ended[job.id] += 1


def _run(workers: list[Callable[[], None]]) -> None:
    """Run the callables on their own threads; re-raise the first failure here."""
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        for future in [pool.submit(w) for w in workers]:
            future.result()


def _check_ends(driver: JobDriver, ledger: Ledger, ids: list[str]) -> list[Job]:
    """Every job finished exactly once, its claims distinct and counted, its history complete."""
    jobs = [driver.introspect.get(job_id) for job_id in ids]
    assert all(j is not None for j in jobs), "a job was lost"
    finished = [j for j in jobs if j is not None]
    for job in finished:
        assert job.state in FINISHED_STATES, f"job {job.id} ended {job.state}"
        assert ledger.ended[job.id] == 1, f"job {job.id} ended {ledger.ended[job.id]} times"
        claims = ledger.claims[job.id]
        assert len(set(claims)) == len(claims), f"C03: job {job.id} handed out claim numbers {claims}"
        assert sorted(claims) == list(range(1, job.claim_no + 1)), f"job {job.id}: claims {claims} of {job.claim_no}"
        lapsed = len(claims) - 1 - ledger.retries[job.id]  # every later claim followed a retry or a lapse
        expected = ledger.nacks[job.id] + lapsed + ledger.burials[job.id]
        assert len(job.errors) == expected, f"job {job.id}: {len(job.errors)} errors, expected {expected}"
        assert job.attempt <= job.max_attempts
    for token in ledger.tokens:  # every token is stale now: nothing answers, nothing raises
        assert driver.heartbeat(token, 30) is False
        assert driver.ack(token, "late") is None
    return finished


def _guard(start: float, ledger: Ledger) -> None:
    ended = sum(ledger.ended.values())
    assert time.monotonic() - start < GUARD_SECONDS, f"the scenario hung: {ended} of {ledger.total} jobs ended"


def test_C03_threads_claiming_and_settling_never_share_a_job(driver: JobDriver) -> None:
    """Eight threads, a few hundred jobs, leases that never lapse: no job is held twice, every job ends once."""
    total = JOBS
    ids = [j.id for j in driver.enqueue_many([JobSpec(name="work", payload=n, max_attempts=3) for n in range(total)])]
    ledger = Ledger(total)
    lease = timedelta(hours=1)
    start = time.monotonic()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        name = f"w{seed}"
        while not ledger.done:
            _guard(start, ledger)
            seen = ledger.ops
            result = driver.claim(["default"], worker_id=name, limit=rng.randint(1, 3), lease=lease)
            assert not result.buried, "nothing lapses in this scenario"
            if not result.claimed:
                ledger.idle(seen)
            for claimed in result.claimed:
                ledger.claimed(claimed.token, exclusive=True)
            for claimed in result.claimed:
                token = claimed.token
                if rng.random() < 0.3:
                    assert driver.heartbeat(token, lease) is True, f"L01: {token} lost its live lease"
                ledger.release(token)  # before settling: once it lands another thread may claim the job
                if rng.random() < 0.6:
                    job = driver.ack(token, {"by": name})
                    assert job is not None, f"S01: ack with current {token} did not land"
                    assert job.state is JobState.DONE
                    ledger.settled(token, job, nack=False)
                else:
                    job = driver.nack(token, RuntimeError("flaky"))
                    assert job is not None, f"S02: nack with current {token} did not land"
                    ledger.settled(token, job, nack=True)
                assert driver.ack(token, "again") is None, f"L03: {token} settled twice"

    _run([lambda s=s: worker(s) for s in range(WORKERS)])
    jobs = _check_ends(driver, ledger, ids)
    assert {j.state for j in jobs} <= {JobState.DONE, JobState.DEAD}
    assert sum(ledger.retries.values()) > 0, "the scenario should have retried some jobs"


def test_C03_L02_moving_clock_reclaims_land_one_settle_per_claim(driver: JobDriver, clock: ManualClock) -> None:
    """Leases lapse under working threads: each claim settles at most once, stale tokens change nothing."""
    total = JOBS * 3 // 5
    specs = [JobSpec(name="work", payload=n, max_attempts=1 + n % 3) for n in range(total)]
    ids = [j.id for j in driver.enqueue_many(specs)]
    ledger = Ledger(total)
    ledger.paced = True
    lease = timedelta(seconds=5)
    start = time.monotonic()
    abandoned: list[ClaimToken] = []

    def clock_mover() -> None:
        """Move two seconds for every PACE operations the workers finish: leases lapse mid-work."""
        with ledger.lock:
            while not ledger.done:
                _guard(start, ledger)
                ledger.lock.wait_for(lambda: ledger.ops >= ledger.moved_at + PACE or ledger.done, timeout=1.0)
                clock.advance(timedelta(seconds=2))
                ledger.moved_at = ledger.ops
                ledger.lock.notify_all()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        name = f"w{seed}"
        while not ledger.done:
            _guard(start, ledger)
            seen = ledger.ops
            result = driver.claim(["default"], worker_id=name, limit=rng.randint(1, 2), lease=lease)
            ledger.buried(result.buried)
            if not result.claimed and not result.buried:
                ledger.progress()  # an empty claim still paces the clock, so lapsed leases come due
                ledger.idle(seen + 1)
                continue
            for claimed in result.claimed:
                ledger.claimed(claimed.token, exclusive=False)
            ledger.progress()
            for claimed in result.claimed:
                token = claimed.token
                roll = rng.random()
                if roll < 0.15:  # a crashed worker: the lease will lapse
                    abandoned.append(token)
                    continue
                if roll < 0.4:
                    driver.heartbeat(token, lease)  # may miss: the job may be reclaimed already
                if roll < 0.75:
                    ledger.settled(token, driver.ack(token, {"by": name}), nack=False)
                else:
                    ledger.settled(token, driver.nack(token, "flaky"), nack=True)
            if abandoned and rng.random() < 0.2:  # an old token tries to settle late
                late = abandoned[rng.randrange(len(abandoned))]
                ledger.settled(late, driver.ack(late, "late"), nack=False)

    _run([clock_mover, *[lambda s=s: worker(s) for s in range(WORKERS)]])
    _check_ends(driver, ledger, ids)
    reclaims = sum(len(c) - 1 - ledger.retries[j] for j, c in ledger.claims.items())
    assert reclaims > 0, "the moving clock should have forced reclaims"
    assert sum(ledger.burials.values()) > 0, "some final attempts should have lapsed and been buried"


class YieldingClock(ManualClock):
    """A ManualClock that gives the processor away each time it is read.

    Every driver reads its clock inside claim, so claimers on many threads are switched
    out in the middle of their claims, not only between them.
    """

    def now(self) -> datetime:
        time.sleep(0)
        return super().now()


STORM_JOBS = int(os.environ.get("JOBCORE_STORM_JOBS", "120"))
STORM_THREADS = 8
STORM_ROUNDS = 20
STORM_BUDGET = 1.5
"""Seconds after which no new round starts: a fast store runs many rounds, a slow one at least one."""
STORM_SECONDS = 60.0
"""Wall-clock bound on one round, only so a hang fails instead of blocking."""


def claim_storm(driver: JobDriver, jobs: int = STORM_JOBS, threads: int = STORM_THREADS) -> int:
    """Rounds of ``jobs`` jobs claimed by ``threads`` threads switched every microsecond, until
    :data:`STORM_BUDGET` seconds or :data:`STORM_ROUNDS` rounds; answers the rounds run.

    Raises ``AssertionError("C03: ...")`` at the first job handed out twice, a claim that
    raises, or a round after which the store hands out nothing more though a job was never
    handed out (lost). The interpreter switches threads as often as it can meanwhile, so
    claimers interleave inside a driver's claim (under the GIL a Python-level critical
    section otherwise mostly runs in one slice); each claim takes up to ten jobs from
    three queues, so its critical section is long.
    """
    began = time.monotonic()
    rounds = 0
    while rounds < STORM_ROUNDS and (rounds == 0 or time.monotonic() - began < STORM_BUDGET):
        _storm_round(driver, [f"storm{rounds}-{q}" for q in range(3)], jobs, threads)
        rounds += 1
    return rounds


def _storm_round(driver: JobDriver, names: list[str], jobs: int, threads: int) -> None:
    specs = [JobSpec(name="storm", queue=names[n % len(names)], payload=n) for n in range(jobs)]
    ids = {j.id for j in driver.enqueue_many(specs)}
    lock = threading.Lock()
    holder: dict[str, ClaimToken] = {}
    failed = threading.Event()
    errors: list[BaseException] = []
    lease = timedelta(hours=1)
    deadline = time.monotonic() + STORM_SECONDS

    def claimer(index: int) -> None:
        rng = random.Random(index)
        try:
            while not failed.is_set():
                assert time.monotonic() < deadline, f"C03: a storm round did not end within {STORM_SECONDS}s"
                try:
                    result = driver.claim(names, worker_id=f"w{index}", limit=rng.randint(1, 10), lease=lease)
                except Exception as exc:
                    raise AssertionError(f"C03: a claim among concurrent claimers raised {exc!r}") from exc
                if not result.claimed:
                    return
                for claimed in result.claimed:
                    token = claimed.token
                    with lock:
                        other = holder.setdefault(token.job_id, token)
                    assert other is token, f"C03: job {token.job_id} handed to {token} while {other} holds it"
        except BaseException as exc:  # the first failure stops every claimer
            errors.append(exc)
            failed.set()

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=claimer, args=(i,), daemon=True) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(STORM_SECONDS + 10)
    finally:
        sys.setswitchinterval(previous)
    if errors:
        raise errors[0]
    assert not any(w.is_alive() for w in workers), "C03: a claimer hung"
    left = driver.claim(names, worker_id="sweeper", limit=1000, lease=lease).claimed
    assert left == (), f"C03: {len(left)} jobs were left for a claim after every claimer found none"
    lost = sorted(ids - set(holder))
    assert not lost, f"C03: {len(lost)} jobs were never handed out and can no longer be claimed: {lost[:10]}"
    assert set(holder) == ids


def test_C03_claims_interleaved_mid_claim_hand_each_job_out_once(
    driver_factory: Callable[..., JobDriver],
) -> None:
    """Eight threads switched every microsecond, a clock that yields inside claim: no job twice, none lost."""
    assert claim_storm(driver_factory(YieldingClock(START))) >= 1

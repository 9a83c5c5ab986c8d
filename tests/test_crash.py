"""Crash proof: worker processes SIGKILLed at random moments lose no job and settle none twice.

Several ``jobcore worker`` processes share one store (drivers with the ``shared_store``
capability: PostgreSQL, MongoDB) and work through a few thousand jobs while the test
kills one at random every fraction of a second and starts a replacement, as a process
supervisor would. A poison job SIGKILLs whichever worker runs it. At the end:

* every job is finished exactly once: ``done``, or ``dead`` where its handler always
  fails, and the poison job ``dead`` after ``max_attempts`` (buried, C08);
* none is lost (every enqueued id is there, none left live);
* no job was settled by a superseded token: each ``done`` result names the claim that
  acked it, and that is the job's latest claim.

Real time is needed (the workers are other processes), so the store is made on a
``SystemClock`` and leases are short (1 s). The worker processes reach the test's
isolated store through the driver's own ``url``, which a driver declaring
``shared_store`` offers (chosen by capability, never by driver class).
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from jobcore.clock import SystemClock
from jobcore.driver import JobDriver
from jobcore.records import JobFilter, JobSpec, JobState

WORK_JOBS = int(os.environ.get("JOBCORE_CRASH_JOBS", "2000"))
FAILING_JOBS = 20
WORKERS = 4
LEASE_SECONDS = 1.0
DEADLINE_SECONDS = 90.0
KILL_EVERY = tuple(float(x) for x in os.environ.get("JOBCORE_CRASH_KILL_EVERY", "0.8,1.6").split(","))
"""Seconds between two kills (uniform): long enough for a replacement to start and work."""
SLOW_CYCLE = 0.025
PROBE_JOBS = (200, WORK_JOBS)
"""A claim+ack cycle slower than SLOW_CYCLE (seconds) with this many jobs stored marks a
slow test server (the pure-Python MongoDB-wire one, whose claims scan the collection):
the run is scaled down so it still ends in about a minute. The probe ends up storing as
many jobs as the run (with 300, a quicker machine measured the stand-in under the bar,
and the full run then crawled past its deadline at 2,000), but it looks first with 200:
a store already slow there is slow, and the stand-in spends 25 s storing, cycling and
removing 2,000 jobs."""


@dataclasses.dataclass(frozen=True)
class Plan:
    jobs: int
    lease: float
    kill_every: tuple[float, float]
    deadline: float
    workers: int = WORKERS
    poll: float = 0.05


def plan_for(driver: JobDriver) -> Plan:
    """Size the run to the store: a few thousand jobs on a real server, fewer on a slow one."""
    # Measure with a store about the run's size: a server that is quick on an empty
    # collection may crawl at a few thousand documents (the MongoDB stand-in does).
    stored = 0
    for size in PROBE_JOBS:
        driver.enqueue_many([{"name": "crash.probe", "queue": "crash-probe"}] * (size - stored))
        stored = size
        cycles = []
        for _ in range(5):
            started = time.perf_counter()
            claimed = driver.claim(["crash-probe"], worker_id="probe", lease=30).claimed
            driver.ack(claimed[0].token)
            cycles.append(time.perf_counter() - started)
        cycle = sorted(cycles)[2]
        print(f"crash plan probe: median claim+ack cycle {cycle * 1000:.1f} ms with {size} jobs stored")
        if cycle >= SLOW_CYCLE:
            break
    while driver.introspect.remove_many(JobFilter(queue="crash-probe")).remaining:
        pass
    if cycle < SLOW_CYCLE:
        return Plan(WORK_JOBS, LEASE_SECONDS, (KILL_EVERY[0], KILL_EVERY[1]), DEADLINE_SECONDS)
    # Idle polls and heartbeats are most of a slow server's load: poll less, lease longer.
    return Plan(
        jobs=max(60, WORK_JOBS // 20), lease=3 * LEASE_SECONDS, kill_every=(2 * KILL_EVERY[0], 2 * KILL_EVERY[1]),
        deadline=150.0, workers=3, poll=0.5,
    )


JOBS_MODULE = textwrap.dedent(
    """
    import os, random, signal, time
    from jobcore import Backoff, job

    LOG = os.environ["CRASH_LOG"]
    QUICK = Backoff(base=0.05, factor=2, cap=0.2, jitter=0.2)

    def _record(ctx):
        with open(LOG, "a") as f:
            f.write(f"{ctx.job.id} {ctx.attempt} {ctx.job.claim_no} {os.getpid()}\\n")

    @job(name="crash.work", queue="crash", max_attempts=25, backoff=QUICK)
    def work(payload, ctx):
        _record(ctx)
        time.sleep(random.uniform(0.0, 0.02))
        return {"n": payload["n"], "claim_no": ctx.job.claim_no, "worker": ctx.token.worker_id}

    @job(name="crash.always_fails", queue="crash", max_attempts=3, backoff=QUICK)
    def always_fails(payload, ctx):
        _record(ctx)
        raise RuntimeError("this handler always fails")

    @job(name="crash.poison", queue="crash", max_attempts=3)
    def poison(payload, ctx):
        _record(ctx)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


class Fleet:
    """Worker processes over one store, replaced when they die."""

    def __init__(self, url: str, jobs_py: Path, log_dir: Path, env: dict[str, str], plan: Plan) -> None:
        self.url, self.jobs_py, self.log_dir, self.env, self.plan = url, jobs_py, log_dir, env, plan
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self.deaths = 0  # exits the test did not cause (the poison job)

    def spawn(self) -> None:
        self.started += 1
        log = open(self.log_dir / f"worker-{self.started}.log", "wb")  # noqa: SIM115 - lives as long as the process
        cmd = [
            sys.executable, "-m", "jobcore.cli", "worker", str(self.jobs_py), "--url", self.url,
            "--queues", "crash", "--concurrency", "4", "--lease", str(self.plan.lease),
            "--poll-interval", str(self.plan.poll),
            "--rescue-interval", "1", "--drain-timeout", "5", "--log-level", "WARNING", "--strict-starts",
            "--worker-id", f"crash-{self.started}",
        ]
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env))
        log.close()

    def replace_dead(self) -> None:
        for proc in list(self.procs):
            if proc.poll() is not None:
                self.procs.remove(proc)
                self.deaths += 1
                self.spawn()

    def kill_one(self, rng: random.Random) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        if alive:
            victim = rng.choice(alive)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            self.procs.remove(victim)
            self.spawn()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def store_url(driver: JobDriver) -> str:
    """A URL that ``jobcore.connect`` in another process resolves to ``driver``'s isolated store.

    A driver declaring ``shared_store`` offers it as ``url`` (the parity suite's contract).
    """
    own = getattr(driver, "url", None)
    if not isinstance(own, str):
        pytest.fail(f"{type(driver).__name__} declares shared_store but has no str `url` reaching its store")
    return own


def test_sigkilled_workers_lose_no_job_and_settle_none_twice(
    driver_factory: Callable[..., JobDriver], tmp_path: Path
) -> None:
    """A few thousand jobs, workers SIGKILLed at random: every job finishes exactly once, fenced."""
    driver = driver_factory(SystemClock())  # the worker processes live in real time
    if "shared_store" not in driver.capabilities:
        pytest.skip("driver lacks capability shared_store")
    url = store_url(driver)
    jobs_py = tmp_path / "crash_jobs.py"
    jobs_py.write_text(JOBS_MODULE)
    executions_log = tmp_path / "executions.log"
    executions_log.touch()
    env = {**os.environ, "CRASH_LOG": str(executions_log), "PYTHONPATH": os.pathsep.join(sys.path)}

    plan = plan_for(driver)
    specs = [JobSpec(name="crash.work", queue="crash", payload={"n": n}, max_attempts=25) for n in range(plan.jobs)]
    specs += [JobSpec(name="crash.always_fails", queue="crash", payload={"n": n}, max_attempts=3)
              for n in range(FAILING_JOBS)]
    specs.insert(plan.jobs // 4, JobSpec(name="crash.poison", queue="crash", payload={}, max_attempts=3))
    enqueued = driver.enqueue_many(specs)
    ids = {job.id for job in enqueued}
    assert len(ids) == len(specs)

    rng = random.Random(int(os.environ.get("JOBCORE_CRASH_SEED", "5")))
    fleet = Fleet(url, jobs_py, tmp_path, env, plan)
    kills = 0
    started = time.monotonic()
    try:
        for _ in range(plan.workers):
            fleet.spawn()
        next_kill = time.monotonic() + rng.uniform(*plan.kill_every)
        while True:
            stats = driver.introspect.stats()
            live = sum(stats.count(state, "crash") for state in ("ready", "scheduled", "running", "suspended"))
            if live == 0:
                break
            assert time.monotonic() - started < plan.deadline, f"{live} jobs still live after {plan.deadline}s"
            fleet.replace_dead()
            if time.monotonic() >= next_kill:
                fleet.kill_one(rng)
                kills += 1
                next_kill = time.monotonic() + rng.uniform(*plan.kill_every)
            time.sleep(plan.poll)  # each look counts every job: on a slow server, look seldom
    finally:
        fleet.stop()
    elapsed = time.monotonic() - started

    jobs = []
    page = driver.introspect.list(JobFilter(queue="crash"), limit=200)
    jobs.extend(page.jobs)
    while page.after is not None:
        page = driver.introspect.list(JobFilter(queue="crash"), limit=200, after=page.after)
        jobs.extend(page.jobs)
    by_id = {job.id: job for job in jobs}
    executions = Counter(line.split()[0] for line in executions_log.read_text().splitlines() if line.strip())

    assert set(by_id) == ids, "a job was lost or appeared from nowhere"
    outcomes = Counter((job.name, str(job.state)) for job in jobs)
    assert outcomes == {
        ("crash.work", "done"): plan.jobs,
        ("crash.always_fails", "dead"): FAILING_JOBS,
        ("crash.poison", "dead"): 1,
    }, outcomes
    for job in jobs:
        if job.name == "crash.work":
            # The ack that landed came from the job's latest claim: no superseded token settled it.
            assert job.result["claim_no"] == job.claim_no, job
            assert 1 <= executions[job.id] <= job.claim_no
        elif job.name == "crash.always_fails":
            assert job.attempt == 3
            assert job.last_error is not None
            assert job.last_error.type in ("RuntimeError", "LeaseLapsedFinalAttempt")
    poison = next(job for job in jobs if job.name == "crash.poison")
    assert poison.state is JobState.DEAD
    assert poison.attempt == poison.max_attempts == 3
    assert poison.last_error is not None
    assert poison.last_error.type == "LeaseLapsedFinalAttempt"
    # Never more runs than attempts (C08): the workers record each start before its handler
    # runs (--strict-starts). A job held in a worker's prefetch when the test SIGKILLs it
    # never started and spends nothing (F04).
    assert executions[poison.id] <= poison.max_attempts

    reruns = sum(n - 1 for n in executions.values() if n > 1)
    print(  # the figures the issue asks for; visible with -s
        f"\ncrash test: {len(jobs)} jobs (lease {plan.lease:g}s), {kills} SIGKILLs by the test, "
        f"{fleet.deaths} deaths by the poison job, "
        f"{fleet.started} worker processes, {sum(executions.values())} executions ({reruns} re-runs after a kill), "
        f"outcomes {dict(outcomes)}, {elapsed:.1f}s"
    )

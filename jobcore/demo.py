"""``jobcore demo``: thousands of jobs through several workers, showing what jobcore is for.

On the in-memory driver by default (``--url`` for PostgreSQL or MongoDB), the demo
declares a few jobs, enqueues a few thousand, runs several workers, and shows while
it happens: a progress bar, retries backing off, a handler that outlives its lease
and keeps it by heartbeats, a worker that crashes mid-job (its jobs are reclaimed once
their leases lapse), and a poison job that ends in the dead-letter queue instead of
looping. It ends with counts per state and the throughput, and checks itself: it
exits non-zero when a job was lost, or ran again where no failure or lost lease
allowed it, or had an ending reported twice.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any, TextIO

from jobcore.backoff import Backoff
from jobcore.current import use_job_driver
from jobcore.driver import JobDriver
from jobcore.errors import LeaseLost
from jobcore.records import FINISHED_STATES, Job, JobFilter, JobState
from jobcore.registry import JobContext, Registry
from jobcore.worker import Worker

__all__ = ["Demo"]

QUEUE = "demo"
UPLOADS = "demo-uploads"
LEASE = timedelta(seconds=1)


class _Screen:
    """A one-line progress bar with event lines printed above it; plain text, no dependency."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._lock = threading.Lock()
        self._bar = ""
        self._last_plain = 0.0

    def event(self, text: str) -> None:
        with self._lock:
            if self.tty:
                self.out.write("\r\x1b[K" + text + "\n" + self._bar)
            else:
                self.out.write(text + "\n")
            self.out.flush()

    def bar(self, text: str, *, force: bool = False) -> None:
        with self._lock:
            self._bar = text
            if self.tty:
                self.out.write("\r\x1b[K" + text)
                self.out.flush()
            elif force or time.monotonic() - self._last_plain >= 1.0:
                self._last_plain = time.monotonic()
                self.out.write(text + "\n")
                self.out.flush()

    def end(self) -> None:
        with self._lock:
            if self.tty:
                self.out.write("\n")
                self.out.flush()
            self._bar = ""


class Demo:
    """One run of the demo against ``driver``."""

    def __init__(self, driver: JobDriver, *, jobs: int, out: TextIO, seed: int | None = None) -> None:
        self.driver = driver
        self.total_bulk = jobs
        self.screen = _Screen(out)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.executions: Counter[str] = Counter()
        self.endings: Counter[tuple[str, str]] = Counter()
        self.attempt_times: dict[str, list[float]] = {}
        self.registry = self._declare()
        self.ids: set[str] = set()
        self.expected: Counter[str] = Counter()
        self.baseline: Counter[str] = Counter()

    # -- the jobs ----------------------------------------------------------------------

    def _ran(self, ctx: JobContext) -> None:
        with self.lock:
            self.executions[ctx.job.id] += 1

    def _declare(self) -> Registry:
        registry = Registry()
        quick = Backoff(base=0.2, factor=2, cap=1.0, jitter=0.2)

        @registry.job(name="demo.thumbnail", queue=QUEUE, max_attempts=5)
        def thumbnail(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
            self._ran(ctx)
            time.sleep(0.001 + 0.004 * random.random())  # a little I/O
            return {"image": payload["image"], "size": "128x128"}

        @registry.job(name="demo.fetch", queue=QUEUE, max_attempts=6, backoff=quick)
        def fetch(payload: dict[str, Any], ctx: JobContext) -> str:
            self._ran(ctx)
            with self.lock:
                times = self.attempt_times.setdefault(ctx.job.id, [])
                times.append(time.monotonic())
            if ctx.attempt <= payload["fails"]:
                raise ConnectionError(f"upstream timed out (attempt {ctx.attempt})")
            if payload.get("show") and len(times) > 1:
                waits = ", ".join(f"{b - a:.2f}s" for a, b in itertools.pairwise(times))
                self.screen.event(
                    f"  retry   job {ctx.job.id} (demo.fetch) succeeded on attempt {ctx.attempt} "
                    f"after backing off {waits}"
                )
            return "fetched"

        @registry.job(name="demo.report", queue=QUEUE, max_attempts=1)
        def report(payload: dict[str, Any], ctx: JobContext) -> str:
            self._ran(ctx)
            started = time.monotonic()
            steps = payload["steps"]
            for step in range(steps):
                ctx.check()
                ctx.progress((step + 1) / steps)
                ctx.cancelled.wait(payload["seconds"] / steps)
            ctx.check()
            ran = time.monotonic() - started
            self.screen.event(
                f"  lease   job {ctx.job.id} (demo.report) ran {ran:.1f}s on a {LEASE.total_seconds():.0f}s lease, "
                f"kept by heartbeats every {LEASE.total_seconds() / 3:.2f}s: attempt {ctx.attempt}, never reclaimed"
            )
            return f"report of {steps} steps"

        @registry.job(name="demo.upload", queue=UPLOADS, max_attempts=3)
        def upload(payload: dict[str, Any], ctx: JobContext) -> str:
            self._ran(ctx)
            if ctx.cancelled.wait(payload["seconds"]):
                raise LeaseLost(f"upload {payload['file']} called off", "another worker takes it over")
            if ctx.attempt > 1:
                self.screen.event(
                    f"  reclaim job {ctx.job.id} (demo.upload) finished on attempt {ctx.attempt} "
                    f"by {ctx.token.worker_id if ctx.token else '?'} after its first worker crashed"
                )
            return f"uploaded {payload['file']}"

        @registry.job(name="demo.poison", queue=QUEUE, max_attempts=3, backoff=quick)
        def poison(payload: dict[str, Any], ctx: JobContext) -> None:
            self._ran(ctx)
            raise ValueError(f"malformed input {payload['row']!r}: this job can never succeed")

        return registry

    def _on_settled(self, job: Job, outcome: str) -> None:
        with self.lock:
            self.endings[(job.id, outcome)] += 1
        if outcome == "dead_lettered":
            error = job.last_error.message if job.last_error else "?"
            self.screen.event(
                f"  dead    job {job.id} ({job.name}) failed all {job.max_attempts} attempts and went to the "
                f"dead-letter queue instead of looping: {error}"
            )
        elif outcome == "buried":
            self.screen.event(f"  buried  job {job.id} ({job.name}): lease lapsed on its final attempt")

    # -- the run -----------------------------------------------------------------------

    def _enqueue(self) -> None:
        registry = self.registry
        bulk = [{"image": f"img-{n:05d}.png"} for n in range(self.total_bulk)]
        retries = max(3, self.total_bulk // 50)
        fetches = [{"url": f"https://example.test/{n}", "fails": self.rng.choice((1, 1, 2)), "show": n < 3}
                   for n in range(retries)]
        batches: list[tuple[str, list[Any], str]] = [
            ("demo.thumbnail", bulk, "thumbnails"), ("demo.fetch", fetches, "fetches that fail at first"),
        ]
        for name, payloads, _ in batches:
            handle = registry.get(name)
            for start in range(0, len(payloads), 1000):
                for job in handle.enqueue_many(payloads[start : start + 1000], driver=self.driver):
                    self.ids.add(job.id)
            self.expected["done"] += len(payloads)
        report = registry.get("demo.report").enqueue({"steps": 10, "seconds": 3.5}, driver=self.driver, priority=10)
        poison = registry.get("demo.poison").enqueue({"row": "\x7fNaN"}, driver=self.driver, priority=5)
        self.ids |= {report.id, poison.id}
        self.expected["done"] += 1
        self.expected["dead"] += 1
        self.screen.event(
            f"enqueued {len(bulk)} thumbnails, {len(fetches)} fetches that fail at first, 1 long report, "
            f"1 poison job"
        )

    def _hand_uploads_to(self, crasher: Worker) -> None:
        """Give the doomed worker a few slow uploads, and wait until it runs them all."""
        uploads = self.registry.get("demo.upload")
        jobs = uploads.enqueue_many(
            [{"file": f"backup-{n}.tar", "seconds": 1.5} for n in range(crasher.concurrency)], driver=self.driver
        )
        self.ids |= {j.id for j in jobs}
        self.expected["done"] += len(jobs)
        deadline = time.monotonic() + 5
        while crasher.in_flight < len(jobs) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _crash(self, crasher: Worker, after: float) -> None:
        time.sleep(after)
        held = crasher.in_flight
        crasher.kill()
        self.screen.event(
            f"  crash   worker {crasher.worker_id} killed with {held} uploads in flight; their leases lapse "
            f"within {LEASE.total_seconds():.0f}s and the other workers reclaim them"
        )

    def _snapshot(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        stats = self.driver.introspect.stats()
        for queue in (QUEUE, UPLOADS):
            for state in JobState:
                counts[state.value] += stats.count(state, queue)
        return counts

    def _all_jobs(self) -> list[Job]:
        jobs: list[Job] = []
        for queue in (QUEUE, UPLOADS):
            page = self.driver.introspect.list(JobFilter(queue=queue), limit=200)
            jobs.extend(page.jobs)
            while page.after is not None:
                page = self.driver.introspect.list(JobFilter(queue=queue), limit=200, after=page.after)
                jobs.extend(page.jobs)
        return [j for j in jobs if j.id in self.ids]

    def run(self, *, workers: int = 3, seconds: float = 60.0) -> int:
        """Run the demo; answers the exit status (0 when every check passed)."""
        out = self.screen
        out.event(f"jobcore demo on {type(self.driver).__name__}: {workers} workers + 1 that will crash")
        crasher = Worker(
            [UPLOADS], concurrency=4, lease=LEASE, driver=self.driver, registry=self.registry, poll_interval=0.05,
            worker_id="worker-crashy", on_settled=self._on_settled, rescue_interval=None, drain_timeout=2,
        ).start()
        self.baseline = self._snapshot()  # a database may hold jobs of earlier demo runs
        self._enqueue()
        self._hand_uploads_to(crasher)
        crash = threading.Thread(target=self._crash, args=(crasher, 0.7), daemon=True)
        fleet = [
            Worker(
                [QUEUE, UPLOADS], concurrency=8, lease=LEASE, driver=self.driver, registry=self.registry,
                poll_interval=0.1, worker_id=f"worker-{n + 1}", on_settled=self._on_settled, rescue_interval=5.0,
                drain_timeout=5,
            )
            for n in range(workers)
        ]
        started = time.monotonic()
        with use_job_driver(self.driver):
            for worker in fleet:
                worker.start()
            crash.start()
            finished_in_time = self._watch([*fleet, crasher], started, seconds)
            for worker in fleet:
                worker.stop(5)
        crash.join(5)
        elapsed = time.monotonic() - started
        out.end()
        return self._summary([*fleet, crasher], elapsed, finished_in_time)

    def _watch(self, workers: list[Worker], started: float, seconds: float) -> bool:
        total = len(self.ids)
        while True:
            counts = self._snapshot()
            finished = sum(counts[s.value] - self.baseline[s.value] for s in FINISHED_STATES)
            elapsed = time.monotonic() - started
            retried = sum(w.counts["retried"] for w in workers)
            width = 30
            filled = int(width * min(1.0, finished / max(1, total)))
            rate = finished / elapsed if elapsed > 0 else 0.0
            self.screen.bar(
                f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{total} finished  "
                f"running {counts['running']:3d}  waiting {counts['ready'] + counts['scheduled']:5d}  "
                f"retries {retried:3d}  dead {counts['dead'] - self.baseline['dead']}  "
                f"{rate:6.0f} jobs/s  {elapsed:4.1f}s",
                force=finished >= total,
            )
            if finished >= total and counts["running"] == 0 and not (counts["ready"] or counts["scheduled"]):
                return True
            if elapsed > seconds:
                self.screen.event(f"time limit of {seconds:g}s reached with {total - finished} jobs unfinished")
                return False
            time.sleep(0.1)

    def _summary(self, workers: list[Worker], elapsed: float, finished_in_time: bool) -> int:
        jobs = self._all_jobs()
        states = Counter(j.state.value for j in jobs)
        lines = ["", "state        jobs"]
        lines += [f"{state.value:<12}{states.get(state.value, 0):>5}" for state in JobState]
        lines.append(f"{'total':<12}{len(jobs):>5}")
        totals: Counter[str] = Counter()
        for worker in workers:
            totals.update(worker.counts)
        done = states.get("done", 0) + states.get("dead", 0) + states.get("failed", 0)
        lines.append("")
        lines.append(
            f"throughput: {done} jobs finished in {elapsed:.1f}s = {done / elapsed:.0f} jobs/s "
            f"({len(workers)} workers; {totals['retried']} retries, {totals['lost']} leases lost, "
            f"{totals['abandoned']} abandoned)"
        )
        problems = self._check(jobs, states)
        if not finished_in_time:
            problems.append("the demo did not finish within its time limit")
        if problems:
            lines.append("CHECKS FAILED:")
            lines += [f"  - {p}" for p in problems[:20]]
        else:
            lines.append(
                "checks: no job lost; none ran again without a recorded failure or lost lease; "
                "every ending reported once"
            )
        self.screen.event("\n".join(lines))
        return 1 if problems else 0

    def _check(self, jobs: list[Job], states: Counter[str]) -> list[str]:
        problems: list[str] = []
        by_id = {j.id: j for j in jobs}
        missing = self.ids - set(by_id)
        if missing:
            problems.append(f"{len(missing)} jobs lost: {sorted(missing)[:5]}")
        for state in ("done", "dead"):
            if states.get(state, 0) != self.expected[state]:
                problems.append(f"expected {self.expected[state]} {state} jobs, found {states.get(state, 0)}")
        for job in jobs:
            runs = self.executions[job.id]
            if job.state not in FINISHED_STATES:
                problems.append(f"job {job.id} ({job.name}) is still {job.state.value}")
            if runs > job.attempt:
                problems.append(f"job {job.id} ({job.name}) ran {runs} times in {job.attempt} attempts")
            if runs - 1 > len(job.errors):
                problems.append(f"job {job.id} ({job.name}) ran {runs} times with only {len(job.errors)} failures")
            expected_ending = {"done": "completed", "dead": "dead_lettered"}.get(job.state.value)
            endings = {o: n for (jid, o), n in self.endings.items() if jid == job.id}
            if expected_ending and endings != {expected_ending: 1}:
                problems.append(f"job {job.id} ({job.name}) ended {job.state.value} but was reported {endings}")
        report = next((j for j in jobs if j.name == "demo.report"), None)
        if report is not None and report.attempt != 1:
            problems.append(f"the long report job needed {report.attempt} attempts: its lease was not kept")
        uploads = [j for j in jobs if j.name == "demo.upload"]
        if uploads and not any(j.attempt > 1 for j in uploads):
            problems.append("no upload was reclaimed after the simulated crash")
        return problems

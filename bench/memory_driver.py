"""Benchmark of the in-memory driver: claim + ack_many throughput (a script, not a test).

    .venv/bin/python bench/memory_driver.py [--jobs N]

Measures jobs/s for claim + ``ack_many`` with 1 and 4 threads and claim batches of 1, 10
and 100, each on a fresh driver holding ``N`` ready jobs (enqueued before timing starts);
then claim + ``ack_many(..., landed_only=True)``, which answers only whether each ack
landed: the way the worker acks when no ``on_settled`` hook needs the settled jobs.
The goal (issue 7) is 100,000 jobs/s single-threaded at a sensible batch, so application
test suites never wait on jobcore. :func:`run` answers ``(label, jobs/s)`` pairs, which
``bench/peers.py`` prints in its memory-driver section.
"""

from __future__ import annotations

import argparse
import threading
import time

from jobcore.drivers.memory import MemoryDriver

__all__ = ["run"]

BATCHES = (1, 10, 100)
THREADS = (1, 4)


def _fill(jobs: int) -> MemoryDriver:
    driver = MemoryDriver()
    for start in range(0, jobs, 10_000):
        driver.enqueue_many([{"name": "bench", "payload": {"n": i}} for i in range(start, min(jobs, start + 10_000))])
    return driver


def drain(driver: MemoryDriver, threads: int, batch: int, landed_only: bool = False) -> tuple[int, float, float]:
    """Claim and ack everything ready with ``threads`` threads: (jobs settled, seconds, CPU seconds)."""
    done = [0] * threads

    def work(slot: int) -> None:
        worker = f"bench-{slot}"
        while True:
            claimed = driver.claim(["default"], worker_id=worker, limit=batch, lease=60).claimed
            if not claimed:
                return
            pairs = [(c.token, None) for c in claimed]
            if landed_only:
                done[slot] += sum(driver.ack_many(pairs, landed_only=True))
            else:
                done[slot] += sum(1 for a in driver.ack_many(pairs) if a is not None)

    cpu, started = time.process_time(), time.perf_counter()
    if threads == 1:  # in this thread: no thread start in the timing
        work(0)
    else:
        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    return sum(done), time.perf_counter() - started, time.process_time() - cpu


def run(jobs: int = 50_000) -> list[tuple[str, float]]:
    """``(label, value)`` for every answer kind, thread count and batch size: jobs per wall
    second and per CPU second of this process (on a shared machine the second is the
    steadier one). Each run is checked complete."""
    figures: list[tuple[str, float]] = []
    for landed_only in (False, True):
        for threads in THREADS:
            for batch in BATCHES:
                driver = _fill(jobs)
                settled, seconds, cpu = drain(driver, threads, batch, landed_only)
                if settled != jobs:
                    raise RuntimeError(f"settled {settled} of {jobs} jobs")
                ack = "ack_many landed_only" if landed_only else "ack_many"
                label = f"memory claim+{ack}, {threads} thread{'s' if threads > 1 else ''}, batch {batch}"
                figures.append((f"{label} (jobs/s)", settled / seconds))
                figures.append((f"{label} (jobs per CPU second)", settled / max(cpu, 1e-9)))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000, help="ready jobs per run (default 50,000)")
    args = parser.parse_args()
    for label, value in run(args.jobs):
        print(f"{label:<60} {value:>10,.0f}")


if __name__ == "__main__":
    main()

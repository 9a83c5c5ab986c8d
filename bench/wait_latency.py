"""How soon ``driver.wait`` answers after the job finishes (rules A): p50/p99 per driver.

    .venv/bin/python bench/wait_latency.py [--rounds 200] [--url postgresql://...]

Each round enqueues a job, claims it, starts a waiter (a thread calling
``driver.wait(job_id, timeout=30, poll=60)``, or a task awaiting the async driver's),
lets it settle into its wait, then acks the job and records the time from the ack call
to the waiter's answer. With ``poll=60`` only the store's wake-up can answer in under a
minute, so the figures are the notification path: the memory store's own settle and
PostgreSQL's LISTEN/NOTIFY.

Also printed per driver: how long ``wait`` takes to answer a job that is already
finished (one read), and how long a waiter takes to start waiting on PostgreSQL
(LISTEN on a connection of its own, then the ``waited`` mark).

PostgreSQL: a throwaway server from the local binaries (as the test fixtures start one)
unless ``--url`` or ``JOBCORE_BENCH_POSTGRES_URL`` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fixtures/ is not installed: find it from here

import psycopg
from jobcore.drivers.memory import AsyncMemoryDriver, MemoryDriver
from jobcore.drivers.postgres import AsyncPostgresDriver, PostgresDriver

from fixtures.postgres import LocalServer, find_binaries

SETTLE = 0.1
"""Seconds a waiter is given to be waiting before the ack (its LISTEN and mark included)."""


def _pcts(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    return f"p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   (n={len(ordered)})"


def sync_rounds(driver: Any, rounds: int, poll: float) -> tuple[list[float], list[float]]:
    """(ack -> answer latencies, wait on a finished job) over ``rounds`` jobs."""
    woken: list[float] = []
    finished: list[float] = []
    for n in range(rounds):
        job = driver.enqueue("bench_wait", {"n": n}, queue="bench_wait")
        token = driver.claim(["bench_wait"], worker_id="bench", lease=60).claimed[0].token
        answered: list[float] = []

        def wait(job_id: str = job.id, out: list[float] = answered) -> None:
            driver.wait(job_id, timeout=30, poll=poll)
            out.append(time.perf_counter())

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(SETTLE)
        acked = time.perf_counter()
        driver.ack(token, n)
        waiter.join(60)
        woken.append(answered[0] - acked)
        start = time.perf_counter()
        driver.wait(job.id, timeout=30)
        finished.append(time.perf_counter() - start)
    return woken, finished


async def async_rounds(driver: Any, rounds: int, poll: float) -> list[float]:
    """ack -> answer latencies of ``await driver.wait(...)`` over ``rounds`` jobs, one loop."""
    woken: list[float] = []
    for n in range(rounds):
        job = await driver.enqueue("bench_wait", {"n": n}, queue="bench_wait")
        token = (await driver.claim(["bench_wait"], worker_id="bench", lease=60)).claimed[0].token
        waiter = asyncio.create_task(driver.wait(job.id, timeout=30, poll=poll))
        await asyncio.sleep(SETTLE)
        acked = time.perf_counter()
        await driver.ack(token, n)
        await waiter
        woken.append(time.perf_counter() - acked)
    return woken


def waiter_start(url: str, schema: str, rounds: int) -> list[float]:
    """How long a PostgreSQL wait takes to time out at 1 ms on a live job: its LISTEN connection,
    the mark and two reads (the floor of every wait on an unfinished job)."""
    driver = PostgresDriver(url, schema=schema)
    out = []
    try:
        job = driver.enqueue("bench_wait_start", queue="bench_wait_start", delay=3600)
        for _ in range(rounds):
            start = time.perf_counter()
            with contextlib.suppress(TimeoutError):
                driver.wait(job.id, timeout=0.001)
            out.append(time.perf_counter() - start)
    finally:
        driver.close()
    return out


def run(name: str, make: Callable[[], Any], rounds: int, poll: float) -> None:
    driver = make()
    try:
        woken, finished = sync_rounds(driver, rounds, poll)
    finally:
        driver.close()
    print(f"{name:<22} ack -> wait answered  {_pcts(woken)}")
    print(f"{'':<22} finished job, at once {_pcts(finished)}")


def run_async(name: str, make: Callable[[], Any], rounds: int, poll: float) -> None:
    async def main() -> list[float]:
        driver = make()
        try:
            return await async_rounds(driver, rounds, poll)
        finally:
            await driver.close()

    print(f"{name:<22} ack -> wait answered  {_pcts(asyncio.run(main()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("JOBCORE_BENCH_POSTGRES_URL"))
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(f"wait wake-up latency, {args.rounds} rounds per driver (waiters poll every 60 s: only a wake-up answers)")
    run("memory", MemoryDriver, args.rounds, 60.0)
    run_async("memory-async", AsyncMemoryDriver, args.rounds, 60.0)
    server = None
    url = args.url
    if url is None:
        bindir = find_binaries()
        if bindir is None:
            print("postgres: skipped (no --url and no PostgreSQL binaries)")
            return
        server = LocalServer(bindir).start()
        url = server.url
    schema = f"jc_bench_wait_{os.getpid()}"
    try:
        setup = PostgresDriver(url, schema=schema)
        setup.migrate()
        setup.close()
        run("postgres", lambda: PostgresDriver(url, schema=schema), args.rounds, 60.0)
        run_async("postgres-async", lambda: AsyncPostgresDriver(url, schema=schema), args.rounds, 60.0)
        print(f"{'postgres':<22} wait set-up (1 ms)   {_pcts(waiter_start(url, schema, min(args.rounds, 100)))}")
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

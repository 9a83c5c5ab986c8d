"""A fleet of worker processes through PgBouncer on one small PostgreSQL (a script, not a test).

    .venv/bin/python bench/fleet.py [--workers 100] [--jobs 50000] [--concurrency 2]
        [--connections 4] [--latency-jobs 500] [--direct]

Starts a throwaway PostgreSQL with ``max_connections = 100`` and Debian's pgbouncer in
front of it (``pool_mode = transaction``, its defaults but ``max_client_conn``: a hundred
workers with 4 connections each are 400 clients), then:

1. enqueues ``--jobs`` no-op jobs in batches of 1,000 (through the pooler);
2. forks ``--workers`` worker processes (each a :class:`jobcore.Worker` on its own driver
   built from the pooler's URL, ``pool_max = --connections``, no ``listen_url``: they
   poll every second), waits until every one is built, releases them all at once and
   times the drain until the store holds every job ``done``;
3. enqueues ``--latency-jobs`` jobs one at a time, 20 ms apart, into the idle fleet and
   takes each one's enqueue-to-start time;
4. stops the fleet (SIGTERM, drain) and checks the independent record: every handler run
   appends ``seq`` to its process's own file, so every job must appear exactly once across
   the files, whatever the store says; and the store must hold every job ``done``.

It prints the throughput, enqueue-to-start p50/p99, the most server connections seen
(``pg_stat_activity``, sampled every 50 ms), connection errors (WARNING/ERROR lines in
the workers' logs naming ``JC_DB``; PgBouncer's log lines at WARNING or ERROR), and the
workers' memory (PSS: shared pages split between the processes sharing them; the workers
are forked from a parent that imported everything, so most of their code is shared).

``--direct`` runs the same without the pooler (one worker with wake-ups over LISTEN is
the single-process comparison: ``--workers 1 --concurrency 8 --direct``).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fixtures/ is not installed: find it from here

import psycopg

from fixtures.pgbouncer import Bouncer, find_pgbouncer
from fixtures.postgres import LocalServer, find_binaries
from jobcore import Registry, Worker, connect

SCHEMA = "jc_fleet"
QUEUE = "fleet"


def _worker(index: int, url: str, folder: str, concurrency: int, connections: int, ready: Any, go: Any) -> None:
    """One worker process: record every run of the handler in its own file, run until SIGTERM."""
    logging.basicConfig(
        filename=os.path.join(folder, f"worker-{index}.log"), level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    record = os.open(os.path.join(folder, f"record-{index}.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    registry = Registry()

    def noop(payload: dict[str, Any]) -> None:
        os.write(record, f"{payload['seq']} {time.time() - payload['t']:.6f}\n".encode())

    registry.job(name="fleet.noop", queue=QUEUE)(noop)
    driver = connect(url, pool_max=connections)
    worker = Worker(
        [QUEUE], driver=driver, registry=registry, concurrency=concurrency, poll_interval=1.0,
        scheduler=False, retention=None, drain_timeout=30,
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
    ready.release()
    go.wait()
    try:
        worker.run()
    finally:
        driver.close()
        os.close(record)


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            return next(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def _count_done(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute(f"SELECT count(*) FROM {SCHEMA}.jobs WHERE state = 'done'").fetchone()
    return int(row[0]) if row else 0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(args: argparse.Namespace) -> int:
    bindir = find_binaries()
    if bindir is None:
        sys.exit("no PostgreSQL binaries")
    server = LocalServer(bindir, extra=("-c", "max_connections=100"))
    server.start()
    bouncer = None
    try:
        if not args.direct:
            binary = find_pgbouncer()
            if binary is None:
                sys.exit("no pgbouncer (apt-get install pgbouncer)")
            bouncer = Bouncer(binary, server.url, settings={"max_client_conn": "2000"}, timezone=None).start()
        base = bouncer.url if bouncer else server.url
        url = f"{base}?schema={SCHEMA}"
        setup = connect(url)
        setup.migrate()
        setup.close()
        folder = tempfile.mkdtemp(prefix="jobcore-fleet-")
        producer = connect(url)
        start = time.monotonic()
        stamp = time.time()
        for first in range(0, args.jobs, 1000):
            producer.enqueue_many([
                {"name": "fleet.noop", "queue": QUEUE, "payload": {"seq": n, "t": stamp}}
                for n in range(first, min(args.jobs, first + 1000))
            ])
        enqueued = time.monotonic() - start
        producer.close()  # not across the fork
        context = multiprocessing.get_context("fork")
        ready = context.Semaphore(0)
        go = context.Event()
        began = time.monotonic()
        procs = [
            context.Process(target=_worker, args=(i, url, folder, args.concurrency, args.connections, ready, go))
            for i in range(args.workers)
        ]
        for proc in procs:
            proc.start()
        admin = psycopg.connect(server.url, autocommit=True)  # opened after the fork: no child shares its socket
        max_conn = admin.execute("SHOW max_connections").fetchone()
        for _ in procs:
            if not ready.acquire(timeout=300):
                sys.exit("the fleet did not come up within 300 s")
        print(f"fleet: {args.workers} workers built in {time.monotonic() - began:.1f} s "
              f"(server max_connections={max_conn[0] if max_conn else '?'}, "
              f"{'direct' if args.direct else 'through pgbouncer, pool_mode=transaction'})", flush=True)
        producer = connect(url)
        most = [0]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                ).fetchone()
                most[0] = max(most[0], int(row[0]) if row else 0)
                sampling.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.monotonic()
        go.set()
        while _count_done(admin) < args.jobs:
            if time.monotonic() - start > args.timeout:
                print(f"drain timed out after {args.timeout} s at {_count_done(admin)} jobs", flush=True)
                break
            time.sleep(0.2)
        drained = time.monotonic() - start
        pss = [_pss_kib(proc.pid) for proc in procs if proc.pid is not None]
        latency_started = args.jobs
        for n in range(args.latency_jobs):
            producer.enqueue("fleet.noop", {"seq": latency_started + n, "t": time.time()}, queue=QUEUE)
            time.sleep(0.02)
        total = args.jobs + args.latency_jobs
        deadline = time.monotonic() + 60
        while _count_done(admin) < total and time.monotonic() < deadline:
            time.sleep(0.2)
        sampling.set()
        sampler.join()
        time.sleep(3)  # the fleet idle, polling
        idle_conns = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        ).fetchone()
        for proc in procs:
            if proc.pid is not None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.join(60)
        producer.close()
        # -- the independent record ---------------------------------------------------------
        runs: dict[int, int] = {}
        waits: dict[int, float] = {}
        for name in os.listdir(folder):
            if name.startswith("record-"):
                for line in Path(folder, name).read_text().splitlines():
                    seq_text, wait = line.split()
                    seq = int(seq_text)
                    runs[seq] = runs.get(seq, 0) + 1
                    waits[seq] = float(wait)
        missing = [n for n in range(total) if n not in runs]
        twice = [n for n, count in runs.items() if count > 1]
        errors = 0
        for name in os.listdir(folder):
            if name.startswith("worker-"):
                errors += sum(1 for line in Path(folder, name).read_text().splitlines() if "JC_DB" in line)
        bouncer_errors = 0
        if bouncer is not None:
            log = Path(bouncer.root, "pgbouncer.log")
            if log.exists():
                bouncer_errors = sum(
                    1 for line in log.read_text().splitlines() if " WARNING " in line or " ERROR " in line
                )
        states = admin.execute(f"SELECT state, count(*) FROM {SCHEMA}.jobs GROUP BY state ORDER BY state").fetchall()
        latency = [waits[n] * 1000 for n in range(args.jobs, total) if n in waits]
        print(f"enqueue: {args.jobs} jobs in {enqueued:.1f} s ({args.jobs / enqueued:.0f} jobs/s)")
        print(f"drain: {args.jobs} jobs in {drained:.1f} s = {args.jobs / drained:.0f} jobs/s")
        print(f"enqueue-to-start, idle fleet, {len(latency)} jobs 20 ms apart: p50 {_percentile(latency, 0.5):.1f} ms,"
              f" p99 {_percentile(latency, 0.99):.1f} ms, max {max(latency, default=float('nan')):.1f} ms")
        print(f"independent record: {len(runs)} of {total} jobs ran, {len(missing)} never, {len(twice)} more than once")
        print(f"store: {dict(states)}")
        print(f"connection errors: {errors} JC_DB lines in worker logs, "
              f"{bouncer_errors} WARNING/ERROR lines from pgbouncer")
        print(f"server connections: {idle_conns[0] if idle_conns else '?'} with the fleet idle, at most {most[0]}"
              f" during the run (max_connections {max_conn[0] if max_conn else '?'})")
        if pss:
            print(f"worker memory (PSS): mean {statistics.mean(pss) / 1024:.1f} MiB, max {max(pss) / 1024:.1f} MiB, "
                  f"total {sum(pss) / 1024:.0f} MiB for {len(pss)} processes")
        print(f"records and logs: {folder}", flush=True)
        admin.close()
        return 0 if not missing and not twice and errors == 0 else 1
    finally:
        if bouncer is not None:
            bouncer.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--latency-jobs", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds the drain may take before giving up")
    parser.add_argument("--direct", action="store_true", help="no pooler (the single-process comparison)")
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()

"""Benchmark of the PostgreSQL driver at the driver level (a script, not a test).

    .venv/bin/python bench/postgres_driver.py [--quick] [--url postgresql://...]

Starts its own throwaway server from the local binaries (as the test fixtures do, with
``pg_stat_statements`` loaded) unless ``--url`` or ``JOBCORE_BENCH_POSTGRES_URL`` names
one, and prints:

1. claim + ack_many throughput (jobs/s) with 1 and 4 threads and batch sizes 1, 10, 100;
2. statements per claimed-and-settled job, counted by the server (pg_stat_statements)
   and by the client (statements sent);
3. claim cost (claim of 10 + ack_many) with 1,000,000 finished rows in the table against
   an empty one; the goal is a ratio within 1.5x.

The numbers are for one machine and one server; the same harness is meant to run other
queues side by side once the worker runtime's comparison lands, so every figure is a
plain ``(label, value)`` line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fixtures/ is not installed: find it from here

import psycopg
from jobcore.drivers.postgres import PostgresDriver, make_pool
from psycopg import sql

from fixtures.postgres import LocalServer, find_binaries

SCHEMA_PREFIX = "jc_bench"


class CountingCursor(psycopg.Cursor[Any]):
    """Counts statements the driver sends (one ``execute`` = one statement, one round trip)."""

    sent = 0
    lock = threading.Lock()

    def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        with CountingCursor.lock:
            CountingCursor.sent += 1
        return super().execute(query, params, **kw)


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _fresh(pool: Any, url: str, name: str) -> PostgresDriver:
    schema = f"{SCHEMA_PREFIX}_{name}"
    _drop(url, schema)
    driver = PostgresDriver(pool, schema=schema)
    driver.migrate()
    return driver


def _fill(driver: PostgresDriver, count: int) -> None:
    for start in range(0, count, 5000):
        driver.enqueue_many([{"name": "bench", "payload": {"n": i}} for i in range(start, min(count, start + 5000))])


def _drain(driver: PostgresDriver, threads: int, batch: int) -> tuple[int, float]:
    done = [0] * threads

    def work(slot: int) -> None:
        worker = f"bench-{slot}"
        while True:
            claimed = driver.claim(["default"], worker_id=worker, limit=batch, lease=60).claimed
            if not claimed:
                return
            driver.ack_many([(c.token, None) for c in claimed])
            done[slot] += len(claimed)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(done), time.perf_counter() - started


def throughput(pool: Any, url: str, quick: bool) -> None:
    print("\n== claim + ack_many throughput (driver level, one queue) ==")
    print(f"{'threads':>7} {'batch':>5} {'jobs':>7} {'seconds':>8} {'jobs/s':>9}")
    sizes = {1: 1000, 10: 5000, 100: 20000} if quick else {1: 4000, 10: 20000, 100: 60000}
    for threads in (1, 4):
        for batch in (1, 10, 100):
            driver = _fresh(pool, url, f"tp_{threads}_{batch}")
            _fill(driver, sizes[batch])
            jobs, seconds = _drain(driver, threads, batch)
            print(f"{threads:>7} {batch:>5} {jobs:>7} {seconds:>8.2f} {jobs / seconds:>9.0f}")
            _drop(url, driver.schema)


def statements(url: str) -> None:
    print("\n== statements per claimed-and-settled job ==")
    counted = make_pool(url, min_size=1, max_size=4, cursor_factory=CountingCursor)
    driver = _fresh(counted, url, "stmts")
    have_pgss = True
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        except psycopg.Error:
            have_pgss = False
    jobs = 1000
    for batch in (1, 10, 100):
        _fill(driver, jobs)
        driver.introspect.get("1")  # schema check done before counting
        if have_pgss:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SELECT pg_stat_statements_reset()")
        CountingCursor.sent = 0
        settled, _ = _drain(driver, 1, batch)
        client = CountingCursor.sent
        line = f"batch {batch:>3}: client-side {client / settled:.3f} statements/job ({client} for {settled} jobs)"
        if have_pgss:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE %s",
                    (f"%{driver.schema}%",),
                ).fetchone()
            server = int(row[0]) if row else 0
            line += f"; server-side (pg_stat_statements) {server / settled:.3f}"
        print(line)
    print("  (a job is claimed by one claim statement and settled by one ack_many statement, both per batch;")
    print("   the last claim of each run finds nothing, which is the one extra statement per run)")
    driver.close()
    counted.close()
    _drop(url, driver.schema)


def _one_claim(driver: PostgresDriver) -> float:
    started = time.perf_counter()
    claimed = driver.claim(["default"], worker_id="cost", limit=10, lease=60).claimed
    driver.ack_many([(c.token, None) for c in claimed])
    assert len(claimed) == 10
    return time.perf_counter() - started


def _claim_costs(drivers: list[PostgresDriver], rounds: int) -> list[float]:
    """Median claim cost per driver, measured alternately so load drift hits both alike."""
    samples: list[list[float]] = [[] for _ in drivers]
    for _ in range(rounds):
        for index, driver in enumerate(drivers):
            samples[index].append(_one_claim(driver))
    return [statistics.median(s) for s in samples]


def claim_cost(pool: Any, url: str, quick: bool) -> None:
    finished = 100_000 if quick else 1_000_000
    rounds = 300
    print(f"\n== claim cost: claim(limit=10) + ack_many, median of {rounds} alternating rounds ==")
    empty = _fresh(pool, url, "cost_empty")
    full = _fresh(pool, url, "cost_full")
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, queue, payload, state, priority, attempt, max_attempts, run_at, created_at,"
                " finished_at, claim_no, result, errors)"
                " SELECT 'bench', 'default', '{{\"n\":' || g || '}}', 'done', 0, 1, 20, now() - interval '1 day',"
                " now() - interval '1 day', now() - interval '1 day', 1, NULL, '[]' FROM generate_series(1, %s) g"
            ).format(sql.Identifier(full.schema, "jobs")),
            (finished,),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(full.schema, "jobs")))
    print(f"  inserted {finished:,} finished rows in {time.perf_counter() - started:.1f}s")
    for driver in (empty, full):
        _fill(driver, rounds * 10 + 1000)
    _claim_costs([empty, full], 20)  # warm the plan cache and the buffers
    cost_empty, cost_full = _claim_costs([empty, full], rounds)
    print(f"  empty table:               {cost_empty * 1000:.2f} ms")
    print(f"  {finished:>9,} finished rows: {cost_full * 1000:.2f} ms")
    ratio = cost_full / cost_empty
    print(f"  ratio {ratio:.2f}x (goal: within 1.5x) -> {'OK' if ratio <= 1.5 else 'MISSED'}")
    for driver in (empty, full):
        _drop(url, driver.schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("JOBCORE_BENCH_POSTGRES_URL"))
    parser.add_argument("--quick", action="store_true", help="smaller runs (100k finished rows)")
    parser.add_argument("--only", choices=["throughput", "statements", "cost"], help="run one part")
    args = parser.parse_args()
    server = None
    url = args.url
    if not url:
        bindir = find_binaries()
        if bindir is None:
            raise SystemExit("no --url and no PostgreSQL binaries (initdb/postgres) to start a server")
        server = LocalServer(bindir, extra=("-c", "shared_preload_libraries=pg_stat_statements",
                                            "-c", "max_wal_size=4GB", "-c", "shared_buffers=256MB")).start()
        url = server.url
    try:
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'} at {url}; psycopg {psycopg.__version__}")
        pool = make_pool(url, min_size=4, max_size=8)
        try:
            if args.only in (None, "throughput"):
                throughput(pool, url, args.quick)
            if args.only in (None, "statements"):
                statements(url)
            if args.only in (None, "cost"):
                claim_cost(pool, url, args.quick)
        finally:
            pool.close()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()

"""Soak benchmark: millions of jobs through one PostgreSQL queue while pruning runs (a script, not a test).

    .venv/bin/python bench/soak.py                    # 2,000,000 jobs (tens of minutes)
    .venv/bin/python bench/soak.py --jobs 200000      # a quick look

Starts its own throwaway PostgreSQL from the local binaries (through
``fixtures.postgres``, as the tests and ``bench/postgres_driver.py`` do) unless
``--url`` or ``JOBCORE_BENCH_POSTGRES_URL`` names one, then runs, each in its own
process:

* one **producer** keeping about ``--backlog`` jobs waiting (``enqueue_many`` of 500);
* ``--workers`` **workers**, each a driver-level loop ``claim(limit=--batch)`` then
  ``ack_many`` of what it got, with no handler work. These are claim/ack loops, not the
  :class:`jobcore.Worker` runtime: handler dispatch and the runtime's polling cadence
  would be measured with it, and this measures the table;
* one **pruner** calling ``introspect.prune`` with a short policy (every finished state
  kept ``--keep`` seconds) until nothing is eligible, then sleeping ``--prune-every``
  seconds, as a worker's periodic prune would.

Every ``--window`` jobs it prints the client-side latency of the claim statement
(p50/p95/p99 of ``driver.claim`` calls that window), throughput, and the table's size:
``pg_total_relation_size`` of ``jobs`` (heap + indexes + TOAST), the rows actually in it,
and the statistics collector's ``n_live_tup``/``n_dead_tup`` and autovacuum count. The
goal: claim latency at the end within 1.5x of the start, and a table whose size is set
by the policy (jobs per second x ``--keep``, plus dead rows between vacuums) instead of
growing with the total. The last column is the machine's load average: on a shared
machine latencies follow it, so read them against it. ``--set fillfactor=100`` (and other
``NAME=VALUE`` storage settings) tries the table with settings other than the migration's.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fixtures/ is not installed: find it from here

import psycopg
from jobcore.drivers.postgres import PostgresDriver

from fixtures.postgres import LocalServer, find_binaries
from jobcore.records import RetentionPolicy

SCHEMA = "jc_soak"
QUEUE = "soak"
ENQUEUE_BATCH = 500
FLUSH_EVERY = 50
"""Claims a worker times before sending their latencies to the monitor."""

_STATS = """
SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid),
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.n_tup_upd, s.n_tup_hot_upd,
       (SELECT count(*) FROM {jobs} AS j WHERE j.state IN ('done', 'failed', 'dead', 'cancelled')),
       (SELECT count(*) FROM {jobs} AS j WHERE j.state NOT IN ('done', 'failed', 'dead', 'cancelled'))
FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = to_regclass(%(table)s)
"""


def _driver(url: str) -> PostgresDriver:
    return PostgresDriver(url, schema=SCHEMA, pool_min=1, pool_max=2)


def producer(url: str, total: int, backlog: int, completed: Any, stop: Any) -> None:
    """Keeps about ``backlog`` jobs waiting until ``total`` were enqueued."""
    driver = _driver(url)
    produced = 0
    try:
        while produced < total and not stop.is_set():
            if produced - completed.value >= backlog:
                time.sleep(0.005)
                continue
            size = min(ENQUEUE_BATCH, total - produced)
            driver.enqueue_many([{"name": "soak", "payload": {"n": produced + i}, "queue": QUEUE}
                                 for i in range(size)])
            produced += size
    finally:
        driver.close()


def worker(url: str, slot: int, batch: int, window: int, total: int, completed: Any, stop: Any,
           out: Any) -> None:
    """Claim and ack until ``total`` jobs are done; sends (window, [claim seconds]) to the monitor."""
    driver = _driver(url)
    name = f"soak-{slot}"
    samples: list[float] = []
    current = 0
    try:
        while not stop.is_set() and completed.value < total:
            started = time.perf_counter()
            claimed = driver.claim([QUEUE], worker_id=name, limit=batch, lease=timedelta(minutes=5)).claimed
            took = time.perf_counter() - started
            if not claimed:
                time.sleep(0.002)  # the producer is behind: an empty poll is not a claim we time
                continue
            driver.ack_many([(c.token, None) for c in claimed])
            with completed.get_lock():
                before = completed.value
                completed.value += len(claimed)
            here = before // window
            if here != current and samples:
                out.put((current, samples))
                samples = []
            current = here
            samples.append(took)
            if len(samples) >= FLUSH_EVERY:
                out.put((current, samples))
                samples = []
        if samples:
            out.put((current, samples))
    finally:
        driver.close()


def pruner(url: str, keep: float, every: float, window: int, completed: Any, stop: Any, out: Any) -> None:
    """Prunes with every finished state kept ``keep`` seconds; sends (window, removed, seconds) per call."""
    driver = _driver(url)
    policy = RetentionPolicy(done=keep, failed=keep, cancelled=keep, dead=keep)
    try:
        while not stop.is_set():
            started = time.perf_counter()
            result = driver.introspect.prune(policy, limit=10_000, batch=500)
            out.put((completed.value // window, result.total_removed, time.perf_counter() - started))
            if result.total_remaining == 0:
                stop.wait(every)
    finally:
        driver.close()


@dataclass
class Window:
    """What the monitor gathered for one window of ``--window`` jobs."""

    claims: list[float] = field(default_factory=list)
    pruned: int = 0
    prune_calls: int = 0
    prune_seconds: float = 0.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def _stats(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    jobs = psycopg.sql.Identifier(SCHEMA, "jobs")
    table = jobs.as_string()
    row = conn.execute(psycopg.sql.SQL(_STATS).format(jobs=jobs), {"table": table}).fetchone()
    assert row is not None
    return tuple(row)


def run(url: str, args: argparse.Namespace) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.Identifier(SCHEMA)))
        version = conn.execute("SHOW server_version").fetchone()
        naptime = conn.execute("SHOW autovacuum_naptime").fetchone()
    setup = _driver(url)
    setup.migrate()
    setup.close()
    if args.set:  # experiments: storage settings other than the migration's
        pairs = [item.split("=", 1) for item in args.set]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("ALTER TABLE {} SET ({})").format(
                psycopg.sql.Identifier(SCHEMA, "jobs"),
                psycopg.sql.SQL(", ").join(
                    psycopg.sql.SQL("{} = {}").format(psycopg.sql.Identifier(k), psycopg.sql.Literal(val))
                    for k, val in pairs
                ),
            ))
            options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
                                   (psycopg.sql.Identifier(SCHEMA, "jobs").as_string(),)).fetchone()
        print(f"jobs table settings: {options[0] if options else None}")
    print(f"PostgreSQL {version[0] if version else '?'}; autovacuum_naptime {naptime[0] if naptime else '?'};"
          f" psycopg {psycopg.__version__}; {os.cpu_count()} CPUs")
    print(f"{args.jobs:,} jobs, {args.workers} worker processes claiming {args.batch} at a time, backlog"
          f" {args.backlog:,}, every finished state kept {args.keep:g}s, prune when idle every {args.prune_every:g}s")
    ctx = mp.get_context("spawn")  # children build their own pools: nothing inherited from this process
    completed = ctx.Value("q", 0)
    stop = ctx.Event()
    claims: Any = ctx.Queue()
    prunes: Any = ctx.Queue()
    procs = [ctx.Process(target=producer, args=(url, args.jobs, args.backlog, completed, stop))]
    procs += [ctx.Process(target=worker, args=(url, i, args.batch, args.window, args.jobs, completed, stop, claims))
              for i in range(args.workers)]
    procs.append(ctx.Process(target=pruner, args=(url, args.keep, args.prune_every, args.window, completed, stop,
                                                  prunes)))
    windows: dict[int, Window] = {}

    def drain() -> None:
        for source in (claims, prunes):
            while True:
                try:
                    item = source.get_nowait()
                except queue_mod.Empty:
                    break
                w = windows.setdefault(item[0], Window())
                if source is claims:
                    w.claims.extend(item[1])
                else:
                    w.pruned += item[1]
                    w.prune_calls += 1
                    w.prune_seconds += item[2]

    print(f"\n{'jobs':>9} {'secs':>6} {'jobs/s':>6} | claim ms {'p50':>5} {'p95':>6} {'p99':>6} | "
          f"{'total MB':>8} {'heap':>6} {'index':>6} | rows: {'live':>6} {'finished':>8} | "
          f"{'n_live':>7} {'n_dead':>7} {'autovac':>7} {'hot%':>4} | {'pruned':>7} {'ms/call':>7} | {'load':>4}")
    started = time.perf_counter()
    for p in procs:
        p.start()
    report: list[tuple[Any, ...]] = []
    shown = 0
    last_time, last_done = started, 0
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            while shown < args.jobs // args.window:
                time.sleep(0.2)
                drain()
                done = completed.value
                if done < (shown + 1) * args.window and all(p.is_alive() for p in procs[1:-1]):
                    continue
                if done < (shown + 1) * args.window:
                    raise SystemExit("a worker process ended early")
                time.sleep(0.3)  # let the workers' last samples of the window arrive
                drain()
                now = time.perf_counter()
                w = windows.pop(shown, Window())
                size, heap, index, n_live, n_dead, autovac, upd, hot, finished, live = _stats(conn)
                rate = (done - last_done) / (now - last_time)
                last_time, last_done = now, done
                p50, p95, p99 = (_pct(w.claims, q) for q in (0.5, 0.95, 0.99)) if w.claims else (0.0, 0.0, 0.0)
                load = os.getloadavg()[0]  # the machine is shared: read latencies against it
                per_call = w.prune_seconds / w.prune_calls * 1000 if w.prune_calls else 0.0
                mb = 1024 * 1024
                line = (
                    size / mb, heap / mb, index / mb, live, finished, n_live, n_dead, autovac,
                    100 * hot / upd if upd else 0.0,
                )
                report.append((p50, p95, p99, *line))
                print(f"{(shown + 1) * args.window:>9,} {now - started:>6.0f} {rate:>6.0f} | "
                      f"{'':>8} {p50:>5.2f} {p95:>6.2f} {p99:>6.2f} | "
                      f"{line[0]:>8.1f} {line[1]:>6.1f} {line[2]:>6.1f} | {'':>5} {live:>6,} {finished:>8,} | "
                      f"{n_live:>7,} {n_dead:>7,} {autovac:>7} {line[8]:>4.0f} | "
                      f"{w.pruned:>7,} {per_call:>7.1f} | {load:>4.1f}",
                      flush=True)
                shown += 1
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    return _verdict(report, time.perf_counter() - started, args)


def _verdict(report: list[tuple[Any, ...]], seconds: float, args: argparse.Namespace) -> int:
    first, last = report[0], report[-1]
    print(f"\n{args.jobs:,} jobs in {seconds:.0f}s ({args.jobs / seconds:.0f} jobs/s)")
    ok = True
    for index, name in enumerate(("p50", "p95", "p99")):
        ratio = last[index] / first[index] if first[index] else float("inf")
        print(f"claim {name}: first window {first[index]:.2f} ms, last {last[index]:.2f} ms ({ratio:.2f}x)")
        ok = ok and (index != 0 or ratio <= 1.5)
    sizes = [r[3] for r in report]
    later = sizes[len(sizes) // 2:]
    print(f"table size (MB, jobs incl. indexes): first window {sizes[0]:.1f}, max {max(sizes):.1f},"
          f" median of the second half {statistics.median(later):.1f}, last {sizes[-1]:.1f}")
    grew = len(sizes) >= 4 and statistics.median(later) > 1.5 * statistics.median(sizes[1:len(sizes) // 2] or sizes)
    print(f"goal: p50 claim latency at the end within 1.5x of the start -> {'OK' if ok else 'MISSED'};"
          f" table size bounded -> {'MISSED (still growing)' if grew else 'OK'}")
    return 0 if ok and not grew else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("JOBCORE_BENCH_POSTGRES_URL"))
    parser.add_argument("--jobs", type=int, default=2_000_000)
    parser.add_argument("--window", type=int, default=100_000, help="report every this many jobs")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--batch", type=int, default=25, help="jobs per claim")
    parser.add_argument("--backlog", type=int, default=5_000, help="jobs the producer keeps waiting")
    parser.add_argument("--keep", type=float, default=30.0, help="seconds every finished state is kept")
    parser.add_argument("--prune-every", type=float, default=5.0, help="seconds between prunes once caught up")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="a storage setting of the jobs table to try instead of the migration's (repeatable)")
    args = parser.parse_args()
    if any("=" not in item for item in args.set or ()):
        parser.error("--set takes NAME=VALUE, e.g. --set fillfactor=100")
    if args.jobs < args.window:
        parser.error("--jobs must be at least one --window")
    server = None
    url = args.url
    if not url:
        bindir = find_binaries()
        if bindir is None:
            raise SystemExit("no --url and no PostgreSQL binaries (initdb/postgres) to start a server")
        server = LocalServer(bindir, extra=("-c", "max_wal_size=4GB", "-c", "shared_buffers=256MB")).start()
        url = server.url
    try:
        code = run(url, args)
    finally:
        if server is not None:
            server.stop()
    raise SystemExit(code)


if __name__ == "__main__":
    main()

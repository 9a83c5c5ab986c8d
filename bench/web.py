"""Benchmark of the operator dashboard's pages on PostgreSQL (a script, not a test).

    .venv/bin/python bench/web.py [--rows 1000000] [--requests 20] [--url postgresql://...]

Starts its own throwaway server from the local binaries (as the test fixtures do) unless
``--url`` or ``JOBCORE_BENCH_POSTGRES_URL`` names one, migrates jobcore's schema into a
fresh schema, inserts ``--rows`` jobs in one ``INSERT ... SELECT generate_series`` (four
queues; 90% done, the rest failed, dead, cancelled, ready, scheduled, running and
suspended; created over the last 24 hours, so the last hour holds about 4%), analyses
the table, then renders each page ``--requests`` times through Starlette's TestClient
(the whole app: routing, store calls, templates) and prints the median and 90th
percentile per page in milliseconds; the overview also with its charts, then its
counts too, read on every request (by default an app reads them at most every 30 s and
5 s: ``chart_ttl``, ``stats_ttl``). The goal
(issue 19): the overview and a jobs page under 200 ms each with 1,000,000 jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fixtures/ is not installed: find it from here

import psycopg
from jobcore.drivers.postgres import PostgresDriver, make_pool
from psycopg import sql
from starlette.testclient import TestClient

from fixtures.postgres import LocalServer, find_binaries
from jobcore.web import create_app

SCHEMA = "jc_bench_web"
GOAL_MS = 200.0

_STATES = (
    "CASE WHEN mod(g, 100) < 90 THEN 'done' WHEN mod(g, 100) < 93 THEN 'failed' WHEN mod(g, 100) < 94 THEN 'dead'"
    " WHEN mod(g, 100) < 95 THEN 'cancelled' WHEN mod(g, 100) < 98 THEN 'ready' WHEN mod(g, 100) < 99 THEN 'scheduled'"
    " WHEN mod(g, 1000) < 995 THEN 'running' ELSE 'suspended' END"
)


def fill(url: str, rows: int) -> None:
    """``rows`` jobs through jobcore's own table, in one statement (then ANALYZE)."""
    jobs = sql.Identifier(SCHEMA, "jobs")
    spacing_ms = 86_400_000 / rows  # spread over the last 24 hours, newest last
    query = sql.SQL(
        """INSERT INTO {jobs} (name, queue, payload, state, priority, attempt, max_attempts, run_at, created_at,
            attempted_at, finished_at, worker_id, claim_no, lease_expires_at, key, result, errors)
        SELECT 'task.' || mod(g, 7), 'q' || mod(g, 4), '{{"n": ' || g || ', "user": "u-' || mod(g, 997) || '"}}',
            s.state, 0, 1, 20, c.at, c.at, c.at,
            CASE WHEN s.state IN ('done', 'failed', 'dead', 'cancelled') THEN c.at + interval '2 seconds' END,
            CASE WHEN s.state = 'running' THEN 'host-' || mod(g, 5) END, 1,
            CASE WHEN s.state = 'running' THEN now() + interval '5 minutes' END,
            NULL, CASE WHEN s.state = 'done' THEN '{{"ok": true}}' END,
            CASE WHEN s.state IN ('failed', 'dead') THEN
                '[{{"type": "ValueError", "message": "bad input", "at": 1893456000000,
                   "attempt": 1}}]'
                ELSE '[]' END::jsonb
        FROM generate_series(1, %(rows)s) AS g,
            LATERAL (SELECT {states} AS state) AS s,
            LATERAL (SELECT now() - (%(rows)s - g) * %(spacing)s * interval '1 millisecond' AS at) AS c"""
    ).format(jobs=jobs, states=sql.SQL(_STATES))
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(query, {"rows": rows, "spacing": spacing_ms})
        inserted = time.perf_counter() - started
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
        print(f"inserted {rows:,} jobs in {inserted:.1f} s (then VACUUM ANALYZE)")


def timed(client: TestClient, path: str, requests: int) -> tuple[float, float]:
    for _ in range(2):  # warm: plans cached, pages in shared buffers
        assert client.get(path).status_code == 200, path
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, (path, answer.text[:300])
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.9))]


def explain(url: str, driver: PostgresDriver, client: TestClient) -> None:
    """The generic plan (the driver's mode) of each statement the jobs pages send, at this size."""
    from tests.postgres.plans import generic_plan  # noqa: PLC0415 - the plan tests' helper

    sent: list[tuple[bytes, Any]] = []
    fetch = driver._fetch

    def record(query: bytes, params: Any = None, **kw: Any) -> Any:
        sent.append((query, params))
        return fetch(query, params, **kw)

    driver._fetch = record  # type: ignore[method-assign]
    print("\n== plans of the jobs pages' statements (generic, as the driver runs them) ==")
    with psycopg.connect(url, autocommit=True) as conn:
        for path in ("/jobs", "/jobs?state=dead", "/jobs?state=suspended", "/"):
            del sent[:]
            client.get(path)
            for query, params in sent:
                plan = generic_plan(conn, query, params)
                top = " / ".join(line.strip() for line in plan.splitlines() if "Scan" in line or "Sort " in line)
                print(f"{path:<24} {top[:160]}")
    driver._fetch = fetch  # type: ignore[method-assign]


def stats_plan(url: str, driver: PostgresDriver) -> None:
    """The stats statement's plan and time as it is, then with a (queue, state) index (not in the schema)."""
    text = driver.q.STATS.decode().replace("%(now)s", "NULL")
    with psycopg.connect(url, autocommit=True) as conn:
        for label in ("as migrated", "with a (queue, state) index, vacuumed"):
            if label.startswith("with"):
                jobs = sql.Identifier(SCHEMA, "jobs")
                conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS jobs_queue_state ON {} (queue, state)").format(jobs))
                conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
            print(f"\n== EXPLAIN ANALYZE stats, {label} ==")
            for row in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + text):  # type: ignore[arg-type]
                print(row[0])
            conn.execute(text)  # type: ignore[arg-type]
            started = time.perf_counter()
            for _ in range(5):
                conn.execute(text).fetchall()  # type: ignore[arg-type]
            print(f"stats: {(time.perf_counter() - started) * 200:.0f} ms (mean of 5)")


@contextlib.contextmanager
def _server_url(given: str | None) -> Iterator[str]:
    """``given``, else the URL of a throwaway server started from the local binaries (stopped after)."""
    if given:
        yield given
        return
    bindir = find_binaries()
    if bindir is None:
        raise SystemExit("no --url and no PostgreSQL binaries (initdb/postgres) to start a server")
    local = LocalServer(bindir, extra=("-c", "max_wal_size=4GB", "-c", "shared_buffers=256MB")).start()
    try:
        yield local.url
    finally:
        local.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("JOBCORE_BENCH_POSTGRES_URL"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--stats-plan", action="store_true",
                        help="print EXPLAIN ANALYZE of the stats statement, and again with a (queue, state) index")
    args = parser.parse_args()
    with _server_url(args.url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        print(f"PostgreSQL {version[0] if version else '?'}; psycopg {psycopg.__version__}")
        pool = make_pool(url, min_size=1, max_size=4)
        driver = PostgresDriver(pool, schema=SCHEMA)
        driver.migrate()
        fill(url, args.rows)
        client = TestClient(create_app(driver, auth=lambda _request: True))
        some = driver.introspect.dead_letters(None, 1)[0].id
        first = client.get("/jobs").text
        older = first.split('rel="next" href="')[1].split('"')[0].replace("&amp;", "&")
        pages = {
            "overview /": "/",
            "jobs /jobs": "/jobs",
            "jobs, next page": older,
            "jobs ?queue=q1": "/jobs?queue=q1",
            "jobs ?state=dead": "/jobs?state=dead",
            "jobs ?state=suspended (rare)": "/jobs?state=suspended",
            "jobs ?name=task.3&queue=q2": "/jobs?name=task.3&queue=q2",
            "one job": f"/jobs/{some}",
            "dead letters": "/dead",
            "workers /slots": "/slots",
        }
        print(f"\n== page render times, {args.rows:,} jobs, {args.requests} requests each (TestClient, whole app) ==")
        print(f"{'page':<32} {'median ms':>10} {'p90 ms':>8}  goal")
        for label, path in pages.items():
            median, p90 = timed(client, path, args.requests)
            client.app.state.dashboard.snapshots.stop()  # type: ignore[attr-defined]  # pages alone, no count beside
            goal = "" if label.split()[0] not in ("overview", "jobs") else (
                "ok" if median < GOAL_MS else f"OVER {GOAL_MS:.0f}"
            )
            print(f"{label:<32} {median:>10.1f} {p90:>8.1f}  {goal}")
        for label, ttl in (("overview, charts read each time", {"chart_ttl": 0}),
                           ("overview, all read each time", {"chart_ttl": 0, "stats_ttl": 0})):
            cold = TestClient(create_app(driver, auth=lambda _request: True, **ttl))
            median, p90 = timed(cold, "/", args.requests)
            cold.app.state.dashboard.snapshots.stop()  # type: ignore[attr-defined]
            print(f"{label:<32} {median:>10.1f} {p90:>8.1f}  {'ok' if median < GOAL_MS else f'OVER {GOAL_MS:.0f}'}")
        # The default: counts and charts kept fresh by the app's background thread; the
        # renders below run while that thread counts (ttl 1 s: it is nearly always counting).
        live = TestClient(create_app(driver, auth=lambda _request: True, chart_ttl=1, stats_ttl=1))
        live.get("/")  # the app's first overview reads once; every later one serves a snapshot
        median, p90 = timed(live, "/", args.requests)
        print(f"{'overview, counts in background':<32} {median:>10.1f} {p90:>8.1f}  "
              f"{'ok' if median < GOAL_MS else f'OVER {GOAL_MS:.0f}'}")
        for app in (client.app, live.app):  # no background count during what follows
            app.state.dashboard.snapshots.stop()  # type: ignore[attr-defined]
        started = time.perf_counter()
        for _ in range(args.requests):
            driver.introspect.stats()
        print(f"{'  of which introspect.stats()':<32} {(time.perf_counter() - started) * 1000 / args.requests:>10.1f}"
              "  (mean; an exact count per queue and state over every row)")
        if args.stats_plan:
            stats_plan(url, driver)
        explain(url, driver, client)
        driver.close()
        pool.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))


if __name__ == "__main__":
    main()

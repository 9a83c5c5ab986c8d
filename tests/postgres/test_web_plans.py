"""The dashboard's pages on PostgreSQL read through the indexes that exist (issue 19, item 5).

Each page is rendered through Starlette's TestClient over a driver whose statements are
recorded as it sends them (its ``_fetch`` wrapped, nothing in the driver changed); every
recorded statement is then planned the way the driver runs it (a prepared statement
under generic planning, :func:`tests.postgres.plans.generic_plan`) against a table of
20,000 finished and 2,000 live rows, analysed. One job goes by primary key, the dead
letters through ``jobs_dead``, the oldest due job per queue through ``jobs_due``, the
charts' jobs finished per minute (O10) through a range of ``jobs_finished``; the
counts per (queue, state) read every row by definition (bench/web.py measures that).
The list statements (the jobs page, the workers page) walk ``jobs_pkey``
backwards. At this size the planner rightly prefers a scan for some of them, so the
second test plans with ``enable_seqscan = off``: a statement that still scans would
have no index to use; at 1,000,000 rows bench/web.py prints the plans as chosen.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobcore.parity.plugin import START
from psycopg import sql
from starlette.testclient import TestClient

from jobcore.web import create_app
from tests.postgres.plans import generic_plan

LONG_AGO = START - timedelta(days=2)


def _fill(pool: Any, driver: Any) -> None:
    jobs = sql.Identifier(driver.schema, "jobs")
    with pool.connection() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, queue, payload, state, priority, attempt, max_attempts, run_at, created_at,"
                " finished_at, claim_no, errors) SELECT 'old', 'q' || (g %% 4), '{{\"n\": 1}}',"
                " (ARRAY['done','done','done','failed','dead'])[1 + g %% 5], 0, 1, 20, %(t)s, %(t)s,"
                " %(t)s + g * interval '1 millisecond', 1, '[]' FROM generate_series(1, 20000) AS g"
            ).format(jobs),
            {"t": LONG_AGO},
        )
    driver.enqueue_many([{"name": "live", "queue": f"q{i % 4}"} for i in range(2000)])
    with pool.connection() as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(jobs))


def _recording(driver: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, dict[str, Any]]]:
    sent: list[tuple[bytes, dict[str, Any]]] = []
    fetch: Callable[..., Any] = driver._fetch

    def record(query: bytes, params: Any = None, **kw: Any) -> Any:
        sent.append((query, dict(params or {})))
        return fetch(query, params, **kw)

    monkeypatch.setattr(driver, "_fetch", record)
    return sent


def _name(driver: Any, query: bytes) -> str:
    for cls in type(driver.q).__mro__:
        for attr in vars(cls):
            if not attr.startswith("_") and getattr(driver.q, attr, None) == query:
                return attr
    return query.decode()[:60]


def _plans(
    driver: Any, pool: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch, *, seqscan: bool
) -> dict[str, str]:
    """``"PATH STATEMENT" -> generic plan`` of every statement each dashboard page sends.

    ``seqscan=False`` plans with ``enable_seqscan = off``: a plan that still scans the
    table then has no index it could use (on a small table a scan is the planner's right
    choice, so that is the question that does not depend on the table's size).
    """
    _fill(pool, driver)
    client = TestClient(create_app(driver, auth=lambda _r: True, chart_ttl=0, stats_ttl=0))
    first = client.get("/jobs", params={"state": "dead"})
    assert first.status_code == 200
    older = first.text.split('rel="next" href="')[1].split('"')[0].replace("&amp;", "&")
    one = driver.introspect.list(None, 1).jobs[0].id
    sent = _recording(driver, monkeypatch)
    paths = ("/", "/jobs", "/jobs?state=dead", "/jobs?queue=q1", "/jobs?queue=q1&state=ready", older,
             f"/jobs/{one}", "/dead", "/dead?queue=q2", "/slots")
    plans: dict[str, str] = {}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if not seqscan:
            conn.execute("SET enable_seqscan = off")
        for path in paths:
            del sent[:]
            assert client.get(path).status_code == 200, path
            assert sent, path
            for query, params in sent:
                label = f"{'/jobs?after' if path == older else path} {_name(driver, query)}"
                plans[label] = generic_plan(conn, query, params)
    assert all(plans.values()), plans
    return plans


def test_one_job_and_dead_letters_use_their_indexes(
    driver: Any, pool: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = _plans(driver, pool, pg_url, monkeypatch, seqscan=True)
    one = driver.introspect.list(None, 1).jobs[0].id
    assert "Index Scan using jobs_pkey" in plans[f"/jobs/{one} GET"]
    for path in ("/dead", "/dead?queue=q2"):
        assert "Index Scan using jobs_dead" in plans[f"{path} DEAD_LETTERS"], plans[f"{path} DEAD_LETTERS"]
    # The counts per (queue, state) read every row by definition; the oldest due job per
    # queue is found through jobs_due.
    assert "jobs_due" in plans["/ STATS"], plans["/ STATS"]
    # The charts: per finished state a range of jobs_finished (state, finished_at) from the
    # window's start, in the generic plan the driver runs (the finished rows are two days old):
    # both columns are index conditions, so only the window's rows are read.
    chart = plans["/ FINISHED_COUNTS"]
    assert re.search(r"(Index|Index Only|Bitmap Index) Scan (using|on) jobs_finished", chart), chart
    assert re.search(r"Index Cond: \(\(state = s\.state\) AND \(finished_at >=", chart), chart
    assert "Seq Scan" not in chart, chart


def test_every_page_statement_has_an_index_to_read(
    driver: Any, pool: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = _plans(driver, pool, pg_url, monkeypatch, seqscan=False)
    listing = {label for label in plans if "LIST_" in label}
    assert "/ LIST_OLDER" not in plans  # the charts count in the store, they list no jobs
    assert {"/jobs LIST_OLDER", "/jobs?state=dead LIST_OLDER", "/jobs?after LIST_OLDER",
            "/slots LIST_OLDER"} <= listing
    for label, plan in plans.items():
        if label == "/ STATS":
            continue  # a count over every row
        assert "Seq Scan on jobs" not in plan, (label, plan)
    for label in listing:
        assert "Index Scan Backward using jobs_pkey" in plans[label], (label, plans[label])  # newest first

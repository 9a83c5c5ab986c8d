"""Retention on PostgreSQL: the prune's index and plans, bounded batches, locks, and the migration's settings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _prune, make_pool
from jobcore.parity.plugin import START
from psycopg import sql

from fixtures import postgres as fx
from jobcore.clock import ManualClock
from jobcore.records import JobState, RetentionPolicy
from jobcore.vocabulary import GUARDS
from tests.postgres.plans import generic_plan

ZERO = RetentionPolicy(done=0, failed=0, cancelled=0, dead=0)
FINISHED_VALUES = sorted(s.value for s in GUARDS["requeue"].states)
LONG_AGO = START - timedelta(days=60)


def _jobs(driver: Any) -> sql.Composable:
    return sql.Identifier(driver.schema, "jobs")


def _finished(pool: Any, driver: Any, count: int, state: str = "done", *, at: Any = LONG_AGO) -> None:
    """``count`` finished rows written directly (fast), all finished at ``at``."""
    with pool.connection() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, queue, payload, state, priority, attempt, max_attempts, run_at, created_at,"
                " finished_at, claim_no, errors) SELECT 'old', 'default', 'null', %(state)s, 0, 1, 20, %(t)s, %(t)s,"
                " %(t)s + g * interval '1 millisecond', 1, '[]' FROM generate_series(1, %(n)s) AS g"
            ).format(_jobs(driver)),
            {"t": at, "n": count, "state": state},
        )


def _analyze(pool: Any, driver: Any) -> None:
    with pool.connection() as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(_jobs(driver)))


def _count(pool: Any, driver: Any) -> int:
    with pool.connection() as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(_jobs(driver))).fetchone()
    return int(row[0]) if row else 0


def _params(now: Any, limit: int) -> dict[str, Any]:
    """Every finished state eligible as soon as it finished (age 0), on ``now`` (None: the store's clock)."""
    states = ["cancelled", "dead", "done", "failed"]
    return {"states": states, "ages_us": [0] * len(states), "now": now, "limit": limit, "cap": limit}


# --- the migration ------------------------------------------------------------------------


def test_migration_sets_the_prune_index_and_the_storage_settings(driver: Any, pool: Any) -> None:
    """jobs_finished is a partial index on finished rows; the jobs table carries its churn settings."""
    with pool.connection() as conn:
        index = conn.execute(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index AS i"
            " WHERE i.indexrelid = to_regclass(%s)",
            (sql.Identifier(driver.schema, "jobs_finished").as_string(),),
        ).fetchone()
        options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
                               (_jobs(driver).as_string(),)).fetchone()
    assert index is not None
    assert "(state, finished_at, id)" in index[0]
    assert "WHERE (state = ANY (ARRAY['done'::text, 'failed'::text, 'dead'::text, 'cancelled'::text]))" in index[0]
    assert options is not None
    assert set(options[0]) >= {
        "fillfactor=90", "autovacuum_vacuum_cost_limit=2000", "vacuum_truncate=false",
        "autovacuum_vacuum_scale_factor=0.02", "autovacuum_analyze_scale_factor=0.02",
    }


# --- plans ----------------------------------------------------------------------------------


def test_prune_reads_the_partial_index_in_generic_and_custom_plans(driver: Any, pool: Any, pg_url: str) -> None:
    """Both prune statements find eligible rows through jobs_finished, never a scan of the jobs table."""
    _finished(pool, driver, 20_000)
    driver.enqueue_many([{"name": "live"} for _ in range(200)])
    _analyze(pool, driver)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        plans = {f"{name} now={now}": generic_plan(conn, getattr(driver.q, name), _params(now, 500))
                 for name in ("PRUNE_BATCH", "PRUNE_COUNT") for now in (START, None)}
    with pool.connection() as conn, conn.transaction(force_rollback=True):
        plans["custom"] = "\n".join(
            r[0] for r in conn.execute(b"EXPLAIN " + driver.q.PRUNE_BATCH, _params(START, 500)).fetchall()
        )
    for name, plan in plans.items():
        assert "jobs_finished" in plan, (name, plan)
        assert "Seq Scan on jobs" not in plan, (name, plan)
    for now in (START, None):  # the delete goes by primary key
        assert "jobs_pkey" in plans[f"PRUNE_BATCH now={now}"], plans[f"PRUNE_BATCH now={now}"]


# --- bounded batches and locks ---------------------------------------------------------------


class CountingCursor(psycopg.Cursor[Any]):
    """Records every statement sent, and how many rows each returned."""

    sent: list[tuple[bytes, int]] = []

    def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        result = super().execute(query, params, **kw)
        CountingCursor.sent.append((query if isinstance(query, bytes) else str(query).encode(), self.rowcount))
        return result


def test_prune_deletes_in_batches_of_at_most_batch_rows(pg_url: str, pool: Any) -> None:
    """limit=1200, batch=500: three DELETE statements (500, 500, 200), then one count; each its own transaction."""
    schema = fx.schema_name()
    counted = make_pool(pg_url, min_size=1, max_size=2, cursor_factory=CountingCursor)
    driver = PostgresDriver(counted, schema=schema, clock=ManualClock(START))
    try:
        driver.migrate()
        _finished(pool, driver, 1500)
        driver.introspect.get("1")  # the first call checks the schema version
        CountingCursor.sent.clear()
        result = driver.introspect.prune(ZERO, limit=1200, batch=500)
        assert result.removed[JobState.DONE] == 1200
        assert result.remaining[JobState.DONE] == 300
        batches = [n for q, n in CountingCursor.sent if q == driver.q.PRUNE_BATCH]
        assert batches == [500, 500, 200]
        assert [q for q, _ in CountingCursor.sent] == [driver.q.PRUNE_BATCH] * 3 + [driver.q.PRUNE_COUNT]
        CountingCursor.sent.clear()
        assert driver.introspect.prune(ZERO, limit=5000, batch=1000).total_removed == 300  # short batch: stop
        assert [n for q, n in CountingCursor.sent if q == driver.q.PRUNE_BATCH] == [300]
    finally:
        driver.close()
        counted.close()
        fx.drop_schema(pool, schema)


def _timid(pg_url: str, schema: str) -> tuple[Any, PostgresDriver]:
    """A driver on the same store whose sessions give up on any lock wait after 200 ms."""
    sep = "&" if "?" in pg_url else "?"
    timid_pool = make_pool(f"{pg_url}{sep}options=-c%20lock_timeout%3D200", min_size=1, max_size=2)
    return timid_pool, PostgresDriver(timid_pool, schema=schema, clock=ManualClock(START))


def test_hot_path_never_waits_on_an_open_prune_batch(driver: Any, pool: Any, pg_url: str) -> None:
    """While a prune batch's transaction is open, claims, acks, enqueues and a second prune go on without waiting."""
    _finished(pool, driver, 300)
    driver.enqueue_many([{"name": "live"} for _ in range(20)])
    timid_pool, timid = _timid(pg_url, driver.schema)
    try:
        with psycopg.connect(pg_url) as holder:  # a prune batch, held open as if the server were slow
            deleted = holder.execute(driver.q.PRUNE_BATCH, _params(START, 100)).fetchall()
            assert len(deleted) == 100
            claimed = timid.claim(["default"], worker_id="w", limit=10, lease=30).claimed
            assert len(claimed) == 10
            assert all(a is not None for a in timid.ack_many([(c.token, None) for c in claimed]))
            timid.enqueue("more")
            second = timid.introspect.prune(ZERO, limit=100, batch=100)  # skips the held rows, takes others
            assert second.total_removed == 100
            holder.rollback()
        assert _count(pool, driver) == 300 + 21 - 100
    finally:
        timid.close()
        timid_pool.close()


def test_prune_never_waits_on_a_row_someone_holds(driver: Any, pool: Any, pg_url: str) -> None:
    """A finished row locked by another session (a requeue in progress) is skipped, not waited for."""
    job = driver.enqueue("x")
    token = driver.claim(["default"], worker_id="w", lease=30).claimed[0].token
    driver.ack(token)
    _finished(pool, driver, 10)
    timid_pool, timid = _timid(pg_url, driver.schema)
    try:
        with psycopg.connect(pg_url) as holder:
            holder.execute(
                sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(_jobs(driver)), (int(job.id),)
            )
            result = timid.introspect.prune(ZERO)
            assert result.removed[JobState.DONE] == 10
            assert result.remaining[JobState.DONE] == 1  # still eligible: the next call takes it
            holder.rollback()
        assert timid.introspect.prune(ZERO).removed[JobState.DONE] == 1
    finally:
        timid.close()
        timid_pool.close()


# --- never a live row -------------------------------------------------------------------------


def test_a_job_being_requeued_during_a_prune_is_not_deleted(driver: Any, pool: Any, pg_url: str) -> None:
    """A requeue in an open transaction: the prune skips the row; once committed the job is live and stays."""
    job = driver.enqueue("x")
    driver.ack(driver.claim(["default"], worker_id="w", lease=30).claimed[0].token)
    _finished(pool, driver, 5)
    with psycopg.connect(pg_url) as requeuer:
        requeuer.execute("SET TimeZone = 'UTC'")
        params = {"id": int(job.id), "states": FINISHED_VALUES, "now": START, "channel": "c"}
        moved = requeuer.execute(driver.q.REQUEUE, params).fetchall()
        assert len(moved) == 1
        assert driver.introspect.prune(ZERO).removed[JobState.DONE] == 5
        requeuer.commit()
    after = driver.introspect.get(job.id)
    assert after is not None
    assert after.state == JobState.READY
    assert driver.introspect.prune(ZERO).total_removed == 0
    assert driver.introspect.get(job.id) is not None


def test_requeues_racing_prunes_never_lose_a_requeued_job(driver: Any, pool: Any) -> None:
    """Requeues and one-row prune batches race over the same finished rows: every requeue that answered survives."""
    _finished(pool, driver, 100)
    ids = [str(i) for i in range(1, 101)]
    requeued: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def requeue_all() -> None:
        start.wait()
        for job_id in reversed(ids):  # meet the prune, which goes oldest (lowest id) first, midway
            try:
                requeued.append(driver.introspect.requeue(job_id).id)
            except Exception as exc:
                if getattr(exc, "code", None) != "JC_JOB_NOT_FOUND":  # pruned first: fine
                    errors.append(exc)

    def prune_all() -> None:
        start.wait()
        try:
            while driver.introspect.prune(ZERO, limit=1, batch=1).total_removed:
                pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=requeue_all), threading.Thread(target=prune_all)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert requeued, "the requeues never ran"
    assert len(requeued) < len(ids), "the prune never ran before the requeues ended"
    for job_id in requeued:
        job = driver.introspect.get(job_id)
        assert job is not None, job_id
        assert job.state == JobState.READY
    assert _count(pool, driver) == len(requeued)


# --- remaining ----------------------------------------------------------------------------------


def test_remaining_is_counted_per_state_up_to_the_cap(
    driver: Any, pool: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """remaining stops counting at COUNT_CAP per state: a larger backlog reads as the cap."""
    _finished(pool, driver, 30, "done")
    _finished(pool, driver, 4, "dead")
    monkeypatch.setattr(_prune, "COUNT_CAP", 10)
    dry = driver.introspect.prune(ZERO, dry_run=True)
    assert dry.remaining[JobState.DONE] == 10
    assert dry.remaining[JobState.DEAD] == 4
    assert dry.total_removed == 0
    assert _count(pool, driver) == 34


def test_only_eligible_rows_are_read_by_the_batches(make: Callable[..., Any], pool: Any) -> None:
    """Rows younger than their state's cutoff are left, whatever their number (the scan stops at the cutoff)."""
    driver = make()
    _finished(pool, driver, 50, "done", at=START - timedelta(days=3))
    _finished(pool, driver, 50, "dead", at=START - timedelta(days=3))  # dead: kept 30 days by default
    result = driver.introspect.prune()
    assert result.removed[JobState.DONE] == 50
    assert result.total_removed == 50
    assert result.total_remaining == 0
    assert _count(pool, driver) == 50

"""Rows locked by another session (F05): one locked job holds back no other job of its worker.

An open transaction holding a job's row (an operator's ``SELECT ... FOR UPDATE`` left open
in psql, a bulk ``UPDATE`` of the jobs table, an application's transaction) is PostgreSQL's
alone: the claim passes such rows by (``SKIP LOCKED``), but a worker's heartbeat and acks
waited for them. Before, a worker's whole ack batch waited up to the statement timeout on
one locked row, failed, waited again and was given up, so every other job of the batch
lapsed and ran again: 510 completed jobs ran twice for one row locked 20 s (lease 6 s),
and 12 while two rows were locked here. A locked heartbeat held back the worker's other
renewals the same way, and their handlers were called off (7 of them for one row).

Now those calls wait at most ``SETTLE_LOCK_WAIT`` (0.1 s) for such a row: the batch's other
items land at once, and the locked ones are tried again until the lock goes. A job whose row
is held past its lease may run again (as in an outage past the lease, F05); no other may.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import harness as h
from tests.faults.scenarios import RowLockPlan, run_row_locked

pytestmark = pytest.mark.requires("shared_store")


def _store(store: h.Store) -> h.Store:
    if store.kind != "postgres":
        pytest.skip(
            "a row held by another session's open transaction is PostgreSQL's fault here: a MongoDB "
            "transaction can hold a job's document too (up to its 60 s lifetime), but the MongoDB-wire test "
            "server cannot stand in for it (see docs/reliability.md, 'A row held past the lease')"
        )
    return store


def _logs(workdir: Path) -> str:
    return "\n".join(path.read_text(errors="replace") for path in sorted((workdir / "logs").glob("*.log")))


def test_rows_locked_past_the_lease_run_no_other_job_twice(store: h.Store, tmp_path: Path) -> None:
    """Two running rows locked 12 s (lease 6 s) mid-drain of 2,000 quick jobs by 3 workers."""
    plan = RowLockPlan(jobs=2000, outage=12.0, rows=2)
    report = run_row_locked(_store(store), plan, tmp_path)
    figures, measures = report.figures, report.measures
    locked = measures["jobs whose rows were locked"]
    assert len(locked) == plan.rows, report.explain()
    assert measures["completed jobs run again, locked jobs aside"] == 0, report.explain()
    # A locked job's ack may lose the race with a claim once its lease has lapsed: each such job at most once.
    assert figures.completed_run_again <= plan.rows, report.explain()
    assert (figures.overlapping, figures.lost, figures.dead_never_ran) == (0, 0, 0), report.explain()
    logs = _logs(tmp_path)
    assert "another session holds its row locked" in logs, report.explain()
    assert "gave up settling" not in logs, report.explain()


def test_a_locked_row_calls_off_no_other_running_job(store: h.Store, driver_name: str, tmp_path: Path) -> None:
    """One running row locked 8 s (lease 3 s, renewed every 1 s) while 24 jobs of 2.5 s run."""
    if driver_name != "postgres":  # the worker's renewals are the same; the bound through PgBouncer is checked above
        pytest.skip("the renewals' scenario runs on PostgreSQL direct (13 s of CI); PgBouncer runs the one above")
    plan = RowLockPlan(jobs=24, job_ms=2500, step_ms=100, outage=8.0, rows=1, lease=3.0, margin=1.0, down_after=0.0)
    report = run_row_locked(_store(store), plan, tmp_path)
    figures, measures = report.figures, report.measures
    assert len(measures["jobs whose rows were locked"]) == 1, report.explain()
    assert measures["executions called off, locked jobs aside"] == 0, report.explain()
    assert figures.violations() == {}, report.explain()
    assert "could not renew the lease of job" in _logs(tmp_path), report.explain()

"""A full disk (F05, F06): the disk holding the jobs' tables fills up mid-drain, then has room again.

PostgreSQL then refuses every write that needs a new page (``could not extend file ...: No
space left on device``, SQLSTATE 53100) and takes the rest: claims, heartbeats, acks and
enqueues fail or land one by one. Nothing may run twice or be lost, a producer's enqueue is
refused and stores nothing, and every worker claims again within 2 s of the room coming
back. Before, each refusal read "the database connection failed ... check that the
database is up" (the counts were already clean); now it names the full disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import harness as h
from tests.faults.judge import recovered
from tests.faults.scenarios import DiskPlan, run_disk_full

pytestmark = pytest.mark.requires("shared_store")


def test_a_full_disk_runs_no_job_twice_loses_none_and_every_worker_claims_again_within_2s(
    own_postgres_on_small_disk: h.Store, tmp_path: Path
) -> None:
    store = own_postgres_on_small_disk
    plan = DiskPlan(jobs=2000)
    measures = recovered(run_disk_full(store, plan, tmp_path), "full disk")
    refused = measures["enqueue while the disk was full"]
    assert refused.startswith("JC_DB_UNAVAILABLE: the database server is out of disk space: "), refused
    assert "No space left on device" in refused
    assert len(h.all_jobs(store)) == plan.jobs, "the refused enqueue stored jobs"
    logs = "\n".join(path.read_text(errors="replace") for path in sorted((tmp_path / "logs").glob("*.log")))
    assert "the database server is out of disk space" in logs
    assert "the database connection failed" not in logs

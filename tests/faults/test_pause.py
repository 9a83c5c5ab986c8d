"""c. Paused worker (F02, F03, fencing): a worker paused past its lease starts nothing stale, writes nothing twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import Store
from tests.faults.scenarios import PausePlan, run_pause

pytestmark = pytest.mark.requires("shared_store")

PLANS = {"postgres": PausePlan(), "mongo": PausePlan(warm=30, quick=40, lease=4.0, margin=1.0, latency=0.0)}


def test_worker_paused_for_three_leases_starts_no_job_it_lost_and_its_fenced_writes_are_refused(
    store: Store, tmp_path: Path
) -> None:
    """SIGSTOP for 3 leases, then SIGCONT: no stale start, no effect twice, none lost; overlaps only in flight."""
    plan = PLANS[store.kind]
    report = run_pause(store, plan, tmp_path)
    print(f"\n{report.text()}")
    figures, measures = report.figures, report.measures
    assert "W1 executions in flight at the pause" in measures, f"no pause injected\n{report.explain()}"
    assert figures.completed_run_again == 0, report.explain()
    assert figures.effects_twice == 0, report.explain()
    assert figures.lost == 0, report.explain()
    assert figures.dead_never_ran == 0, report.explain()
    assert measures["W1 started after resuming under a lost lease"] == 0, report.explain()
    # A lease cannot stop a paused process: a handler frozen mid-run overlaps the next
    # holder in time, but only those in flight at the pause, and the fence stops their writes.
    assert figures.overlapping <= measures["W1 executions in flight at the pause"] <= plan.concurrency, report.explain()

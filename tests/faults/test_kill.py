"""e. Killed worker (F04, C08): jobs a SIGKILLed worker never started cost no attempt; a poison job is still buried."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import Store
from tests.faults.scenarios import KillPlan, run_kill

pytestmark = pytest.mark.requires("shared_store")

PLANS = {"postgres": KillPlan(), "mongo": KillPlan(warm=30, quick=40, lease=4.0, margin=1.0, latency=0.0)}


def test_sigkilled_worker_leaves_no_job_dead_that_never_ran_and_a_poison_job_is_buried(
    store: Store, tmp_path: Path
) -> None:
    """SIGKILL while holding prefetched max_attempts=1 jobs: none dead unrun; the poison job dies after its attempts."""
    plan = PLANS[store.kind]
    report = run_kill(store, plan, tmp_path)
    print(f"\n{report.text()}")
    measures = report.measures
    assert "poison job state" in measures, f"no kill injected\n{report.explain()}"
    assert not report.figures.violations(), report.explain()
    assert measures["poison job state"] == "dead", report.explain()
    # Starts are recorded right after the handler began (F04): a handler that kills its worker
    # at once leaves no start recorded the first time, and is started first on every later
    # claim, so it runs at most once more than its attempts (exactly as often with --strict-starts).
    assert plan.poison_attempts <= measures["poison job runs"] <= plan.poison_attempts + 1, report.explain()
    assert measures["poison job attempts (of max)"] == f"{plan.poison_attempts} of {plan.poison_attempts}"

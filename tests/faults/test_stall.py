"""a. Network stall (F02, F07): a worker whose link to the store freezes stops its handler in time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import Store
from tests.faults.scenarios import StallPlan, run_stall

pytestmark = pytest.mark.requires("shared_store")

PLANS = {"postgres": StallPlan(), "mongo": StallPlan()}


def test_stalled_worker_is_called_off_before_the_job_is_reclaimed_and_claims_again_after_thaw(
    store: Store, tmp_path: Path
) -> None:
    """A's link freezes mid-job: its handler is called off before B reclaims; A claims again after thaw."""
    report = run_stall(store, PLANS[store.kind], tmp_path)
    print(f"\n{report.text()}")
    measures = report.measures
    assert measures.get("B ran the job"), f"the fault did not play out as planned\n{report.explain()}"
    assert not report.figures.violations(), report.explain()
    assert measures["A's handler outcome"] == "called_off", report.explain()
    assert measures["A claims again, s after the thaw"] <= 5.0, report.explain()

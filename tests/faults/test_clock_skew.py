"""b. Clock skew (F01): clients whose clocks are an hour off take no live lease and run nothing early."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import Store
from tests.faults.scenarios import SkewPlan, run_skew

pytestmark = pytest.mark.requires("shared_store")

PLANS = {"postgres": SkewPlan(), "mongo": SkewPlan(ready=12, skewed_ready=3)}


@pytest.mark.usefixtures("faketime")
def test_workers_an_hour_off_take_no_live_lease_and_run_nothing_before_it_is_due(store: Store, tmp_path: Path) -> None:
    """+1 h and -1 h workers and clients beside a correct one: no live lease taken, nothing early, none lost."""
    report = run_skew(store, PLANS[store.kind], tmp_path)
    print(f"\n{report.text()}")
    measures = report.measures
    assert not report.figures.violations(), report.explain()
    assert report.figures.early_runs == 0, report.explain()
    assert measures["rescue under +1h: live jobs requeued"] == 0, report.explain()
    assert measures["rescue under -1h: live jobs requeued"] == 0, report.explain()
    assert measures["held jobs claimed again (live lease taken)"] == 0, report.explain()

"""The verdict the outage scenarios share (restart, failover, connection slots): asserted here,
since scenarios measure and assert nothing."""

from __future__ import annotations

from typing import Any

from tests.faults.scenarios import Report

RECOVERY_BOUND = 2.0
"""F06: every worker claims again within this many seconds of the store taking them back."""


def recovered(report: Report, fault: str) -> dict[str, Any]:
    """Print the report; assert ``fault`` was injected, nothing ran twice or was lost, and
    every worker claimed again within :data:`RECOVERY_BOUND`. Answers the report's measures."""
    print(f"\n{report.text()}")
    measures = report.measures
    assert "slowest worker to claim again s" in measures, f"no {fault} injected\n{report.explain()}"
    assert not report.figures.violations(), report.explain()
    assert measures["slowest worker to claim again s"] <= RECOVERY_BOUND, report.explain()
    return measures

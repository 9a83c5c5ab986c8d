"""docs/howto/dependencies.md's worked example (docs/examples/fan_in_report.py) does what the page says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from jobcore.records import JobState
from jobcore.testing import job_tester

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "fan_in_report.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fan_in_report", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fan_in_report"] = module
    spec.loader.exec_module(module)
    return module


def test_the_report_waits_for_every_part_and_sums_their_results(example: ModuleType) -> None:
    docs = {"a.txt": "one two three", "b.txt": "four five", "c.txt": "six"}
    with job_tester(registry=example.jobs) as tester:
        report = example.enqueue_report("weekly", docs)
        assert report.state is JobState.SUSPENDED
        parts = tester.driver.introspect.parents(report.id)
        assert [p.payload["doc"] for p in parts] == list(docs)
        tester.run_due()
        done = tester.driver.introspect.get(report.id)
        assert done is not None
        assert done.state is JobState.DONE
        assert done.result == {"title": "weekly", "total": 6, "per_doc": {"a.txt": 3, "b.txt": 2, "c.txt": 1}}


def test_a_failing_part_cancels_the_report(example: ModuleType) -> None:
    with job_tester(registry=example.jobs) as tester:
        report = example.enqueue_report("weekly", {"a.txt": "fine", "b.txt": None})  # b: no text, the part fails
        for _ in range(5):  # each of its 5 attempts, the retries due after their backoff
            tester.run_due(raise_errors=False)
            tester.advance(hours=1)
        bad = next(p for p in tester.driver.introspect.parents(report.id) if p.payload["doc"] == "b.txt")
        assert bad.state is JobState.DEAD
        got = tester.driver.introspect.get(report.id)
        assert got is not None
        assert got.state is JobState.CANCELLED
        assert got.last_error is not None
        assert got.last_error.message == f"parent job {bad.id} ended dead"

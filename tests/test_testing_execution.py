"""jobcore.testing runs an attempt as a worker does: the same handler call and the same settle."""

from __future__ import annotations

from typing import Any

import pytest

from jobcore import Registry
from jobcore.errors import JobNotRegistered, PayloadInvalid
from jobcore.records import JobState
from jobcore.testing import job_tester


def test_a_result_that_cannot_be_stored_fails_the_attempt_readably() -> None:
    """W07 as in a worker: the attempt fails with PayloadInvalid and retries; the job is not left running."""
    registry = Registry()

    @registry.job(name="returns_a_set", max_attempts=2)
    def returns_a_set(payload: int) -> set[int]:
        return {payload}

    with job_tester(registry=registry) as jobs:
        returns_a_set.enqueue(1)
        with pytest.raises(PayloadInvalid):
            jobs.run_due()
        job = jobs.assert_enqueued("returns_a_set")
        assert job.state is JobState.SCHEDULED
        assert job.attempt == 1
        assert job.last_error is not None
        assert job.last_error.type == "PayloadInvalid"
        assert [type(raised) for _, raised in jobs.errors] == [PayloadInvalid]


def test_a_job_without_a_handler_is_retried_with_its_reason() -> None:
    with job_tester(registry=Registry()) as jobs:
        jobs.driver.enqueue("nobody_handles_this", {})
        with pytest.raises(JobNotRegistered):
            jobs.run_due()
        job = jobs.assert_enqueued("nobody_handles_this")
        assert job.state is JobState.SCHEDULED
        assert job.last_error is not None
        assert job.last_error.type == "JobNotRegistered"


def test_a_terminal_exception_fails_the_job_at_once() -> None:
    registry = Registry()

    @registry.job(name="refuses", max_attempts=5, terminal=(ValueError,))
    def refuses(payload: int) -> None:
        raise ValueError(f"no {payload}")

    with job_tester(registry=registry) as jobs:
        refuses.enqueue(7)
        assert [job.state for job in jobs.run_due(raise_errors=False)] == [JobState.FAILED]
        last_error = jobs.assert_enqueued("refuses").last_error
        assert last_error is not None
        assert (last_error.type, last_error.message) == ("ValueError", "no 7")


def test_run_due_stores_the_handlers_last_progress_report_with_the_settle() -> None:
    """ctx.progress in a test: the settled job carries the last report, as a worker stores it (rules G)."""
    registry = Registry()

    @registry.job(name="import_rows")
    def import_rows(payload: int, ctx: Any) -> None:
        for n in range(1, payload + 1):
            ctx.progress(n / payload, f"row {n} of {payload}")

    @registry.job(name="quiet")
    def quiet(payload: int) -> None:
        return None

    with job_tester(registry=registry) as jobs:
        import_rows.enqueue(40)
        quiet.enqueue(1)
        settled = {j.name: j for j in jobs.run_due()}
    progress = settled["import_rows"].progress
    assert progress is not None
    assert (progress.value, progress.message) == (1.0, "row 40 of 40")
    assert settled["quiet"].progress is None

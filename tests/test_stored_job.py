"""``records.stored_job``, the drivers' validator-free ``Job`` builder, keeps up with ``Job``."""

from __future__ import annotations

import inspect
from datetime import datetime, timezone

import attrs
import pytest

from jobcore.records import Claimed, ClaimToken, Job, JobError, JobState, claimed_job, stored_job

NOW = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)


def test_stored_job_takes_every_field_of_job_in_declaration_order() -> None:
    """A field added to Job must be added to stored_job too, or drivers would leave it unset."""
    assert list(inspect.signature(stored_job).parameters) == [f.name for f in attrs.fields(Job)]


def test_stored_job_builds_the_same_job_as_the_checked_constructor() -> None:
    error = JobError(type="ValueError", message="boom", at=NOW, attempt=1)
    fields = {
        "id": "7",
        "name": "send",
        "queue": "default",
        "payload": {"n": 1},
        "state": JobState.RUNNING,
        "priority": 3,
        "attempt": 2,
        "max_attempts": 5,
        "run_at": NOW,
        "created_at": NOW,
        "attempted_at": NOW,
        "finished_at": None,
        "worker_id": "w",
        "claim_no": 2,
        "lease_expires_at": NOW,
        "key": "k",
        "result": None,
        "last_error": error,
        "errors": (error,),
        "duplicate": True,
    }
    fast = stored_job(*fields.values())
    checked = Job(**fields)
    assert fast == checked
    assert attrs.asdict(fast, recurse=False) == attrs.asdict(checked, recurse=False)
    assert fast.duplicate is True
    assert hash(fast.token) == hash(checked.token)


def test_claimed_job_builds_the_same_claim_as_the_checked_constructors() -> None:
    """claimed_job(job) is Claimed(job, its token), frozen and hashable like the real thing."""
    job = stored_job(
        "9", "send", "default", {"n": 1}, JobState.RUNNING, 0, 1, 5, NOW, NOW, NOW, None, "w-1", 3, NOW, None, None,
        None, (), False,
    )
    fast = claimed_job(job)
    checked = Claimed(job=job, token=ClaimToken(job_id="9", worker_id="w-1", claim_no=3))
    assert fast == checked
    assert hash(fast.token) == hash(checked.token)
    assert fast.token == job.token
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.token.claim_no = 4  # type: ignore[misc]

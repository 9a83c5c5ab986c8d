"""Records are built one way, by their constructor: fields round-trip, the checks hold, they stay frozen."""

from __future__ import annotations

import inspect
from datetime import datetime, timedelta, timezone

import attrs
import pytest

from jobcore import records
from jobcore.errors import OptionInvalid
from jobcore.records import (
    Claimed,
    ClaimToken,
    Job,
    JobError,
    JobFilter,
    JobState,
    Progress,
    RetentionPolicy,
    Schedule,
    ScheduleOutcome,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)
NAIVE = datetime(2030, 1, 1, 12)  # noqa: DTZ001 - the point: a naive datetime
WARSAW = timezone(timedelta(hours=1))
RECORDS = [getattr(records, name) for name in records.__all__ if attrs.has(getattr(records, name))]


def _job_fields(**changes: object) -> dict[str, object]:
    error = JobError(type="ValueError", message="boom", at=NOW, attempt=1)
    fields: dict[str, object] = {
        "id": "7", "name": "send", "queue": "default", "payload": {"n": 1}, "state": JobState.RUNNING,
        "priority": 3, "attempt": 2, "max_attempts": 5, "run_at": NOW, "created_at": NOW, "attempted_at": NOW,
        "finished_at": None, "worker_id": "w", "claim_no": 2, "lease_expires_at": NOW, "key": "k", "result": [1],
        "last_error": error, "errors": (error,), "progress": Progress(value=0.5, message="half", updated_at=NOW),
        "trace_context": {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
        "duplicate": True,
    }
    return fields | changes


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_record_takes_its_fields_as_keywords_with_their_defaults(record: type) -> None:
    """A record's constructor takes each field, keyword-only, in declaration order, with attrs' default."""
    params = inspect.signature(record).parameters
    assert list(params) == [f.name for f in attrs.fields(record)]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    for f in attrs.fields(record):
        expected = inspect.Parameter.empty if f.default is attrs.NOTHING else f.default
        assert params[f.name].default == expected, f.name


def test_a_job_gives_back_every_field_it_was_built_with() -> None:
    """Each field passed to Job(...) comes back unchanged, as its attribute and in attrs.asdict."""
    fields = _job_fields()
    job = Job(**fields)  # type: ignore[arg-type]
    assert attrs.asdict(job, recurse=False) == fields
    assert job.token == ClaimToken(job_id="7", worker_id="w", claim_no=2)


def test_a_job_is_frozen_and_evolve_makes_a_changed_copy() -> None:
    """Setting an attribute is refused; attrs.evolve answers a copy and leaves the original alone."""
    job = Job(**_job_fields())  # type: ignore[arg-type]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        job.attempt = 3  # type: ignore[misc]
    later = attrs.evolve(job, attempt=3, state="done")
    assert (job.attempt, job.state, later.attempt, later.state) == (2, JobState.RUNNING, 3, JobState.DONE)
    claimed = Claimed(job=job, token=ClaimToken(job_id="7", worker_id="w", claim_no=2))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        claimed.token.claim_no = 4  # type: ignore[misc]


def test_jobs_with_the_same_fields_are_equal_and_hash_alike_whatever_duplicate_says() -> None:
    """Equality and hash follow the fields, except duplicate (a mark on one enqueue's answer)."""
    one = Job(**_job_fields(payload=(1, 2), result="r"))  # type: ignore[arg-type]
    two = Job(**_job_fields(payload=(1, 2), result="r", duplicate=False))  # type: ignore[arg-type]
    assert one == two
    assert hash(one) == hash(two)
    assert one != Job(**_job_fields(payload=(1, 2), result="r", claim_no=3))  # type: ignore[arg-type]
    assert repr(one).startswith("Job(id='7', name='send', queue='default', payload=(1, 2), state=<JobState.RUNNING")
    token = ClaimToken(job_id="7", worker_id="w", claim_no=2)
    assert Claimed(job=one, token=token) == Claimed(job=two, token=one.token)
    assert hash(Claimed(job=one, token=token)) == hash(Claimed(job=two, token=token))


def test_a_state_given_as_its_name_becomes_the_enum() -> None:
    """Job(state="ready") holds JobState.READY, so `job.state is JobState.READY` holds."""
    job = Job(**_job_fields(state="running"))  # type: ignore[arg-type]
    assert job.state is JobState.RUNNING
    assert job.token is not None
    with pytest.raises(ValueError, match="'paused' is not a valid JobState"):
        Job(**_job_fields(state="paused"))  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["run_at", "created_at", "attempted_at", "finished_at", "lease_expires_at"])
def test_a_job_refuses_a_naive_datetime_in_any_time_field(field: str) -> None:
    """Every time field of Job refuses a naive datetime and names the field."""
    with pytest.raises(ValueError, match=f"{field} must be a timezone-aware datetime"):
        Job(**_job_fields(**{field: NAIVE}))  # type: ignore[arg-type]


def test_an_aware_time_in_another_zone_is_kept_as_given() -> None:
    """Only naive times are refused: an aware time outside UTC is kept (the checks' slow path)."""
    at = datetime(2030, 1, 1, 13, tzinfo=WARSAW)
    job = Job(**_job_fields(run_at=at, finished_at=at))  # type: ignore[arg-type]
    assert (job.run_at, job.finished_at) == (at, at)
    assert JobError(type="E", message="m", at=at).at == at


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: JobError(type="E", message="m", at=NAIVE), "at"),
        (lambda: JobFilter(created_from=NAIVE), "created_from"),
        (lambda: JobFilter(created_to=NAIVE), "created_to"),
        (lambda: Schedule(name="s", definition={}, watermark=NAIVE, created_at=NOW, updated_at=NOW), "watermark"),
        (lambda: Schedule(name="s", definition={}, watermark=NOW, created_at=NOW, updated_at=NAIVE), "updated_at"),
    ],
    ids=["job_error", "filter_from", "filter_to", "schedule_watermark", "schedule_updated"],
)
def test_other_records_refuse_naive_datetimes(build: object, field: str) -> None:
    """JobError, JobFilter and Schedule refuse a naive time in each of their time fields."""
    with pytest.raises(ValueError, match=f"{field} must be a timezone-aware datetime"):
        build()  # type: ignore[operator]


def test_converters_still_apply_at_construction() -> None:
    """JobFilter's state, RetentionPolicy's ages and Schedule's outcome are converted as documented."""
    assert JobFilter(state=["ready", JobState.DEAD]).state == frozenset({JobState.READY, JobState.DEAD})
    assert JobFilter().state is None
    assert RetentionPolicy(done=60, dead=None) == RetentionPolicy(done=timedelta(minutes=1), dead=None)
    assert RetentionPolicy().done == timedelta(days=1)
    with pytest.raises(OptionInvalid):
        RetentionPolicy(done="1d")  # type: ignore[arg-type]
    schedule = Schedule(
        name="s", definition={}, watermark=NOW, last_outcome="fired", created_at=NOW, updated_at=NOW  # type: ignore[arg-type]
    )
    assert schedule.last_outcome is ScheduleOutcome.FIRED


def test_a_missing_or_unknown_field_is_refused() -> None:
    """The constructor refuses a missing required field and a field the record does not have."""
    fields = _job_fields()
    del fields["max_attempts"]
    with pytest.raises(TypeError, match="max_attempts"):
        Job(**fields)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="colour"):
        ClaimToken(job_id="1", worker_id="w", claim_no=1, colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ClaimToken("1", "w", 1)  # type: ignore[misc]


def test_positional_builds_the_same_record_as_the_constructor_with_the_same_checks() -> None:
    """Job.positional (drivers' hot paths) takes every field in declaration order and checks like Job(...)."""
    fields = _job_fields(state="running")
    fast = Job.positional(*fields.values())
    assert fast == Job(**fields)  # type: ignore[arg-type]
    assert attrs.asdict(fast, recurse=False) == attrs.asdict(Job(**fields), recurse=False)  # type: ignore[arg-type]
    assert fast.state is JobState.RUNNING
    assert fast.duplicate is True
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.claim_no = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="lease_expires_at must be a timezone-aware datetime"):
        Job.positional(*_job_fields(lease_expires_at=NAIVE).values())
    token = ClaimToken.positional("7", "w", 2)
    assert Claimed.positional(fast, token) == Claimed(job=fast, token=ClaimToken(job_id="7", worker_id="w", claim_no=2))
    assert hash(token) == hash(fast.token)
    with pytest.raises(TypeError):
        ClaimToken.positional("7", "w")  # type: ignore[call-arg]

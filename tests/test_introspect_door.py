"""The operator front door (:class:`jobcore.door.IntrospectDoor`) over a recording fake backend.

The door checks every argument, applies each verb's guard from
:data:`jobcore.vocabulary.GUARDS` and words every refusal; a backend receives checked
values only. A fake backend that records each call proves it: junk is refused before
any call reaches the backend, and what does reach it has the checked shapes the
:class:`~jobcore.door.IntrospectBackend` protocol promises.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from jobcore.parity.test_junk import JUNK

from jobcore import vocabulary
from jobcore.door import FinishedRow, IntrospectBackend, IntrospectDoor
from jobcore.door._introspect import Refused, job_seq
from jobcore.driver import Introspector
from jobcore.errors import JobcoreError
from jobcore.records import BulkResult, Job, JobFilter, JobState, PruneResult, RescueResult, RetentionPolicy, Stats

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
FINISHED = tuple(sorted(vocabulary.FINISHED_STATES))


def _job(seq: int, state: JobState = JobState.READY) -> Job:
    return Job(id=str(seq), name="n", queue="q", payload=None, state=state, max_attempts=3, run_at=NOW, created_at=NOW)


class Recorder:
    """An :class:`IntrospectBackend` that records every call and answers ``answers[method]``."""

    def __init__(self, **answers: Any) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.answers = answers

    def _answer(self, method: str, args: tuple[Any, ...], default: Any) -> Any:
        self.calls.append((method, args))
        return self.answers.get(method, default)

    def get(self, seq: int) -> Job | None:
        return self._answer("get", (seq,), _job(seq))

    def list_older(self, flt: JobFilter, limit: int, below: int | None) -> Sequence[Job]:
        return self._answer("list_older", (flt, limit, below), [])

    def list_newer(self, flt: JobFilter, limit: int, above: int) -> Sequence[Job]:
        return self._answer("list_newer", (flt, limit, above), [])

    def stats(self) -> Stats:
        return self._answer("stats", (), Stats(counts={}, oldest_due_age={}))

    def dead_letters(self, queue: str | None, limit: int) -> Sequence[Job]:
        return self._answer("dead_letters", (queue, limit), [])

    def finished_counts(self, minutes: int) -> Sequence[FinishedRow]:
        return self._answer("finished_counts", (minutes,), [])

    def rescue(self) -> RescueResult:
        return self._answer("rescue", (), RescueResult(requeued=0, buried=()))

    def cancel(self, seq: int, states: frozenset[JobState], message: str) -> Job | None:
        return self._answer("cancel", (seq, states, message), _job(seq, JobState.CANCELLED))

    def requeue(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        return self._answer("requeue", (seq, states), _job(seq))

    def remove(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        return self._answer("remove", (seq, states), _job(seq))

    def make_due(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        return self._answer("make_due", (seq, states), _job(seq))

    def cancel_many(self, flt: JobFilter, limit: int, message: str) -> BulkResult:
        return self._answer("cancel_many", (flt, limit, message), BulkResult(affected=0, remaining=0))

    def requeue_many(self, flt: JobFilter, limit: int, spacing: Any) -> BulkResult:
        return self._answer("requeue_many", (flt, limit, spacing), BulkResult(affected=0, remaining=0))

    def remove_many(self, flt: JobFilter, limit: int) -> BulkResult:
        return self._answer("remove_many", (flt, limit), BulkResult(affected=0, remaining=0))

    def promote_many(self, flt: JobFilter, limit: int) -> BulkResult:
        return self._answer("promote_many", (flt, limit), BulkResult(affected=0, remaining=0))

    def prune(self, ages: Mapping[JobState, timedelta], limit: int, batch: int, dry_run: bool) -> PruneResult:
        return self._answer("prune", (ages, limit, batch, dry_run), PruneResult(removed={}, remaining={}))


def test_the_recorder_is_an_introspect_backend() -> None:
    """The fake implements the whole narrow protocol (so the door cannot call anything else)."""
    assert isinstance(Recorder(), IntrospectBackend)


# -- junk never reaches the backend --------------------------------------------------------

VALID: dict[str, dict[str, Any]] = {
    "get": {"job_id": "5"},
    "list": {"filter": JobFilter(queue="q"), "limit": 10, "after": None, "before": None},
    "stats": {},
    "dead_letters": {"queue": "q", "limit": 10},
    "finished_per_minute": {"minutes": 60},
    "rescue": {},
    "parents": {"job_id": "5"},
    "children": {"job_id": "5"},
    "cancel": {"job_id": "5", "reason": "why"},
    "requeue": {"job_id": "5"},
    "remove": {"job_id": "5"},
    "promote": {"job_id": "5"},
    "resume": {"job_id": "5"},
    "cancel_many": {"filter": JobFilter(queue="q"), "reason": "why", "limit": 10},
    "requeue_many": {"filter": JobFilter(queue="q"), "limit": 10, "spread": 1},
    "remove_many": {"filter": JobFilter(queue="q"), "limit": 10},
    "promote_many": {"filter": JobFilter(queue="q"), "limit": 10},
    "prune": {"policy": RetentionPolicy(done=0, failed=0, cancelled=0, dead=0), "limit": 10, "batch": 5,
              "dry_run": False},
}
"""A call per public Introspector verb that the door passes on to the backend."""

PARAMS = [
    (verb, name) for verb, kwargs in VALID.items() for name in kwargs
]


def test_every_public_verb_and_parameter_is_covered() -> None:
    """VALID names each verb of jobcore.driver.Introspector with each of its parameters."""
    public = {
        name: sorted(p for p in inspect.signature(member).parameters if p != "self")
        for name, member in vars(Introspector).items() if callable(member) and not name.startswith("_")
    }
    assert {verb: sorted(kwargs) for verb, kwargs in VALID.items()} == public


def _checked_shapes(method: str, args: tuple[Any, ...]) -> None:
    """What reached the backend has the shapes IntrospectBackend promises."""
    for arg in args:
        if isinstance(arg, JobFilter):
            assert arg.state is None or (isinstance(arg.state, frozenset) and arg.state), (method, arg)
            assert arg.queue is None or isinstance(arg.queue, str)
    if method in {"get", "cancel", "requeue", "remove", "make_due"}:
        assert type(args[0]) is int, (method, args)
        assert args[0] > 0, (method, args)
    if method in {"list_older", "list_newer", "dead_letters", "cancel_many", "requeue_many", "remove_many",
                  "promote_many"}:
        assert type(args[1]) is int, (method, args)
        assert 1 <= args[1] <= vocabulary.MAX_BULK_ROWS + 1, (method, args)
    if method == "finished_counts":
        assert type(args[0]) is int, (method, args)
        assert 1 <= args[0] <= vocabulary.MAX_CHART_MINUTES, (method, args)
    if method == "dead_letters":
        assert args[0] is None or isinstance(args[0], str), (method, args)
    if method in {"cancel", "cancel_many"}:
        assert isinstance(args[-1], str), (method, args)
    if method == "prune":
        ages, limit, batch, dry_run = args
        assert ages
        assert all(isinstance(a, timedelta) and a >= timedelta(0) for a in ages.values())
        assert type(limit) is int
        assert type(batch) is int
        assert type(dry_run) is bool


def _coded(exc: JobcoreError) -> None:
    assert exc.code.startswith("JC_")
    assert exc.cause
    assert exc.fix


@pytest.mark.parametrize(("verb", "parameter"), PARAMS, ids=[f"{v}-{p}" for v, p in PARAMS])
def test_junk_is_refused_before_the_backend_or_reaches_it_checked(verb: str, parameter: str) -> None:
    """Each junk value in each argument: a coded refusal with no backend call, or only checked values passed."""
    for value in JUNK:
        backend = Recorder()
        door = IntrospectDoor(backend)
        kwargs = {**VALID[verb], parameter: value}
        try:
            getattr(door, verb)(**kwargs)
        except JobcoreError as exc:
            _coded(exc)
            if exc.code != "JC_JOB_NOT_FOUND":  # a malformed id is an answer the door gives itself
                assert backend.calls == [], f"{verb}({parameter}={value!r:.60}) reached the backend"
            continue
        for method, args in backend.calls:
            _checked_shapes(method, args)


@pytest.mark.parametrize("job_id", ["", "0", "01", "-1", "+1", " 1", "1_0", "\u0661", "\uff11", "9" * 20, str(2**63)])
def test_malformed_ids_answer_without_the_backend(job_id: str) -> None:
    """O09: get, cancel and remove answer None, the refusable verbs JC_JOB_NOT_FOUND; no backend call."""
    backend = Recorder()
    door = IntrospectDoor(backend)
    assert job_seq(job_id) is None
    assert door.get(job_id) is None
    assert door.cancel(job_id) is None
    assert door.remove(job_id) is None
    for verb in ("requeue", "promote", "resume"):
        with pytest.raises(JobcoreError) as info:
            getattr(door, verb)(job_id)
        assert info.value.cause == vocabulary.not_found(job_id).cause
    assert backend.calls == []


# -- guards and wording ---------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["requeue", "remove", "promote", "resume"])
def test_single_verbs_pass_the_vocabulary_guard_and_word_the_refusal(verb: str) -> None:
    """The backend gets GUARDS[verb].states; its Refused(state) becomes the vocabulary's refusal."""
    method = {"promote": "make_due", "resume": "make_due"}.get(verb, verb)
    other = next(s for s in JobState if s not in vocabulary.GUARDS[verb].states)
    backend = Recorder(**{method: Refused(other)})
    with pytest.raises(vocabulary.GUARDS[verb].refusal) as info:
        getattr(IntrospectDoor(backend), verb)("42")
    takes = vocabulary.takes(vocabulary.GUARDS[verb].states)
    assert info.value.cause == f"job 42 is {other.value}; {verb} takes only {takes} jobs"
    assert backend.calls == [(method, (42, vocabulary.GUARDS[verb].states))]


def test_unknown_job_and_key_clash_are_worded_by_the_door() -> None:
    """None from the backend is JC_JOB_NOT_FOUND; a clash is JC_JOB_DUPLICATE naming key and holder."""
    with pytest.raises(JobcoreError) as info:
        IntrospectDoor(Recorder(requeue=None)).requeue("42")
    assert (info.value.code, info.value.cause) == ("JC_JOB_NOT_FOUND", "no job has id '42'")
    clash = Refused(JobState.DONE, "daily", "7", clash=True)
    with pytest.raises(JobcoreError) as info:
        IntrospectDoor(Recorder(requeue=clash)).requeue("42")
    assert (info.value.code, info.value.cause) == ("JC_JOB_DUPLICATE", "job 42's key 'daily' is held by live job 7")
    assert IntrospectDoor(Recorder(remove=None)).remove("42") is None


@pytest.mark.parametrize("verb", ["cancel", "requeue", "remove", "promote"])
def test_bulk_verbs_narrow_the_filter_to_their_guard(verb: str) -> None:
    """O05: the backend's filter states are guard & filter; a filter of unmovable states never reaches it."""
    guard = vocabulary.GUARDS[verb].states
    backend = Recorder()
    door = IntrospectDoor(backend)
    getattr(door, f"{verb}_many")(JobFilter(queue="q"))
    getattr(door, f"{verb}_many")({"state": list(JobState)})
    assert [args[0].state for _, args in backend.calls] == [guard, guard]
    assert all(args[0].queue == q for (_, args), q in zip(backend.calls, ["q", None], strict=True))
    backend.calls.clear()
    outside = frozenset(JobState) - guard
    assert getattr(door, f"{verb}_many")(JobFilter(state=outside)) == BulkResult(affected=0, remaining=0)
    assert backend.calls == []


def test_cancel_passes_the_reason_or_the_default_text() -> None:
    """O01: the Cancelled entry's message is the reason, or CANCELLED_TEXT when none is given."""
    backend = Recorder()
    door = IntrospectDoor(backend)
    door.cancel("3")
    door.cancel("3", "operator said so")
    door.cancel_many(reason=None)
    assert [args[-1] for _, args in backend.calls] == [
        vocabulary.CANCELLED_TEXT, "operator said so", vocabulary.CANCELLED_TEXT,
    ]
    assert backend.calls[0][1][1] == vocabulary.LIVE_STATES


def test_requeue_spacing_spreads_due_times_evenly() -> None:
    """O06: the spacing the backend gets answers one offset a row, whole ms, default 10 ms a row."""
    backend = Recorder()
    door = IntrospectDoor(backend)
    door.requeue_many(spread=timedelta(seconds=3))
    door.requeue_many()
    given, default = (args[2] for _, args in backend.calls)
    assert given(3) == [timedelta(0), timedelta(seconds=1), timedelta(seconds=2)]
    assert given(1) == [timedelta(0)]
    assert default(4) == [timedelta(milliseconds=m) for m in (0, 10, 20, 30)]
    assert all(o % timedelta(milliseconds=1) == timedelta(0) for o in given(7))


def test_list_pages_from_the_backend_rows() -> None:
    """O07: cursors come from the rows' ids; a newer page is read oldest first and shown newest first."""
    older = Recorder(list_older=[_job(9), _job(7)])
    page = IntrospectDoor(older).list(limit=2)
    assert [j.id for j in page.jobs] == ["9", "7"]
    assert page.after is not None
    assert page.before is None
    assert older.calls == [("list_older", (JobFilter(), 2, None))]
    newer = Recorder(list_newer=[_job(11), _job(12), _job(13)])
    page = IntrospectDoor(newer).list(limit=2, before=page.after)
    assert [j.id for j in page.jobs] == ["12", "11"]
    assert page.before is not None
    assert newer.calls[0][1][1:] == (3, 7)
    empty = Recorder()
    assert IntrospectDoor(empty).list(JobFilter(state=frozenset())).jobs == ()
    assert empty.calls == []


def test_prune_fills_every_finished_state_and_caps_remaining() -> None:
    """R01: the answer names every finished state, remaining at most MAX_PRUNE_ROWS; keep-forever calls nothing."""
    found = PruneResult(removed={JobState.DONE: 3}, remaining={JobState.DONE: vocabulary.MAX_PRUNE_ROWS + 5})
    backend = Recorder(prune=found)
    result = IntrospectDoor(backend).prune(RetentionPolicy(done=60, failed=None, cancelled=None, dead=None))
    assert result.removed == {s: (3 if s is JobState.DONE else 0) for s in FINISHED}
    assert result.remaining[JobState.DONE] == vocabulary.MAX_PRUNE_ROWS
    assert backend.calls == [("prune", ({JobState.DONE: timedelta(seconds=60)}, 10_000, 500, False))]
    keep = Recorder()
    forever = RetentionPolicy(done=None, failed=None, cancelled=None, dead=None)
    assert IntrospectDoor(keep).prune(forever).total_removed == 0
    assert keep.calls == []

"""Random sequences of every verb, each answer compared with a small reference model.

A hypothesis ``RuleBasedStateMachine`` drives one fresh driver per example through
enqueues, claims by several workers, heartbeats, acks, nacks (every variant), operator
verbs, rescues and clock moves, and compares every answer and, after every step, the
whole store with :mod:`jobcore.parity._model`. Every token ever handed out is kept
and replayed at random, so fencing (L02, L03) is exercised on every path.

Runs ``JOBCORE_STATEFUL_EXAMPLES`` examples per driver (default 100) of up to
``JOBCORE_STATEFUL_STEPS`` steps (default 30), through the ``jobcore-stateful``
hypothesis profile.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from jobcore.parity._model import MJob, Model, MToken, Refused
from jobcore.parity.plugin import START

from jobcore import validate as v
from jobcore.clock import ManualClock, to_millis
from jobcore.driver import JobDriver
from jobcore.errors import JobcoreError
from jobcore.records import ClaimToken, Job, JobFilter, RetentionPolicy

settings.register_profile(
    "jobcore-stateful",
    max_examples=int(os.environ.get("JOBCORE_STATEFUL_EXAMPLES", "100")),
    stateful_step_count=int(os.environ.get("JOBCORE_STATEFUL_STEPS", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)

QUEUES = ("q1", "q2")
NAMES = ("a", "b")
WORKERS = ("w1", "w2", "w3")
UNKNOWN_ID = "no-such-job"
"""An id no driver hands out: every driver answers it as unknown (O09), never an error."""

leases = st.sampled_from([timedelta(seconds=s) for s in (1, 5, 30)])
job_specs = st.fixed_dictionaries({
    "name": st.sampled_from(NAMES), "queue": st.sampled_from(QUEUES), "priority": st.integers(-1, 1),
    "when": st.one_of(st.none(), st.tuples(st.sampled_from(["delay", "run_at"]), st.integers(-5, 30))),
    "max_attempts": st.integers(1, 3), "key": st.sampled_from([None, None, "k1", "k2"]), "n": st.integers(0, 9),
})
steps = st.sampled_from([timedelta(milliseconds=1), timedelta(seconds=1), timedelta(seconds=5), timedelta(seconds=31)])
CLAIM_ARGS: dict[str, st.SearchStrategy[Any]] = {
    "queues": st.sampled_from([("q1",), ("q2",), ("q1", "q2"), ("q2", "q1")]),
    "worker": st.sampled_from(WORKERS),
    "limit": st.integers(1, 3),
    "lease": leases,
    "drop": st.sampled_from([(), (), ("a",), ("a", "b")]),
    "start": st.sampled_from([True, True, False]),
}
prune_ages = st.sampled_from([timedelta(0), timedelta(seconds=5), None])
pick = st.integers(min_value=0, max_value=63)  # index into a pool, taken modulo its size


class FlakyError(Exception):
    """A handler failure whose type name the error history must keep."""


def _job_view(job: Job, to_model: Callable[[str], int]) -> dict[str, Any]:
    return {
        "id": to_model(job.id), "name": job.name, "queue": job.queue, "payload": job.payload,
        "state": job.state.value, "priority": job.priority, "attempt": job.attempt,
        "max_attempts": job.max_attempts, "run_at": job.run_at, "created_at": job.created_at,
        "attempted_at": job.attempted_at, "finished_at": job.finished_at, "worker_id": job.worker_id,
        "claim_no": job.claim_no, "lease_expires_at": job.lease_expires_at, "key": job.key,
        "result": job.result, "last_error": None if job.last_error is None else job.last_error.type,
    }


def _model_view(job: MJob) -> dict[str, Any]:
    return {
        "id": job.seq, "name": job.name, "queue": job.queue, "payload": job.payload, "state": job.state,
        "priority": job.priority, "attempt": job.attempt, "max_attempts": job.max_attempts,
        "run_at": job.run_at, "created_at": job.created_at, "attempted_at": job.attempted_at,
        "finished_at": job.finished_at, "worker_id": job.worker_id, "claim_no": job.claim_no,
        "lease_expires_at": job.lease_expires_at, "key": job.key, "result": job.result,
        "last_error": job.errors[-1].type if job.errors else None,
    }


class DriverVersusModel(RuleBasedStateMachine):
    """One driver and the reference model, driven in lock step."""

    def __init__(self, make: Callable[[ManualClock], JobDriver]) -> None:
        super().__init__()
        self.clock = ManualClock(START)
        self.driver = make(self.clock)
        self.model = Model()
        self.ids: dict[int, str] = {}  # model id -> driver id
        self.seqs: dict[str, int] = {}  # driver id -> model id
        self.tokens: list[tuple[ClaimToken, MToken]] = []  # every token ever handed out
        self.held_claims = "deferred_start" in self.driver.capabilities  # F04

    # -- plumbing --------------------------------------------------------------------

    def now(self) -> datetime:
        return to_millis(self.clock.now())

    def to_model(self, driver_id: str) -> int:
        assert driver_id in self.seqs, f"driver answered job id {driver_id!r} that was never enqueued"
        return self.seqs[driver_id]

    def check_job(self, job: Job | None, seq: int | None, where: str, snapshot: MJob | None = None) -> None:
        """``job`` (a driver answer) must be the model's job ``seq`` (or ``None`` when seq is None)."""
        if seq is None:
            assert job is None, f"{where}: driver answered {job!r}, model expected None"
            return
        assert job is not None, f"{where}: driver answered None, model expected job {seq}"
        expected = snapshot if snapshot is not None else self.model.jobs[seq]
        assert _job_view(job, self.to_model) == _model_view(expected), f"{where}: job differs"
        got = [(e.type, e.at, e.attempt) for e in job.errors]
        want = [(e.type, e.at, e.attempt) for e in expected.errors]
        assert got == want, f"{where}: error history differs: {got} != {want}"
        for entry, model_entry in zip(job.errors, expected.errors, strict=True):
            if model_entry.message is not None:
                assert entry.message == model_entry.message, f"{where}: error text differs"

    def expect(self, where: str, call: Callable[[], Any], model_call: Callable[[], Any]) -> tuple[Any, Any]:
        """Run both; a refusal must be the same error class and code on both sides."""
        try:
            expected = model_call()
        except Refused as refusal:
            expected = refusal
        if isinstance(expected, Refused):
            with pytest.raises(JobcoreError) as raised:
                call()
            got = (type(raised.value).__name__, raised.value.code)
            assert got == (expected.name, expected.code), f"{where}: refused {got}, model refused {expected}"
            return None, None
        return call(), expected

    def job_id(self, index: int, *, include_unknown: bool = True) -> tuple[str, int | None]:
        """A driver id to act on and its model id (None: unknown, or removed)."""
        pool: list[tuple[str, int | None]] = [(self.ids[s], s) for s in sorted(self.ids)]
        if include_unknown:
            pool.append((UNKNOWN_ID, None))
        driver_id, seq = pool[index % len(pool)]
        if seq is not None and seq not in self.model.jobs:
            seq = None  # removed: the driver must treat it as unknown
        return driver_id, seq

    def token(self, index: int, *, current: bool | None = None) -> tuple[ClaimToken, MToken] | None:
        """A token from those handed out; ``current`` narrows to the current (or the stale) ones.

        Narrowing to current tokens when there are any keeps the interesting paths (a
        heartbeat or settle that lands) frequent; stale tokens are replayed as often.
        """
        pool = self.tokens
        if current is not None:
            narrowed = [pair for pair in pool if (self.model.current(pair[1]) is not None) == current]
            pool = narrowed if narrowed or not current else pool
        return pool[index % len(pool)] if pool else None

    # -- rules -----------------------------------------------------------------------

    def _options(self, spec: dict[str, Any]) -> tuple[dict[str, Any], datetime]:
        """enqueue's keyword arguments for ``spec``, and the due time the model expects."""
        now = self.now()
        options: dict[str, Any] = {
            "name": spec["name"], "payload": {"n": spec["n"], "tags": ("x", spec["n"])}, "queue": spec["queue"],
            "priority": spec["priority"], "max_attempts": spec["max_attempts"], "key": spec["key"],
        }
        if spec["when"] is None:
            return options, now
        how, secs = spec["when"]
        if how == "delay":
            secs = abs(secs)
            options["delay"] = secs if secs % 2 else timedelta(seconds=secs)  # seconds or a timedelta
        else:
            options["run_at"] = now + timedelta(seconds=secs)  # in the past too
        return options, now + timedelta(seconds=secs)

    def _check_enqueued(self, job: Job, spec: dict[str, Any], due: datetime, where: str) -> None:
        seq, duplicate = self.model.enqueue(
            self.now(), name=spec["name"], queue=spec["queue"], payload={"n": spec["n"], "tags": ["x", spec["n"]]},
            priority=spec["priority"], due=due, max_attempts=spec["max_attempts"], key=spec["key"],
        )
        assert job.duplicate == duplicate, f"E02: {where} duplicate answer differs"
        if not duplicate:
            assert job.id not in self.seqs, f"E01: id {job.id} handed out twice"
            self.ids[seq], self.seqs[job.id] = job.id, seq
        self.check_job(job, seq, where)

    @initialize(specs=st.lists(job_specs, min_size=1, max_size=4))
    def enqueue_many(self, specs: list[dict[str, Any]]) -> None:
        """Every example starts with a few jobs (E05), so no example is spent on an empty store."""
        built = [self._options(spec) for spec in specs]
        jobs = self.driver.enqueue_many([options for options, _ in built])
        assert len(jobs) == len(specs), "E05: one answer per spec"
        for job, spec, (_, due) in zip(jobs, specs, built, strict=True):
            self._check_enqueued(job, spec, due, "enqueue_many")

    @rule(spec=job_specs)
    def enqueue(self, spec: dict[str, Any]) -> None:
        options, due = self._options(spec)
        name, payload = options.pop("name"), options.pop("payload")
        self._check_enqueued(self.driver.enqueue(name, payload, **options), spec, due, "enqueue")

    @rule(**CLAIM_ARGS)
    def claim(
        self, queues: tuple[str, ...], worker: str, limit: int, lease: timedelta, drop: tuple[str, ...], start: bool,
    ) -> None:
        start = start or not self.held_claims
        options: dict[str, Any] = {} if start else {"start": False}
        result = self.driver.claim(
            list(queues), worker_id=worker, limit=limit, lease=lease, drop_exhausted=drop, **options
        )
        tokens, buried = self.model.claim(
            self.now(), queues=queues, worker=worker, limit=limit, lease=lease, drop=frozenset(drop), start=start
        )
        got = [self.to_model(c.token.job_id) for c in result.claimed]
        assert got == [t.seq for t in tokens], f"C02/C07: claimed {got}, model expected {[t.seq for t in tokens]}"
        for claimed, expected in zip(result.claimed, tokens, strict=True):
            assert (claimed.token.worker_id, claimed.token.claim_no) == (expected.worker, expected.claim_no)
            assert claimed.job.id == claimed.token.job_id
            answered = self.model.answered(self.model.jobs[expected.seq], self.now())
            self.check_job(claimed.job, expected.seq, "claim", answered)
            self.tokens.append((claimed.token, expected))
        got_buried = sorted(self.to_model(j.id) for j in result.buried)
        assert got_buried == sorted(buried), f"C08: buried {got_buried}, model expected {sorted(buried)}"
        for job in result.buried:
            self.check_job(job, self.to_model(job.id), "claim buried")

    @rule(**CLAIM_ARGS)
    def claim_too(self, **args: Any) -> None:
        """The same rule again: doubles the claim rate, and swarm testing rarely disables both."""
        self.claim(**args)

    @precondition(lambda self: self.tokens and self.held_claims)
    @rule(indexes=st.lists(pick, min_size=1, max_size=3), live=st.booleans())
    def start(self, indexes: list[int], live: bool) -> None:
        """F04: held attempts start (a repeat, a stale token and a started one included)."""
        pairs = [self.token(index, current=live or None) for index in indexes]
        assert all(pair is not None for pair in pairs)
        answers = self.driver.start([pair[0] for pair in pairs])  # type: ignore[attr-defined,index]
        assert answers == self.model.start(self.now(), [pair[1] for pair in pairs]), "F04: start answers differ"  # type: ignore[index]

    @precondition(lambda self: self.tokens)
    @rule(index=pick, live=st.booleans(), lease=leases)
    def heartbeat(self, index: int, live: bool, lease: timedelta) -> None:
        pair = self.token(index, current=live or None)
        assert pair is not None
        landed = self.driver.heartbeat(pair[0], lease)
        assert landed == self.model.heartbeat(self.now(), pair[1], lease), "L01/L02: heartbeat answer differs"

    @precondition(lambda self: self.tokens)
    @rule(index=pick, live=st.booleans(), lease=leases)
    def heartbeat_too(self, index: int, live: bool, lease: timedelta) -> None:
        """Heartbeats interleave with everything else; twice the weight keeps that common."""
        self.heartbeat(index, live, lease)

    @precondition(lambda self: self.tokens)
    @rule(index=pick, live=st.booleans(), result=st.sampled_from([None, {"ok": True}, (1, 2), "text"]))
    def ack(self, index: int, live: bool, result: Any) -> None:
        pair = self.token(index, current=live or None)
        assert pair is not None
        job = self.driver.ack(pair[0], result)
        stored = list(result) if isinstance(result, tuple) else result
        self.check_job(job, self.model.ack(self.now(), pair[1], stored), "ack")

    @precondition(lambda self: self.tokens)
    @rule(indexes=st.lists(pick, min_size=1, max_size=3))
    def ack_many(self, indexes: list[int]) -> None:
        pairs = [pair for pair in map(self.token, indexes) if pair is not None]
        answers = self.driver.ack_many([(pair[0], {"i": i}) for i, pair in enumerate(pairs)])
        assert len(answers) == len(pairs), "S07: one answer per item"
        for i, (pair, job) in enumerate(zip(pairs, answers, strict=True)):
            self.check_job(job, self.model.ack(self.now(), pair[1], {"i": i}), "ack_many")

    @precondition(lambda self: self.tokens)
    @rule(
        index=pick, live=st.booleans(), as_exception=st.booleans(), retry=st.one_of(st.none(), st.integers(-5, 20)),
        dead_letter=st.booleans(), fail=st.booleans(), counts_as_attempt=st.booleans(), park=st.booleans(),
    )
    def nack(
        self, index: int, live: bool, as_exception: bool, retry: int | None, dead_letter: bool, fail: bool,
        counts_as_attempt: bool, park: bool,
    ) -> None:
        pair = self.token(index, current=live or None)
        assert pair is not None
        now = self.now()
        error: BaseException | str = FlakyError(f"boom {index}") if as_exception else f"failed {index}"
        retry_at = None if retry is None else now + timedelta(seconds=retry)
        flags = {"dead_letter": dead_letter, "fail": fail, "counts_as_attempt": counts_as_attempt, "park": park}
        job, seq = self.expect(
            "nack",
            lambda: self.driver.nack(pair[0], error, retry_at=retry_at, **flags),
            lambda: self.model.nack(
                now, pair[1], type_name="FlakyError" if as_exception else "Error",
                message=f"boom {index}" if as_exception else f"failed {index}", retry_at=retry_at, **flags,
            ),
        )
        self.check_job(job, seq, "nack")

    @precondition(lambda self: self.tokens)
    @rule(index=pick, verb=st.sampled_from(["heartbeat", "ack", "nack"]))
    def replay_stale_token(self, index: int, verb: str) -> None:
        """L02/L03: a token that is not current changes nothing, answered not raised."""
        pair = self.token(index, current=False)
        if pair is None:
            return
        before = self.driver.introspect.get(pair[0].job_id)
        if verb == "heartbeat":
            assert self.driver.heartbeat(pair[0], timedelta(seconds=30)) is False
        elif verb == "ack":
            assert self.driver.ack(pair[0], {"late": True}) is None
        else:
            assert self.driver.nack(pair[0], "late failure", fail=True) is None
        after = self.driver.introspect.get(pair[0].job_id)
        assert before == after, "L02: a superseded token changed its job"

    @rule(
        verb=st.sampled_from(["cancel", "cancel", "requeue", "promote", "resume", "remove"]),
        index=pick,
        reason=st.sampled_from([None, "operator said so"]),
    )
    def operator(self, verb: str, index: int, reason: str | None) -> None:
        """O01-O04 and resume (S05), on known, removed and unknown ids alike.

        One rule for all five verbs, so swarm testing (which switches whole rules off
        per example) does not thin out the claim and settle rules.
        """
        driver_id, seq = self.job_id(index)
        now = self.now()
        verbs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "cancel": (lambda: self.driver.introspect.cancel(driver_id, reason),
                       lambda: self.model.cancel(now, seq, reason)),
            "requeue": (lambda: self.driver.introspect.requeue(driver_id), lambda: self.model.requeue(now, seq)),
            "promote": (lambda: self.driver.introspect.promote(driver_id), lambda: self.model.promote(now, seq)),
            "resume": (lambda: self.driver.introspect.resume(driver_id), lambda: self.model.resume(now, seq)),
            "remove": (lambda: self.driver.introspect.remove(driver_id), lambda: self.model.remove(seq)),
        }
        job, expected = self.expect(verb, *verbs[verb])
        if verb == "remove":  # answers the job as it was, now gone from the model
            self.check_job(job, None if expected is None else expected.seq, verb, snapshot=expected)
        else:
            self.check_job(job, expected, verb)

    @rule(
        verb=st.sampled_from(["cancel", "promote", "remove"]),
        queue=st.sampled_from([None, *QUEUES]),
        name=st.sampled_from([None, *NAMES]),
        states=st.sampled_from([None, ("scheduled",), ("running",), ("ready", "scheduled"), ("done", "dead")]),
        limit=st.sampled_from([1, 2, v.MAX_BULK_ROWS]),
    )
    def bulk(
        self, verb: str, queue: str | None, name: str | None, states: tuple[str, ...] | None, limit: int
    ) -> None:
        """O05: the bulk verbs keep their own state guard whatever the filter names; oldest first."""
        flt = JobFilter(queue=queue, name=name, state=states)
        target = {
            "cancel": lambda: self.driver.introspect.cancel_many(flt, reason="bulk stop", limit=limit),
            "promote": lambda: self.driver.introspect.promote_many(flt, limit=limit),
            "remove": lambda: self.driver.introspect.remove_many(flt, limit=limit),
        }[verb]
        result = target()
        affected, remaining = self.model.bulk(
            self.now(), verb, queue=queue, name=name, states=None if states is None else frozenset(states),
            limit=limit, reason="bulk stop",
        )
        assert (result.affected, result.remaining) == (affected, remaining), f"O05: {verb}_many answer differs"

    @rule(
        ages=st.fixed_dictionaries(dict.fromkeys(("done", "failed", "dead", "cancelled"), prune_ages)),
        limit=st.sampled_from([1, 2, v.DEFAULT_PRUNE_ROWS]),
    )
    def prune(self, ages: dict[str, timedelta | None], limit: int) -> None:
        """R01: prune takes the oldest finished rows past their state's age, never a live one."""
        result = self.driver.introspect.prune(RetentionPolicy(**ages), limit=limit, batch=1)
        removed, remaining = self.model.prune(self.now(), ages, limit)
        assert {s.value: n for s, n in result.removed.items()} == removed, "R01: removed differs"
        assert {s.value: n for s, n in result.remaining.items()} == remaining, "R01: remaining differs"

    @rule()
    def rescue(self) -> None:
        result = self.driver.introspect.rescue()
        requeued, buried = self.model.rescue(self.now())
        assert result.requeued == requeued, "C10: requeued count differs"
        assert sorted(self.to_model(j.id) for j in result.buried) == sorted(buried), "C10: buried differ"
        for job in result.buried:
            self.check_job(job, self.to_model(job.id), "rescue buried")

    @rule(step=steps)
    def advance_clock(self, step: timedelta) -> None:
        self.clock.advance(step)

    @rule(step=steps)
    def advance_clock_too(self, step: timedelta) -> None:
        """Time moves often, so leases lapse and scheduled jobs fall due within one example."""
        self.clock.advance(step)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        """Every job in exactly one state, none lost, each equal to the model's."""
        page = self.driver.introspect.list(limit=200)
        got = [self.to_model(j.id) for j in page.jobs]
        assert got == sorted(self.model.jobs, reverse=True), "O07: listing differs (a job lost or invented)"
        for job in page.jobs:
            seq = self.to_model(job.id)
            assert 0 <= job.attempt <= job.max_attempts, f"job {job.id}: attempt {job.attempt} out of range"
            self.check_job(job, seq, "listing")
            held = [t for t, _ in self.tokens if (t.job_id, t.worker_id, t.claim_no) == (
                job.id, job.worker_id, job.claim_no)]
            assert len(held) == (1 if job.state.value == "running" else 0), "C03: job held by != 1 live token"
        stats = self.driver.introspect.stats()
        counts = {q: {s.value: n for s, n in per.items() if n} for q, per in stats.counts.items()}
        assert {q: per for q, per in counts.items() if per} == self.model.counts(), "O08: stats counts differ"
        assert dict(stats.oldest_due_age) == self.model.oldest_due_age(self.now()), "O08: oldest due age differs"


def test_C03_L02_stateful_driver_matches_reference_model(driver_factory: Callable[..., JobDriver]) -> None:
    """Any sequence of verbs and clock moves leaves the driver exactly where the reference model says."""
    run_state_machine_as_test(
        lambda: DriverVersusModel(driver_factory), settings=settings.get_profile("jobcore-stateful")
    )

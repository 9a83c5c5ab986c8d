"""Junk in, coded refusals out: every public method of every driver, fed random nonsense.

Each example takes one public method of the driver, its ``introspect``, its
``leases`` or its ``schedules``, builds a call that would succeed (and write) with valid arguments, and
swaps one argument for junk: wrong types, NaN, infinities, huge and negative numbers,
empty and NUL strings, naive datetimes, bools posing as ints, ``None`` where a value is
required, bytes, sets, random objects, tokens and filters with junk inside. The only
exceptions allowed out are :class:`~jobcore.errors.JobcoreError` subclasses with a
``JC_`` code, a cause and a fix; a refused call leaves the store's listing and stats as
they were; values no argument accepts (NaN, infinities, naive datetimes, bare objects)
are always refused; a payload or result that is accepted comes back as its JSON form.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobcore import validate as v
from jobcore.driver import BatchHeartbeats, Introspector, JobDriver, LeaseStore, ScheduleStore
from jobcore.errors import JobcoreError
from jobcore.records import ClaimToken, Job, JobFilter, JobSpec, JobState, RetentionPolicy, Schedule

_EXAMPLES = int(os.environ.get("JOBCORE_JUNK_EXAMPLES", "25"))
JUNK_SETTINGS = settings(
    max_examples=_EXAMPLES,  # per (method, parameter): about 60 of them
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
WIDE_SETTINGS = settings(JUNK_SETTINGS, max_examples=_EXAMPLES * 4)
NAIVE = datetime(2030, 1, 1, 12, 0)  # noqa: DTZ001 - the point: a naive datetime
AWARE = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
SECOND = timedelta(seconds=1)


class Opaque:
    """An object of a type no argument accepts."""


class Unprintable(Exception):
    """An exception whose text cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def _noop(_queue: str) -> None:
    """A valid subscriber callback."""


ALWAYS_REFUSED: list[Any] = [math.nan, math.inf, -math.inf, NAIVE, Opaque(), complex(1, 1), Decimal("NaN")]
"""Values no argument of any method accepts."""

JUNK: list[Any] = [
    *ALWAYS_REFUSED,
    None, True, False, 0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**30, 1e308, -0.0, 0.5, -1e-9,
    "", " ", "\x00", "a\x00b", "\ud800", "x" * (v.MAX_NAME_LENGTH + 1), "1", "-1", "nan", "c1.000000",
    b"", b"x", bytearray(b"x"), [], [None], [1, 2], {}, {"k": math.nan}, {1: 2}, (), ("default",), set(),
    frozenset({"a"}), datetime(1, 1, 1, tzinfo=timezone.utc), datetime.max.replace(tzinfo=timezone.utc),
    AWARE, timedelta(0), timedelta(seconds=-1), timedelta.max, timedelta.min, timedelta(microseconds=1),
    Decimal("1"), Fraction(1, 3), Opaque, object(), ValueError("x"), Unprintable(), JobState.DONE,
    JobFilter(), JobSpec(name="x"), ClaimToken(job_id="1", worker_id="w", claim_no=1),
]

tokens_with_junk = st.builds(
    ClaimToken,
    job_id=st.one_of(st.sampled_from(JUNK), st.just("no-such-job")),
    worker_id=st.one_of(st.sampled_from(JUNK), st.just("w1")),
    claim_no=st.one_of(st.sampled_from(JUNK), st.integers()),
)


def _filter(**fields: Any) -> JobFilter | dict[str, Any]:
    """A JobFilter holding junk, or (when the record itself refuses it) the same fields as a mapping."""
    try:
        return JobFilter(**fields)
    except (TypeError, ValueError):
        return fields


filters_with_junk = st.one_of(
    *(st.builds(_filter, **{field: st.sampled_from(JUNK)}) for field in (
        "queue", "name", "state", "id_prefix", "created_from", "created_to")),
    st.dictionaries(st.sampled_from(["queue", "state", "nope", "id_prefix"]), st.sampled_from(JUNK), max_size=2),
)
junk = st.one_of(
    st.sampled_from(JUNK),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
    st.datetimes(),
    st.datetimes(timezones=st.just(timezone.utc)),
    st.timedeltas(),
    tokens_with_junk,
    filters_with_junk,
    st.lists(st.sampled_from(JUNK), max_size=2),
)


class World:
    """The store under test, kept ready so that any valid call would write something."""

    def __init__(self, driver: JobDriver) -> None:
        self.driver = driver
        self._token: ClaimToken | None = None

    def job_id(self) -> str:
        """An id of some job in the store."""
        page = self.driver.introspect.list(limit=1)
        return page.jobs[0].id if page.jobs else self.driver.enqueue("junk", {"n": 1}).id

    def token(self) -> ClaimToken:
        """A current token (the job it holds is running and held)."""
        if self._token is None or not self.driver.heartbeat(self._token, 60):
            self.driver.enqueue("junk", {"n": 2}, queue="held", priority=1)
            self._token = self.driver.claim(["held"], worker_id="w1", lease=60).claimed[0].token
        return self._token

    def finished_id(self) -> str:
        """The id of a done job (``wait`` answers it at once)."""
        done = self.driver.introspect.list(JobFilter(queue="waited", state="done"), limit=1).jobs
        if done:
            return done[0].id
        self.driver.enqueue("junk", {"n": 7}, queue="waited")
        self.driver.ack(self.driver.claim(["waited"], worker_id="w1", lease=60).claimed[0].token, 7)
        return self.finished_id()

    def prunable(self) -> Callable[..., Any]:
        """Leave one cancelled job, so a prune with zero ages would delete it; answers ``prune``."""
        self.driver.introspect.cancel(self.driver.enqueue("junk", {"n": 6}, queue="pruned").id)
        return self.driver.introspect.prune

    def schedule(self) -> Schedule:
        """A declared schedule, as it stands (its watermark is what a firing would expect)."""
        return self.driver.schedules.get("junk") or self.driver.schedules.declare("junk", {"every": 60})

    def next_occurrence(self) -> dict[str, datetime]:
        """``expected`` and ``occurrence`` arguments that would move the schedule's watermark."""
        watermark = self.schedule().watermark
        return {"expected": watermark, "occurrence": watermark + SECOND}

    def prepare(self) -> None:
        """Keep one job due in ``default`` and one scheduled, so claims and promotes would write."""
        stats = self.driver.introspect.stats()
        if stats.count("ready", "default") == 0:
            self.driver.enqueue("junk", {"n": 3}, key="k")
        if stats.count("scheduled", "default") == 0:
            self.driver.enqueue("junk", {"n": 4}, delay=60)
        self.token()

    def snapshot(self, *, schedules: bool = False) -> tuple[tuple[Job, ...], Any, Any, Any]:
        """The jobs, stats and (when asked: a round trip more) the schedules a refusal must leave alone."""
        jobs: list[Job] = []
        page = self.driver.introspect.list(limit=200)
        jobs.extend(page.jobs)
        while page.after is not None:
            page = self.driver.introspect.list(limit=200, after=page.after)
            jobs.extend(page.jobs)
        stats = self.driver.introspect.stats()
        kept = tuple(self.driver.schedules.list()) if schedules else ()
        return tuple(jobs), dict(stats.counts), dict(stats.oldest_due_age), kept


@pytest.fixture
def world(driver: JobDriver) -> World:
    """One World per test, shared by its hypothesis examples (the driver is too)."""
    return World(driver)


Call = tuple[Callable[..., Any], dict[str, Any]]
"""A bound method and keyword arguments that would make it succeed (and write)."""


def _calls(w: World) -> dict[str, Callable[[], Call]]:
    """For each public method, a builder of a call that would succeed with these arguments."""
    d, i, leases, sched = w.driver, w.driver.introspect, w.driver.leases, w.driver.schedules
    everything = {"filter": JobFilter(queue="default")}
    return {
        "enqueue": lambda: (d.enqueue, {
            "name": "junk", "payload": {"n": 5}, "queue": "default", "priority": 0, "run_at": None, "delay": 1,
            "max_attempts": 3, "key": None, "depends_on": None, "on_parent_failure": "cancel",
        }),
        "enqueue_many": lambda: (d.enqueue_many, {"specs": [JobSpec(name="junk"), {"name": "junk", "delay": 2}]}),
        "claim": lambda: (d.claim, {
            "queues": ["default"], "worker_id": "w2", "limit": 1, "lease": 30, "drop_exhausted": ("junk",),
        }),
        "heartbeat": lambda: (d.heartbeat, {"token": w.token(), "lease": 30}),
        "progress": lambda: (d.progress, {"token": w.token(), "value": 0.5, "message": "half"}),
        "ack": lambda: (d.ack, {"token": w.token(), "result": {"ok": 1}}),
        "ack_many": lambda: (d.ack_many, {"items": [(w.token(), {"ok": 2})]}),
        "nack": lambda: (d.nack, {
            "token": w.token(), "error": "boom", "retry_at": AWARE, "dead_letter": True, "fail": False,
            "counts_as_attempt": True, "park": False,
        }),
        "wait": lambda: (d.wait, {"job_id": w.finished_id(), "timeout": 0.05, "poll": 0.05}),
        "subscribe": lambda: (d.subscribe, {"queues": ["default"], "callback": _noop}),
        "get": lambda: (i.get, {"job_id": w.job_id()}),
        "parents": lambda: (i.parents, {"job_id": w.job_id()}),
        "children": lambda: (i.children, {"job_id": w.job_id()}),
        "list": lambda: (i.list, {**everything, "limit": 10, "after": None, "before": None}),
        "stats": lambda: (i.stats, {}),
        "dead_letters": lambda: (i.dead_letters, {"queue": "default", "limit": 10}),
        "finished_per_minute": lambda: (i.finished_per_minute, {"minutes": 60}),
        "rescue": lambda: (i.rescue, {}),
        "cancel": lambda: (i.cancel, {"job_id": w.job_id(), "reason": "junk test"}),
        "requeue": lambda: (i.requeue, {"job_id": w.job_id()}),
        "remove": lambda: (i.remove, {"job_id": w.job_id()}),
        "promote": lambda: (i.promote, {"job_id": w.job_id()}),
        "resume": lambda: (i.resume, {"job_id": w.job_id()}),
        "cancel_many": lambda: (i.cancel_many, {**everything, "reason": "junk", "limit": 1}),
        "requeue_many": lambda: (i.requeue_many, {"filter": JobFilter(state="cancelled"), "limit": 1, "spread": 0}),
        "remove_many": lambda: (i.remove_many, {"filter": JobFilter(state="scheduled"), "limit": 1}),
        "promote_many": lambda: (i.promote_many, {**everything, "limit": 1}),
        "prune": lambda: (w.prunable(), {
            "policy": RetentionPolicy(done=0, failed=0, cancelled=0, dead=0), "limit": 1, "batch": 1, "dry_run": False,
        }),
        "acquire": lambda: (leases.acquire, {"key": "slot", "limit": 2, "holder": "h1", "ttl": 30}),
        "renew": lambda: (leases.renew, {"key": "slot", "holder": "h1", "ttl": 30}),
        "release": lambda: (leases.release, {"key": "slot", "holder": "h1"}),
        "holders": lambda: (leases.holders, {"key": "slot", "limit": 10}),
        # ScheduleStore methods share names with Introspector's, so they are keyed "schedules.<name>"
        "schedules.declare": lambda: (sched.declare, {"name": "junk2", "definition": {"every": 60}, "start": AWARE}),
        "schedules.get": lambda: (sched.get, {"name": w.schedule().name}),
        "schedules.list": lambda: (sched.list, {}),
        "schedules.fire": lambda: (sched.fire, {
            "name": "junk", **w.next_occurrence(), "job": JobSpec(name="junk", queue="fired"), "outcome": "fired",
            "overlap": True,
        }),
        "schedules.pause": lambda: (sched.pause, {"name": w.schedule().name}),
        "schedules.resume": lambda: (sched.resume, {"name": w.schedule().name}),
        "schedules.remove": lambda: (sched.remove, {"name": w.schedule().name}),
    }


NOT_CALLED = frozenset({"close", "migrate"})
"""Methods without arguments to corrupt (and close would end the driver)."""
PROTOCOLS = (JobDriver, Introspector, LeaseStore, ScheduleStore)
PREFIXES: dict[type, str] = {ScheduleStore: "schedules."}
"""Protocols whose method names collide with another's, keyed by their attribute on the driver."""

# bools are valid values of these; everywhere else a bool is junk posing as an int
FLAGS = frozenset({"dead_letter", "fail", "counts_as_attempt", "park", "dry_run", "overlap"})
JSON_ARGS = frozenset({("enqueue", "payload"), ("ack", "result")})


def _parameters() -> dict[str, list[str]]:
    """Every public protocol method and its parameter names, read from jobcore/driver.py."""
    found: dict[str, list[str]] = {}
    for protocol in PROTOCOLS:
        for name, member in vars(protocol).items():
            if callable(member) and not name.startswith("_") and name not in NOT_CALLED:
                found[PREFIXES.get(protocol, "") + name] = [
                    p for p in inspect.signature(member).parameters if p != "self"
                ]
    return found


PARAMETERS = _parameters()


def test_E04_junk_table_covers_every_protocol_method(world: World) -> None:
    """The junk tests reach every public method the protocol declares, with every parameter."""
    built = {name: sorted(builder()[1]) for name, builder in _calls(world).items()}
    assert built == {name: sorted(params) for name, params in PARAMETERS.items()}, "update _calls()"


def _check_refusal(exc: BaseException, where: str) -> None:
    assert isinstance(exc, JobcoreError), f"{where} leaked {type(exc).__name__}: {exc}"
    assert exc.code.startswith("JC_"), f"{where}: code {exc.code!r}"
    assert exc.cause, f"{where}: {exc.code} has no cause"
    assert exc.fix, f"{where}: {exc.code} has no fix"


def _always_refused(method: str, parameter: str, value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, bool):  # a bool posing as an int, a name, a duration...
        return parameter not in FLAGS and (method, parameter) not in JSON_ARGS
    return any(value is bad or value == bad for bad in ALWAYS_REFUSED if not isinstance(bad, float))


@pytest.mark.parametrize(
    ("method", "parameter"),
    [(m, p) for m, params in PARAMETERS.items() for p in params],
    ids=[f"{m}-{p}" for m, params in PARAMETERS.items() for p in params],
)
@JUNK_SETTINGS
@given(value=junk)
def test_E04_junk_arguments_raise_only_coded_errors_and_write_nothing(
    world: World, method: str, parameter: str, value: Any
) -> None:
    """One junk argument to any public method: a coded refusal (store untouched) or a normal answer."""
    touches_schedules = method.startswith("schedules.")
    if not touches_schedules:  # the schedule store's calls write without due or held jobs
        world.prepare()
    target, kwargs = _calls(world)[method]()
    kwargs[parameter] = value
    where = f"{method}({parameter}={value!r:.80})"
    before = world.snapshot(schedules=touches_schedules)
    try:
        answer = target(**kwargs)
    except Exception as exc:  # the point: classify whatever comes out
        _check_refusal(exc, where)
        assert world.snapshot(schedules=touches_schedules) == before, f"{where} was refused but wrote to the store"
        return
    if method == "subscribe":
        answer.close()
    assert not _always_refused(method, parameter, value), f"{where} was accepted (answered {answer!r:.120})"


json_junk = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6),
        st.sampled_from([b"x", Opaque(), NAIVE, AWARE, Decimal("1"), set(), complex(0, 1), "\x00", "\ud800"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(), st.booleans(), st.none()), inner, max_size=3),
    ),
    max_leaves=8,
)


@WIDE_SETTINGS
@given(value=json_junk, where=st.sampled_from(["payload", "result", "error"]))
def test_E03_junk_json_is_refused_or_comes_back_as_its_json_form(world: World, value: Any, where: str) -> None:
    """A payload, result or error text is refused JC_PAYLOAD_INVALID/JC_OPTION_INVALID, or round-trips as JSON."""
    driver = world.driver
    world.prepare()
    token = world.token()
    before = world.snapshot()
    calls: dict[str, Callable[[], Job | None]] = {
        "payload": lambda: driver.enqueue("junk", value),
        "result": lambda: driver.ack(token, value),
        "error": lambda: driver.nack(token, value),
    }
    try:
        job = calls[where]()
    except Exception as exc:  # the point: classify whatever comes out
        _check_refusal(exc, f"{where}={value!r:.80}")
        code = getattr(exc, "code", None)
        assert code in ("JC_PAYLOAD_INVALID", "JC_OPTION_INVALID"), f"{where}: refused with {code}"
        assert world.snapshot() == before, f"{where}={value!r:.80} was refused but wrote to the store"
        return
    assert job is not None
    stored = driver.introspect.get(job.id)
    assert stored is not None
    if where == "error":
        assert isinstance(value, str), f"nack took a {type(value).__name__} as its error"
        assert (stored.last_error.type, stored.last_error.message) == ("Error", value)  # type: ignore[union-attr]
        return
    expected = json.loads(json.dumps(value, allow_nan=False))
    got = stored.payload if where == "payload" else stored.result
    assert got == expected, f"{where} {value!r:.80} came back as {got!r:.80}"
    assert job == stored, f"{where}: the answer differs from the stored job"


@WIDE_SETTINGS
@given(
    position=st.integers(0, 2),
    field=st.sampled_from(["name", "payload", "queue", "priority", "run_at", "delay", "max_attempts", "key"]),
    value=junk,
)
def test_E05_one_junk_spec_refuses_the_whole_batch(world: World, position: int, field: str, value: Any) -> None:
    """enqueue_many with one junk field in one spec: the whole batch is refused and nothing is written, or all land."""
    driver = world.driver
    before = world.snapshot()
    specs: list[dict[str, Any]] = [{"name": "batch", "payload": n} for n in range(3)]
    specs[position][field] = value
    try:
        jobs = driver.enqueue_many(specs)
    except Exception as exc:  # the point: classify whatever comes out
        _check_refusal(exc, f"spec {position} {field}={value!r:.80}")
        assert world.snapshot() == before, "E05: a refused batch wrote to the store"
        return
    assert len(jobs) == 3
    assert all(driver.introspect.get(j.id) == j for j in jobs)


@WIDE_SETTINGS
@given(
    token=tokens_with_junk,
    verb=st.sampled_from(["heartbeat", "heartbeat_many", "progress", "ack", "ack_many", "nack"]),
)
def test_L03_tokens_with_junk_inside_match_nothing_and_never_raise(world: World, token: ClaimToken, verb: str) -> None:
    """A ClaimToken no claim handed out, whatever its fields hold, is answered False/None like a stale one."""
    world.prepare()
    before = world.snapshot()
    calls: dict[str, Callable[[], Any]] = {
        "heartbeat": lambda: world.driver.heartbeat(token, 30),
        "heartbeat_many": lambda: cast(BatchHeartbeats, world.driver).heartbeat_many([token, token], 30),
        "progress": lambda: world.driver.progress(token, 0.5, "half"),
        "ack": lambda: world.driver.ack(token, {"ok": 1}),
        "ack_many": lambda: world.driver.ack_many([(token, None), (token, 1)]),
        "nack": lambda: world.driver.nack(token, "boom", fail=True),
    }
    answer = calls[verb]()
    assert answer in (False, None, [None, None], [False, False]), f"{verb} with {token!r:.120} answered {answer!r:.120}"
    assert world.snapshot() == before, f"{verb} with {token!r:.120} wrote to the store"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, False, -1, 0, 10**30, "3", None, 2.5])
def test_E04_claim_limit_junk_is_refused_every_time(driver: JobDriver, value: Any) -> None:
    """The claim batch size: NaN, infinities, bools, negatives, zero, huge, str, None, fractions are refused."""
    driver.enqueue("junk")
    with pytest.raises(JobcoreError) as raised:
        driver.claim(["default"], worker_id="w", limit=value, lease=30)
    assert raised.value.code == "JC_OPTION_INVALID"
    assert driver.introspect.stats().count("ready") == 1

"""The front doors of ``driver.leases`` and ``driver.schedules`` check once, before any store is reached.

A recording fake backend stands behind :class:`~jobcore.door.LeasesDoor` and
:class:`~jobcore.door.SchedulesDoor`: junk arguments must be refused by the door with a
coded error while the backend records no call at all (nothing written), and valid ones
must reach it in their checked form (names as str, ttl as a timedelta, a definition as
its JSON text, times in UTC to the millisecond, a fired job as a ``StoreTimedJob``). Each
driver's backends are also held to the protocols' method signatures, since a third-party
driver implements only those.
"""

from __future__ import annotations

import builtins
import inspect
import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from jobcore.parity.test_junk import AWARE, JUNK_SETTINGS, junk

from jobcore import validate as v
from jobcore.door import LeasesBackend, LeasesDoor, SchedulesBackend, SchedulesDoor
from jobcore.driver import JobDriver
from jobcore.errors import JobcoreError
from jobcore.records import JobSpec, Schedule, ScheduleOutcome
from jobcore.vocabulary import MAX_LEASE, MAX_LEASE_SLOTS, MAX_NAME_LENGTH, MIN_LEASE

LATER = AWARE + timedelta(minutes=1)


class RecordingLeases:
    """A :class:`LeasesBackend` that checks nothing: it records each call and says yes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def acquire(self, key: str, limit: int, holder: str, ttl: timedelta) -> bool:
        self.calls.append(("acquire", (key, limit, holder, ttl)))
        return True

    def renew(self, key: str, holder: str, ttl: timedelta) -> bool:
        self.calls.append(("renew", (key, holder, ttl)))
        return True

    def release(self, key: str, holder: str) -> bool:
        self.calls.append(("release", (key, holder)))
        return True


def _schedule(name: str) -> Schedule:
    return Schedule(
        name=name, definition={}, watermark=AWARE, paused=False, last_fired_at=None, last_outcome=None,
        last_job_id=None, created_at=AWARE, updated_at=AWARE,
    )


class RecordingSchedules:
    """A :class:`SchedulesBackend` that checks nothing: it records each call and answers a schedule."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.calls: builtins.list[tuple[str, dict[str, Any]]] = []
        self.names = builtins.list(names)

    def declare(self, name: str, definition: str, start: datetime | None) -> Schedule:
        self.calls.append(("declare", {"name": name, "definition": definition, "start": start}))
        return _schedule(name)

    def get(self, name: str) -> Schedule | None:
        self.calls.append(("get", {"name": name}))
        return _schedule(name)

    def list(self) -> builtins.list[Schedule]:
        self.calls.append(("list", {}))
        return [_schedule(n) for n in self.names]

    def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: v.StoreTimedJob | None,
        outcome: ScheduleOutcome, overlap: bool,
    ) -> Schedule | None:
        self.calls.append(("fire", {
            "name": name, "expected": expected, "occurrence": occurrence, "job": job, "outcome": outcome,
            "overlap": overlap,
        }))
        return _schedule(name)

    def pause(self, name: str) -> Schedule | None:
        self.calls.append(("pause", {"name": name}))
        return _schedule(name)

    def resume(self, name: str) -> Schedule | None:
        self.calls.append(("resume", {"name": name}))
        return _schedule(name)

    def remove(self, name: str) -> bool:
        self.calls.append(("remove", {"name": name}))
        return True


# A call per verb that the door passes through, as (verb, keyword arguments).
LEASE_CALLS: dict[str, dict[str, Any]] = {
    "acquire": {"key": "slot", "limit": 2, "holder": "h1", "ttl": 30},
    "renew": {"key": "slot", "holder": "h1", "ttl": 30},
    "release": {"key": "slot", "holder": "h1"},
}
SCHEDULE_CALLS: dict[str, dict[str, Any]] = {
    "declare": {"name": "s", "definition": {"every": 60}, "start": AWARE},
    "get": {"name": "s"},
    "fire": {"name": "s", "expected": AWARE, "occurrence": LATER, "job": JobSpec(name="j"), "outcome": "fired",
             "overlap": False},
    "pause": {"name": "s"},
    "resume": {"name": "s"},
    "remove": {"name": "s"},
}


def _coded(exc: BaseException, where: str) -> None:
    assert isinstance(exc, JobcoreError), f"{where} leaked {type(exc).__name__}: {exc}"
    assert exc.code.startswith("JC_"), where
    assert exc.cause, where
    assert exc.fix, where


def _name(value: object) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_NAME_LENGTH and "\x00" not in value


def _utc_ms(value: object) -> bool:
    return (
        isinstance(value, datetime) and value.tzinfo is timezone.utc and value.microsecond % 1000 == 0
    )


def _lease_args_checked(verb: str, args: tuple[Any, ...]) -> bool:
    if verb == "acquire":
        key, limit, holder, ttl = args
        if not (type(limit) is int and 1 <= limit <= MAX_LEASE_SLOTS):
            return False
    elif verb == "renew":
        key, holder, ttl = args
    else:
        (key, holder), ttl = args, MIN_LEASE
    return _name(key) and _name(holder) and type(ttl) is timedelta and MIN_LEASE <= ttl <= MAX_LEASE


def _schedule_args_checked(verb: str, args: dict[str, Any]) -> bool:
    ok = _name(args.get("name", "x"))
    if verb == "declare":
        ok = ok and isinstance(json.loads(args["definition"]), dict)
        ok = ok and (args["start"] is None or _utc_ms(args["start"]))
    if verb == "fire":
        ok = ok and _utc_ms(args["expected"]) and _utc_ms(args["occurrence"])
        ok = ok and args["expected"] < args["occurrence"]
        ok = ok and (args["job"] is None or type(args["job"]) is v.StoreTimedJob)
        ok = ok and type(args["outcome"]) is ScheduleOutcome and type(args["overlap"]) is bool
    return ok


DOORS: dict[str, tuple[Callable[[], Any], Callable[[Any], Any], dict[str, dict[str, Any]], Callable[..., bool]]] = {
    "leases": (RecordingLeases, LeasesDoor, LEASE_CALLS, _lease_args_checked),
    "schedules": (RecordingSchedules, SchedulesDoor, SCHEDULE_CALLS, _schedule_args_checked),
}
"""Per store: its recording backend, its door, a valid call per verb, and the check of what reached the backend."""
PARAMS = [(store, verb, p) for store, door in DOORS.items() for verb, call in door[2].items() for p in call]


@pytest.mark.parametrize(("store", "verb", "parameter"), PARAMS, ids=["-".join(p) for p in PARAMS])
@JUNK_SETTINGS
@given(value=junk)
def test_K01_K03_P01_P04_junk_is_refused_by_the_door_and_never_reaches_the_backend(
    store: str, verb: str, parameter: str, value: Any
) -> None:
    """Junk in any lease or schedule argument: a coded refusal and no backend call, or a call with checked values."""
    recording, door, calls, checked = DOORS[store]
    backend = recording()
    where = f"{store}.{verb}({parameter}={value!r:.60})"
    try:
        getattr(door(backend), verb)(**{**calls[verb], parameter: value})
    except Exception as exc:  # the point: whatever comes out is classified
        _coded(exc, where)
        assert backend.calls == [], f"{where} was refused but reached the backend"
    else:
        assert len(backend.calls) == 1
        assert checked(*backend.calls[0]), f"{where} reached the backend unchecked: {backend.calls}"


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ({"limit": 0}, "JC_OPTION_INVALID"),
        ({"limit": MAX_LEASE_SLOTS + 1}, "JC_OPTION_INVALID"),
        ({"limit": True}, "JC_OPTION_INVALID"),
        ({"ttl": 0}, "JC_OPTION_INVALID"),
        ({"ttl": MAX_LEASE + timedelta(milliseconds=1)}, "JC_OPTION_INVALID"),
        ({"key": ""}, "JC_OPTION_INVALID"),
        ({"holder": "x" * (MAX_NAME_LENGTH + 1)}, "JC_OPTION_INVALID"),
    ],
)
def test_K01_acquire_out_of_range_is_refused_without_a_backend_call(call: dict[str, Any], code: str) -> None:
    """Each edge of acquire's arguments is refused by the door, with nothing sent to the store."""
    backend = RecordingLeases()
    with pytest.raises(JobcoreError) as refused:
        LeasesDoor(backend).acquire(**{**LEASE_CALLS["acquire"], **call})
    assert refused.value.code == code
    assert backend.calls == []


def test_K01_acquire_hands_the_backend_a_timedelta_ttl_and_the_limit_edges_pass() -> None:
    """Seconds become a timedelta; a limit of exactly MAX_LEASE_SLOTS and a ttl of MAX_LEASE go through."""
    backend = RecordingLeases()
    door = LeasesDoor(backend)
    assert door.acquire("slot", MAX_LEASE_SLOTS, "h1", 1.5) is True
    assert door.renew("slot", "h1", MAX_LEASE) is True
    assert door.release("slot", "h1") is True
    assert backend.calls == [
        ("acquire", ("slot", MAX_LEASE_SLOTS, "h1", timedelta(seconds=1.5))),
        ("renew", ("slot", "h1", MAX_LEASE)),
        ("release", ("slot", "h1")),
    ]


def test_P01_fire_hands_the_backend_a_checked_store_timed_job_with_the_drivers_default() -> None:
    """The fired job arrives as a StoreTimedJob (its time left to the store), with the driver's default attempts."""
    backend = RecordingSchedules()
    door = SchedulesDoor(backend, default_max_attempts=7)
    berlin = timezone(timedelta(hours=1))
    door.fire("s", expected=AWARE.astimezone(berlin), occurrence=LATER + timedelta(microseconds=999),
              job={"name": "j", "payload": {"b": 1, "a": 2}, "delay": 5}, outcome="catch_up")
    (verb, args), = backend.calls
    assert verb == "fire"
    assert args == {
        "name": "s", "expected": AWARE, "occurrence": LATER, "outcome": ScheduleOutcome.CATCH_UP, "overlap": True,
        "job": v.StoreTimedJob(
            name="j", queue="default", payload='{"b":1,"a":2}', priority=0, run_at=None,
            delay=timedelta(seconds=5), max_attempts=7, key=None,
        ),
    }
    assert args["expected"].tzinfo is timezone.utc


def test_P01_an_invalid_fired_job_is_refused_before_the_compare_and_set() -> None:
    """A bad job refuses the firing whoever would win it: the backend never sees the call."""
    backend = RecordingSchedules()
    with pytest.raises(JobcoreError) as refused:
        SchedulesDoor(backend).fire("s", expected=AWARE, occurrence=LATER, job=JobSpec(name="j", max_attempts=0))
    assert refused.value.code == "JC_OPTION_INVALID"
    assert backend.calls == []


def test_P04_declare_hands_the_backend_the_definitions_canonical_json_text() -> None:
    """The definition arrives as canonical JSON text, ``start`` in UTC to the millisecond."""
    backend = RecordingSchedules()
    start = datetime(2030, 1, 1, 13, 0, 0, 123_456, tzinfo=timezone(timedelta(hours=1)))
    SchedulesDoor(backend).declare("s", {"z": [1, {"y": None}], "a": "é"}, start=start)
    assert backend.calls == [("declare", {
        "name": "s", "definition": '{"z":[1,{"y":null}],"a":"é"}',
        "start": datetime(2030, 1, 1, 12, 0, 0, 123_000, tzinfo=timezone.utc),
    })]


def test_schedules_list_answers_by_name_whatever_order_the_backend_answers() -> None:
    """The door sorts: a backend may answer its schedules in any order."""
    door = SchedulesDoor(RecordingSchedules(["b", "C", "a", "é"]))
    assert [s.name for s in door.list()] == ["C", "a", "b", "é"]


def _parameters(method: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(method).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("protocol", [LeasesBackend, SchedulesBackend], ids=["leases", "schedules"])
def test_each_drivers_backend_has_the_protocols_signatures(driver: JobDriver, protocol: type) -> None:
    """The backend behind ``driver.leases``/``driver.schedules`` takes exactly the protocol's parameters."""
    door = driver.leases if protocol is LeasesBackend else driver.schedules
    backend = door._backend  # type: ignore[attr-defined]
    for name, member in vars(protocol).items():
        if callable(member) and not name.startswith("_"):
            assert _parameters(getattr(backend, name)) == _parameters(member), f"{type(backend).__name__}.{name}"

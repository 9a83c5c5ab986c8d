"""Parity scenarios for rules E01-E05: enqueue, idempotency keys, payloads, options, batches."""

from __future__ import annotations

import math
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from jobcore.parity._support import all_jobs, claim_one, finished_job, refused, together

from jobcore import validate as v
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import JobSpec, JobState

# --- E01 ------------------------------------------------------------------------------


def test_E01_enqueue_answers_the_stored_ready_job(driver: JobDriver, clock: ManualClock) -> None:
    """A job due now comes back ready, attempt 0, with every field as stored."""
    now = clock.now()
    job = driver.enqueue("send", {"to": "ada"}, queue="mail", priority=3, max_attempts=5, key="k1")
    assert isinstance(job.id, str)
    assert job.id
    assert job.name == "send"
    assert job.queue == "mail"
    assert job.payload == {"to": "ada"}
    assert job.state is JobState.READY
    assert job.priority == 3
    assert job.attempt == 0
    assert job.max_attempts == 5
    assert job.key == "k1"
    assert job.run_at == now
    assert job.created_at == now
    assert job.claim_no == 0
    assert (job.attempted_at, job.finished_at, job.worker_id, job.lease_expires_at) == (None, None, None, None)
    assert (job.result, job.last_error, job.errors) == (None, None, ())
    assert job.duplicate is False
    assert driver.introspect.get(job.id) == job


def test_E01_defaults_and_fresh_ids(driver: JobDriver) -> None:
    """Defaults: queue default, priority 0, max_attempts 20; every enqueue gets a new id."""
    first = driver.enqueue("a")
    second = driver.enqueue("a")
    assert first.id != second.id
    assert (first.queue, first.priority, first.max_attempts, first.payload) == ("default", 0, 20, None)


def test_E01_future_run_at_is_scheduled(driver: JobDriver, clock: ManualClock) -> None:
    """run_at in the future answers scheduled; run_at now or in the past answers ready."""
    now = clock.now()
    later = driver.enqueue("a", run_at=now + timedelta(minutes=5))
    exact = driver.enqueue("a", run_at=now)
    past = driver.enqueue("a", run_at=now - timedelta(hours=1))
    assert later.state is JobState.SCHEDULED
    assert later.run_at == now + timedelta(minutes=5)
    assert exact.state is JobState.READY
    assert past.state is JobState.READY
    assert past.run_at == now - timedelta(hours=1)


def test_E01_delay_is_relative_to_the_driver_clock(driver: JobDriver, clock: ManualClock) -> None:
    """delay (seconds or timedelta) resolves against the driver's clock; delay 0 is ready."""
    clock.advance(hours=3)
    now = clock.now()
    by_seconds = driver.enqueue("a", delay=90)
    by_delta = driver.enqueue("a", delay=timedelta(milliseconds=1))
    zero = driver.enqueue("a", delay=0)
    assert (by_seconds.state, by_seconds.run_at) == (JobState.SCHEDULED, now + timedelta(seconds=90))
    assert (by_delta.state, by_delta.run_at) == (JobState.SCHEDULED, now + timedelta(milliseconds=1))
    assert (zero.state, zero.run_at) == (JobState.READY, now)


def test_E01_times_are_utc_milliseconds(driver: JobDriver, clock: ManualClock) -> None:
    """Times come back as aware UTC datetimes truncated to the millisecond."""
    clock.advance(microseconds=1_500)
    plus_two = timezone(timedelta(hours=2))
    run_at = (clock.now() + timedelta(hours=1, microseconds=999)).astimezone(plus_two)
    job = driver.enqueue("a", run_at=run_at)
    assert job.created_at.microsecond % 1000 == 0
    assert job.created_at == clock.now() - timedelta(microseconds=500)
    assert job.run_at.utcoffset() == timedelta(0)
    assert job.run_at == datetime(2030, 1, 1, 13, 0, 0, 2000, tzinfo=timezone.utc)
    assert driver.introspect.get(job.id) == job


# --- E02 ------------------------------------------------------------------------------


def test_E02_live_key_holder_answers_duplicate(driver: JobDriver) -> None:
    """A second enqueue with a live holder's key answers the holder marked duplicate."""
    holder = driver.enqueue("report", {"n": 1}, key="daily")
    again = driver.enqueue("report", {"n": 2}, key="daily", priority=9)
    assert again.duplicate is True
    assert again.id == holder.id
    assert again.payload == {"n": 1}
    assert again.priority == 0
    assert holder.duplicate is False
    assert len(all_jobs(driver)) == 1


def test_E02_running_holder_still_holds_the_key(driver: JobDriver) -> None:
    """A running job is live, so its key still answers duplicates."""
    holder = driver.enqueue("report", key="daily")
    claim_one(driver)
    again = driver.enqueue("report", key="daily")
    assert (again.duplicate, again.id, again.state) == (True, holder.id, JobState.RUNNING)
    assert len(all_jobs(driver)) == 1


@pytest.mark.parametrize("state", ["done", "failed", "dead", "cancelled"])
def test_E02_finished_holder_frees_the_key(driver: JobDriver, state: str) -> None:
    """Once the holder is finished, the key is free again and a new job is inserted."""
    holder = finished_job(driver, state, name="report", key="daily")
    fresh = driver.enqueue("report", key="daily")
    assert fresh.duplicate is False
    assert fresh.id != holder.id
    assert fresh.state is JobState.READY
    assert len(all_jobs(driver)) == 2


def test_E02_removed_holder_frees_the_key(driver: JobDriver) -> None:
    """Removing the live holder frees its key."""
    holder = driver.enqueue("report", key="daily")
    driver.introspect.remove(holder.id)
    fresh = driver.enqueue("report", key="daily")
    assert fresh.duplicate is False
    assert fresh.id != holder.id


def test_E02_key_is_scoped_by_name(driver: JobDriver) -> None:
    """The same key under another job name is not a duplicate; no key never is."""
    a = driver.enqueue("a", key="k")
    b = driver.enqueue("b", key="k")
    c1 = driver.enqueue("a")
    c2 = driver.enqueue("a")
    assert not any(j.duplicate for j in (a, b, c1, c2))
    assert len({a.id, b.id, c1.id, c2.id}) == 4


def test_E02_duplicate_inside_one_batch(driver: JobDriver) -> None:
    """A key repeated inside one enqueue_many: the later item answers the earlier one."""
    jobs = driver.enqueue_many([
        JobSpec(name="r", payload=1, key="k"),
        JobSpec(name="r", payload=2, key="other"),
        {"name": "r", "payload": 3, "key": "k"},
    ])
    assert [j.duplicate for j in jobs] == [False, False, True]
    assert jobs[2].id == jobs[0].id
    assert jobs[2].payload == 1
    assert len(all_jobs(driver)) == 2


def test_E02_batch_item_duplicates_an_existing_job(driver: JobDriver) -> None:
    """A batch item whose key a stored live job holds answers that job."""
    holder = driver.enqueue("r", "old", key="k")
    jobs = driver.enqueue_many([{"name": "r", "payload": "new", "key": "k"}, {"name": "r"}])
    assert (jobs[0].duplicate, jobs[0].id, jobs[0].payload) == (True, holder.id, "old")
    assert jobs[1].duplicate is False
    assert len(all_jobs(driver)) == 2


def test_E02_concurrent_enqueues_insert_one(driver: JobDriver) -> None:
    """Enqueues of one name and key racing each other insert one job; the rest answer it."""
    jobs = together(4, lambda i: driver.enqueue("report", {"n": i}, key="daily"))
    assert len({j.id for j in jobs}) == 1
    assert sorted(j.duplicate for j in jobs) == [False, True, True, True]
    assert len(all_jobs(driver)) == 1


def test_E02_parked_and_retrying_holders_still_hold_the_key(driver: JobDriver) -> None:
    """A suspended job and a job scheduled for a retry are live: their keys answer duplicates."""
    parked = driver.enqueue("p", key="k1", queue="q1")
    retrying = driver.enqueue("r", key="k2", queue="q2")
    driver.nack(claim_one(driver, "q1").token, "wait", park=True)
    driver.nack(claim_one(driver, "q2").token, "again", retry_at=datetime(2031, 1, 1, tzinfo=timezone.utc))
    assert driver.enqueue("p", key="k1").id == parked.id
    assert driver.enqueue("r", key="k2").id == retrying.id
    assert len(all_jobs(driver)) == 2


def test_E02_buried_holder_frees_the_key(driver: JobDriver, clock: ManualClock) -> None:
    """A holder buried by a claim (C08) or by rescue is finished, so its key is free."""
    by_claim = driver.enqueue("a", key="k", max_attempts=1, queue="q1")
    by_rescue = driver.enqueue("b", key="k", max_attempts=1, queue="q2")
    driver.claim(["q1", "q2"], worker_id="w1", limit=2, lease=10)
    clock.advance(seconds=10)
    assert [j.id for j in driver.claim(["q1"], worker_id="w2", lease=30).buried] == [by_claim.id]
    assert [j.id for j in driver.introspect.rescue().buried] == [by_rescue.id]
    assert driver.enqueue("a", key="k").duplicate is False
    assert driver.enqueue("b", key="k").duplicate is False


def test_E02_bulk_verbs_free_and_retake_keys(driver: JobDriver) -> None:
    """cancel_many and remove_many free keys; requeue_many makes the requeued row hold its key again."""
    cancelled = driver.enqueue("a", key="k1")
    removed = driver.enqueue("b", key="k2")
    assert driver.introspect.cancel_many({"name": "a"}).affected == 1
    assert driver.introspect.remove_many({"name": "b"}).affected == 1
    fresh_a = driver.enqueue("a", key="k1")
    fresh_b = driver.enqueue("b", key="k2")
    assert (fresh_a.duplicate, fresh_b.duplicate) == (False, False)
    assert fresh_b.id != removed.id
    driver.introspect.cancel(fresh_a.id)
    assert driver.introspect.requeue_many({"name": "a"}, spread=0).affected == 1
    again = driver.enqueue("a", key="k1")
    assert (again.duplicate, again.id) == (True, cancelled.id)


def test_E02_batch_key_of_a_finished_holder_is_free(driver: JobDriver) -> None:
    """In a batch, a key whose only holder finished inserts a new job; its repeat answers that one."""
    old = finished_job(driver, "done", name="r", key="k")
    jobs = driver.enqueue_many([{"name": "r", "key": "k", "payload": 1}, {"name": "r", "key": "k", "payload": 2}])
    assert jobs[0].duplicate is False
    assert jobs[0].id != old.id
    assert (jobs[1].duplicate, jobs[1].id, jobs[1].payload) == (True, jobs[0].id, 1)


# --- E03 ------------------------------------------------------------------------------

def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


ROUND_TRIPS: dict[str, tuple[Any, Any]] = {
    "none": (None, None),
    "scalar_str": ("text", "text"),
    "scalar_int": (7, 7),
    "scalar_bool": (True, True),
    "empty": ({"a": {}, "b": [], "c": ""}, {"a": {}, "b": [], "c": ""}),
    "nested": ({"a": [1, {"b": [2, [3, {"c": None}]]}]}, {"a": [1, {"b": [2, [3, {"c": None}]]}]}),
    "unicode": (
        {"é": "héllo ✓ 日本語 😀", "esc": "\"quoted\" \\ \n\t \u2028 \u007f"},
        {"é": "héllo ✓ 日本語 😀", "esc": "\"quoted\" \\ \n\t \u2028 \u007f"},
    ),
    "big_ints": ([2**63, -(2**63) - 1, 2**100, 0], [2**63, -(2**63) - 1, 2**100, 0]),
    "floats": ([1.0, -0.5, 1e308, 5e-324, 0.1], [1.0, -0.5, 1e308, 5e-324, 0.1]),
    "mongo_keys": ({"$set": {"a.b": 1}, ".": 2, "$": {"$in": [1]}}, {"$set": {"a.b": 1}, ".": 2, "$": {"$in": [1]}}),
    "sql_text": ({"q": "'; DROP TABLE jobs; --"}, {"q": "'; DROP TABLE jobs; --"}),
    "escaped_nul_text": ({"t": "\\u0000 is text, not a NUL"}, {"t": "\\u0000 is text, not a NUL"}),
    "odd_keys": ({"": 1, "_id": 2, "😀": 3, "k" * 300: 4}, {"": 1, "_id": 2, "😀": 3, "k" * 300: 4}),
    "float_precision": ([0.1 + 0.2, 1 / 3, 2.0**-1074], [0.1 + 0.2, 1 / 3, 2.0**-1074]),
    "mixed_list": ([1, "a", None, True, 1.5, {}, []], [1, "a", None, True, 1.5, {}, []]),
    "tuples": ({"t": (1, (2, 3)), "l": [()]}, {"t": [1, [2, 3]], "l": [[]]}),
    "ordered_dict": (OrderedDict([("z", 1), ("a", 2)]), {"z": 1, "a": 2}),
    "deep": ([[[[[[[[[[["deep"]]]]]]]]]]], [[[[[[[[[[["deep"]]]]]]]]]]]),
    "deepest_allowed": (_nested(v.MAX_JSON_DEPTH), _nested(v.MAX_JSON_DEPTH)),
}


@pytest.mark.parametrize("case", list(ROUND_TRIPS))
def test_E03_payload_round_trips(driver: JobDriver, case: str) -> None:
    """A JSON payload comes back identical (tuples as lists) from enqueue, get and claim."""
    payload, expected = ROUND_TRIPS[case]
    job = driver.enqueue("p", payload)
    assert job.payload == expected
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.payload == expected
    assert claim_one(driver).job.payload == expected


def test_E03_round_trip_keeps_types_and_key_order(driver: JobDriver) -> None:
    """Ints stay ints, floats stay floats, and object key order is kept."""
    job = driver.enqueue("p", {"z": 1, "a": 1.0, "m": [2**70, 2.5], "neg_zero": -0.0, "b": False})
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert list(stored.payload) == ["z", "a", "m", "neg_zero", "b"]
    assert math.copysign(1.0, stored.payload["neg_zero"]) == -1.0
    assert stored.payload["b"] is False
    assert type(stored.payload["z"]) is int
    assert type(stored.payload["a"]) is float
    assert type(stored.payload["m"][0]) is int


REFUSED_PAYLOADS: dict[str, Any] = {
    "nan": {"x": math.nan},
    "inf": [math.inf],
    "neg_inf": -math.inf,
    "int_key": {1: "a"},
    "tuple_key": {("a",): 1},
    "none_key": {None: 1},
    "nul_in_value": "a\x00b",
    "nul_in_key": {"k\x00": 1},
    "nul_in_flat_value": {"s": "a\x00b", "n": 1},
    "surrogate_in_flat_value": {"s": "\ud800"},
    "surrogate_in_flat_key": {"\udfff": 1},
    "unpaired_surrogate": "\ud800",
    "set": {1, 2},
    "frozenset": {"s": frozenset()},
    "bytes": b"raw",
    "bytearray": [bytearray(b"x")],
    "datetime": {"at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
    "decimal": Decimal("1.5"),
    "object": object(),
    "too_deep": _nested(v.MAX_JSON_DEPTH + 1),
    "oversize_ascii": "x" * v.MAX_PAYLOAD_BYTES,
    "oversize_multibyte": "é" * (v.MAX_PAYLOAD_BYTES // 2),
}


@pytest.mark.parametrize("case", list(REFUSED_PAYLOADS))
def test_E03_unstorable_payload_refused(driver: JobDriver, case: str) -> None:
    """A payload some driver could not return identically is refused and nothing is written."""
    with refused("JC_PAYLOAD_INVALID"):
        driver.enqueue("p", REFUSED_PAYLOADS[case])
    assert all_jobs(driver) == []


def test_E03_size_limit_is_exact(driver: JobDriver) -> None:
    """A payload of exactly MAX_PAYLOAD_BYTES of JSON is stored; one byte more is refused."""
    fits = "x" * (v.MAX_PAYLOAD_BYTES - 2)  # the two quotes make it exactly the limit
    with refused("JC_PAYLOAD_INVALID"):
        driver.enqueue("p", fits + "x")
    job = driver.enqueue("p", fits)
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.payload == fits


def test_E03_results_and_error_texts_follow_the_payload_rule(driver: JobDriver) -> None:
    """ack results round-trip like payloads; an unstorable result or error text is refused."""
    job = driver.enqueue("p")
    token = claim_one(driver).token
    with refused("JC_PAYLOAD_INVALID"):
        driver.ack(token, {"x": math.nan})
    with refused("JC_PAYLOAD_INVALID"):
        driver.nack(token, "bad\x00text")
    with refused("JC_PAYLOAD_INVALID"):
        driver.nack(token, ValueError("y" * (v.MAX_ERROR_TEXT_BYTES + 1)))
    unchanged = driver.introspect.get(job.id)
    assert unchanged is not None
    assert (unchanged.state, unchanged.errors, unchanged.result) == (JobState.RUNNING, (), None)
    done = driver.ack(token, {"t": (1, 2), "$k": "日本", "n": 2**64})
    assert done is not None
    assert done.result == {"t": [1, 2], "$k": "日本", "n": 2**64}
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert stored.result == done.result


# --- E04 ------------------------------------------------------------------------------

NOW_PLUS_HOUR = datetime(2030, 1, 1, 13, 0, tzinfo=timezone.utc)

REFUSED_OPTIONS: dict[str, dict[str, Any]] = {
    "priority_bool": {"priority": True},
    "priority_float": {"priority": 1.0},
    "priority_str": {"priority": "1"},
    "priority_nan": {"priority": math.nan},
    "priority_inf": {"priority": math.inf},
    "priority_none": {"priority": None},
    "priority_too_big": {"priority": 2**31},
    "priority_too_small": {"priority": -(2**31) - 1},
    "max_attempts_zero": {"max_attempts": 0},
    "max_attempts_negative": {"max_attempts": -1},
    "max_attempts_bool": {"max_attempts": True},
    "max_attempts_float": {"max_attempts": 2.0},
    "max_attempts_nan": {"max_attempts": math.nan},
    "max_attempts_too_big": {"max_attempts": v.MAX_ATTEMPTS + 1},
    "delay_negative": {"delay": -1},
    "delay_negative_delta": {"delay": timedelta(milliseconds=-1)},
    "delay_nan": {"delay": math.nan},
    "delay_inf": {"delay": math.inf},
    "delay_bool": {"delay": True},
    "delay_str": {"delay": "5"},
    "delay_too_long": {"delay": timedelta(days=40_000)},
    "run_at_naive": {"run_at": datetime(2030, 1, 1, 13, 0)},  # noqa: DTZ001 - the naive value is the point
    "run_at_not_datetime": {"run_at": 1_900_000_000},
    "run_at_and_delay": {"run_at": NOW_PLUS_HOUR, "delay": 5},
    "queue_empty": {"queue": ""},
    "queue_not_str": {"queue": 3},
    "key_empty": {"key": ""},
    "key_too_long": {"key": "k" * (v.MAX_NAME_LENGTH + 1)},
    "key_nul": {"key": "a\x00"},
}


@pytest.mark.parametrize("case", list(REFUSED_OPTIONS))
def test_E04_bad_option_refused(driver: JobDriver, case: str) -> None:
    """A numeric, time or name option out of range or of the wrong type is refused; nothing written."""
    with refused("JC_OPTION_INVALID"):
        driver.enqueue("job", {"ok": True}, **REFUSED_OPTIONS[case])
    assert all_jobs(driver) == []


@pytest.mark.parametrize("name", ["", "n" * (v.MAX_NAME_LENGTH + 1), None, 5, "a\x00b"])
def test_E04_bad_name_refused(driver: JobDriver, name: Any) -> None:
    """An empty, over-long, non-text or NUL-holding job name is refused."""
    with refused("JC_OPTION_INVALID"):
        driver.enqueue(name)
    assert all_jobs(driver) == []


def test_E04_range_edges_accepted(driver: JobDriver) -> None:
    """The extreme in-range values are stored as given."""
    low = driver.enqueue("a", priority=-(2**31), max_attempts=1)
    high = driver.enqueue("a", priority=2**31 - 1, max_attempts=v.MAX_ATTEMPTS, key="k" * v.MAX_NAME_LENGTH)
    assert (low.priority, low.max_attempts) == (-(2**31), 1)
    assert (high.priority, high.max_attempts) == (2**31 - 1, v.MAX_ATTEMPTS)
    assert high.key == "k" * v.MAX_NAME_LENGTH


@pytest.mark.parametrize(
    "options",
    [
        {"limit": True},
        {"limit": 1.0},
        {"lease": True},
        {"lease": math.nan},
        {"lease": -math.inf},
    ],
    ids=["limit_bool", "limit_float", "lease_bool", "lease_nan", "lease_neg_inf"],
)
def test_E04_claim_sizes_refused(driver: JobDriver, options: dict[str, Any]) -> None:
    """Lease and limit sizes follow the same rule: bools, NaN and infinities are refused."""
    job = driver.enqueue("a")
    kwargs: dict[str, Any] = {"worker_id": "w", "limit": 1, "lease": 30, **options}
    with refused("JC_OPTION_INVALID"):
        driver.claim(["default"], **kwargs)
    assert driver.introspect.get(job.id) == job


# --- E05 ------------------------------------------------------------------------------


def test_E05_batch_answers_in_input_order(driver: JobDriver, clock: ManualClock) -> None:
    """enqueue_many takes JobSpecs and mappings and answers each job in input order."""
    now = clock.now()
    jobs = driver.enqueue_many([
        JobSpec(name="c", payload=3, priority=1),
        {"name": "a", "payload": [1], "queue": "q2", "delay": 60},
        JobSpec(name="b", run_at=now + timedelta(seconds=5), max_attempts=2),
    ])
    assert [j.name for j in jobs] == ["c", "a", "b"]
    assert [j.payload for j in jobs] == [3, [1], None]
    assert [j.state for j in jobs] == [JobState.READY, JobState.SCHEDULED, JobState.SCHEDULED]
    assert jobs[1].run_at == now + timedelta(seconds=60)
    assert (jobs[0].priority, jobs[1].queue, jobs[2].max_attempts) == (1, "q2", 2)
    assert len({j.id for j in jobs}) == 3
    for job in jobs:
        assert driver.introspect.get(job.id) == job


def test_E05_a_batch_sharing_its_options_keeps_every_payload(driver: JobDriver) -> None:
    """Items differing only in payload answer and store each one exactly: key order, quotes, nesting, null."""
    payloads: list[Any] = [
        {"b": 1, "a": [2, {"z": None, "y": "]"}]}, 'x,]"}', None, 1.5, "é\u2028", [], {}, [[{}]], True,
    ]
    jobs = driver.enqueue_many([JobSpec(name="u", payload=p, queue="q1", priority=2) for p in payloads])
    assert [j.payload for j in jobs] == payloads
    assert [type(j.payload) for j in jobs] == [type(p) for p in payloads]
    assert list(jobs[0].payload) == ["b", "a"]
    for job in jobs:
        stored = driver.introspect.get(job.id)
        assert stored == job
        assert stored is not None
        assert (stored.queue, stored.priority) == ("q1", 2)
    first = driver.introspect.get(jobs[0].id)
    assert first is not None
    assert list(first.payload) == ["b", "a"]
    assert list(first.payload["a"][1]) == ["z", "y"]


def test_E05_empty_batch_and_generators(driver: JobDriver) -> None:
    """An empty batch answers []; any iterable of specs works."""
    assert driver.enqueue_many([]) == []
    jobs = driver.enqueue_many(JobSpec(name=f"n{i}", payload=i) for i in range(3))
    assert [j.payload for j in jobs] == [0, 1, 2]


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        ({"name": "x", "payload": math.nan}, "JC_PAYLOAD_INVALID"),
        ({"name": "x", "priority": True}, "JC_OPTION_INVALID"),
        ({"name": "x", "max_attempts": 0}, "JC_OPTION_INVALID"),
        ({"name": ""}, "JC_OPTION_INVALID"),
        ({"payload": 1}, "JC_OPTION_INVALID"),
        ({"name": "x", "colour": "red"}, "JC_OPTION_INVALID"),
        ("not a spec", "JC_OPTION_INVALID"),
    ],
    ids=["payload_nan", "priority_bool", "attempts_zero", "empty_name", "no_name", "unknown_key", "not_a_spec"],
)
def test_E05_one_bad_item_refuses_the_batch(driver: JobDriver, bad: Any, code: str) -> None:
    """One refused item refuses the whole batch and nothing is written, keys included."""
    with refused(code):
        driver.enqueue_many([{"name": "ok", "key": "k"}, bad, JobSpec(name="also_ok")])
    assert all_jobs(driver) == []
    assert driver.enqueue("ok", key="k").duplicate is False


@pytest.mark.parametrize(
    ("first", "repeat", "code"),
    [
        ({"priority": 1}, {"priority": True}, "JC_OPTION_INVALID"),
        ({"max_attempts": 2}, {"max_attempts": 2.0}, "JC_OPTION_INVALID"),
        ({"queue": "q"}, {"queue": "q", "run_at": datetime(2030, 1, 1)}, "JC_OPTION_INVALID"),  # noqa: DTZ001 - naive on purpose
        ({"payload": {"n": 1}}, {"payload": {"n": math.inf}}, "JC_PAYLOAD_INVALID"),
    ],
    ids=["priority_true_after_1", "attempts_float_after_int", "naive_run_at", "flat_payload_inf"],
)
def test_E05_an_item_repeating_good_options_is_still_checked(
    driver: JobDriver, first: dict[str, Any], repeat: dict[str, Any], code: str
) -> None:
    """Options equal to an earlier item's (True == 1, 2.0 == 2) are each checked as given."""
    with refused(code):
        driver.enqueue_many([{"name": "x", **first}, {"name": "x", **first}, {"name": "x", **repeat}])
    assert all_jobs(driver) == []


@pytest.mark.parametrize("specs", ["text", {"name": "x"}, 5], ids=["str", "mapping", "int"])
def test_E05_specs_must_be_a_list(driver: JobDriver, specs: Any) -> None:
    """A string, a single mapping or a non-iterable is not a batch."""
    with refused("JC_OPTION_INVALID"):
        driver.enqueue_many(specs)
    assert all_jobs(driver) == []

"""How the MongoDB driver stores jobs: documents, indexes, query plans, URLs and error translation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from jobcore.drivers.mongo import _docs as docs
from jobcore.drivers.mongo._errors import translate
from pymongo import errors as pe

from jobcore import connect
from jobcore.errors import (
    BackendFailure,
    BackendTimeout,
    BackendUnavailable,
    JobNotRemovable,
    PayloadInvalid,
    SchemaOutdated,
    UrlInvalid,
)
from jobcore.records import JobFilter


def _stages(plan: Any) -> list[str]:
    """Every ``stage`` name anywhere in an explain document.

    Real MongoDB nests the classic plan under ``winningPlan`` (or, with the slot-based
    engine, under ``winningPlan.queryPlan``); the stand-in server answers the classic
    shape. Walking the whole document handles both.
    """
    found: list[str] = []
    if isinstance(plan, dict):
        if isinstance(plan.get("stage"), str):
            found.append(plan["stage"])
        for value in plan.values():
            found += _stages(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _stages(value)
    return found


@pytest.mark.parametrize(
    ("query", "sort", "hint"),
    [
        pytest.param(lambda now: docs.due_query(["q1", "q2"], now), docs.CLAIM_ORDER, docs.CLAIM_INDEX, id="due"),
        pytest.param(
            lambda now: docs.lapsed_query(["q1"], now, final=False), docs.CLAIM_ORDER, docs.LEASE_INDEX, id="reclaim",
        ),
        pytest.param(
            lambda now: docs.lapsed_query(None, now, final=True), [("lease_expires_at", 1)], docs.LEASE_INDEX,
            id="burial",
        ),
    ],
)
def test_claim_queries_use_an_index(driver: MongoDriver, clock: Any, query: Any, sort: Any, hint: str) -> None:
    """Each claim step's findAndModify, exactly as the driver builds it, plans an index scan."""
    driver.enqueue_many([{"name": "a", "queue": q, "priority": p} for q in ("q1", "q2") for p in range(3)])
    driver.claim(["q1"], worker_id="w", limit=2, lease=1)
    explained = driver._jobs.database.command(
        "explain",
        {
            "findAndModify": driver._jobs.name, "query": query(clock.now()), "sort": dict(sort), "hint": hint,
            "update": {"$set": {"state": "running"}},
        },
        verbosity="queryPlanner",
    )
    stages = _stages(explained.get("queryPlanner", explained))
    assert "COLLSCAN" not in stages
    assert "IXSCAN" in stages


def test_migrate_creates_the_indexes_and_is_idempotent(driver: MongoDriver) -> None:
    """migrate() creates every index, the live key one partial and unique, and can run again."""
    driver.migrate()
    found = driver._jobs.index_information()
    for model in docs.INDEXES:
        assert model.document["name"] in found
    live = found["jc_live_key"]
    assert live["unique"] is True
    assert dict(live["partialFilterExpression"]) == {"live_key": {"$exists": True}}


def test_migrate_refuses_a_conflicting_index(driver: MongoDriver) -> None:
    """An index of the same name with another shape is SchemaOutdated, not a raw server error."""
    driver._jobs.drop_index(docs.CLAIM_INDEX)
    driver._jobs.create_index([("queue", 1)], name=docs.CLAIM_INDEX)
    with pytest.raises(SchemaOutdated) as caught:
        driver.migrate()
    assert caught.value.code == "JC_SCHEMA_OUTDATED"


def test_a_store_from_a_newer_jobcore_is_refused(make: Any) -> None:
    """A schema version above this jobcore's refuses use instead of corrupting the store."""
    first = make()
    first._meta.update_one({"_id": "schema"}, {"$set": {"version": docs.SCHEMA_VERSION + 1}})
    second = MongoDriver(first._client, database=first._jobs.database.name, clock=first.clock)
    with pytest.raises(SchemaOutdated):
        second.enqueue("a")
    assert first._jobs.count_documents({}) == 0


def test_payload_is_stored_as_json_text(driver: MongoDriver) -> None:
    """$-keys, dotted keys, ints beyond int64 and unicode round-trip; the document holds JSON text."""
    payload = {"$where": "1", "a.b": {"$gt": ""}, "big": 2**80, "neg": -(2**70), "nested": [[1, [2.5]], "ü😀"]}
    job = driver.enqueue("a", payload)
    raw = driver._jobs.find_one({"_id": int(job.id)})
    assert isinstance(raw["payload"], str)
    assert driver.introspect.get(job.id).payload == payload
    claimed = driver.claim(["default"], worker_id="w", lease=10).claimed[0]
    done = driver.ack(claimed.token, {"$set": {"x": 1}, "k.k": 2**65})
    assert done.result == {"$set": {"x": 1}, "k.k": 2**65}
    assert isinstance(driver._jobs.find_one({"_id": int(job.id)})["result"], str)


def test_user_strings_never_become_operators(driver: MongoDriver) -> None:
    """Names, worker ids and error texts beginning with $ are stored as plain text."""
    driver.enqueue("$name", queue="$queue", key="$key")
    claimed = driver.claim(["$queue"], worker_id="$worker", lease=10).claimed[0]
    assert claimed.job.worker_id == "$worker"
    job = driver.nack(claimed.token, "$concat")
    assert job.last_error.message == "$concat"
    assert job.name == "$name"


def test_refused_payload_writes_nothing(driver: MongoDriver) -> None:
    """A payload validate refuses never reaches the server."""
    with pytest.raises(PayloadInvalid):
        driver.enqueue_many([{"name": "a"}, {"name": "b", "payload": {1: "x"}}])
    assert driver._jobs.count_documents({}) == 0


def test_malformed_ids_answer_none(driver: MongoDriver) -> None:
    """get() of ids this driver cannot have made answers None, never a server error."""
    driver.enqueue("a")
    for bad in ("", "x", "01", "1.0", "-1", "99999999999999999999", "٣", "1 "):
        assert driver.introspect.get(bad) is None
    assert driver.introspect.remove("abc") is None


def test_id_prefix_filter(driver: MongoDriver) -> None:
    """id_prefix matches the decimal text of ids, through _id ranges."""
    jobs = driver.enqueue_many([{"name": "a"} for _ in range(12)])
    ids = {j.id for j in jobs}
    page = driver.introspect.list(JobFilter(id_prefix="1"))
    assert {j.id for j in page.jobs} == {i for i in ids if i.startswith("1")}
    assert driver.introspect.list(JobFilter(id_prefix="0")).jobs == ()


def test_enqueue_order_is_one_counter(driver: MongoDriver) -> None:
    """A batch takes consecutive sequence numbers from one counter document."""
    first = driver.enqueue_many([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    later = driver.enqueue("d")
    assert [int(j.id) for j in first] == [int(first[0].id) + i for i in range(3)]
    assert int(later.id) == int(first[-1].id) + 1


def test_remove_refuses_running(driver: MongoDriver) -> None:
    """remove() of a running job is refused and the job stays."""
    job = driver.enqueue("a")
    driver.claim(["default"], worker_id="w", lease=10)
    with pytest.raises(JobNotRemovable):
        driver.introspect.remove(job.id)
    assert driver.introspect.get(job.id) is not None


def test_from_url_takes_the_database_from_the_path(server: Any, clock: Any) -> None:
    """connect('mongodb://host/db') builds a MongoDriver on database db."""
    base, _, query = server.url.partition("?")
    url = f"{base.rstrip('/')}/jc_url_test?{query}" if query else f"{base.rstrip('/')}/jc_url_test"
    driver = connect(url, clock=clock)
    try:
        assert isinstance(driver, MongoDriver)
        assert driver._jobs.database.name == "jc_url_test"
        driver.enqueue("a")
        assert driver.introspect.list().jobs[0].name == "a"
    finally:
        driver._client.drop_database("jc_url_test")
        driver.close()


def test_from_url_refuses_garbage() -> None:
    """A URL pymongo cannot parse is JC_URL_INVALID."""
    with pytest.raises(UrlInvalid):
        MongoDriver.from_url("mongodb://")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (pe.ServerSelectionTimeoutError("no primary"), BackendUnavailable),
        (pe.AutoReconnect("reset"), BackendUnavailable),
        (pe.ConnectionFailure("refused"), BackendUnavailable),
        (pe.NotPrimaryError("stepped down"), BackendUnavailable),
        (pe.NetworkTimeout("slow"), BackendTimeout),
        (pe.ExecutionTimeout("maxTimeMS", 50), BackendTimeout),
        (pe.OperationFailure("bad", 2), BackendFailure),
        (pe.DuplicateKeyError("dup", 11000), BackendFailure),
    ],
)
def test_translation_of_pymongo_errors(exc: pe.PyMongoError, expected: type[Exception]) -> None:
    """Every pymongo error maps to one coded jobcore error."""
    assert type(translate(exc, "claim")) is expected


def test_lease_store_counts_slots(driver: MongoDriver, clock: Any) -> None:
    """Slots of one key are counted in one document; expired slots free their place."""
    assert driver.leases.acquire("k", 2, "a", 5)
    assert driver.leases.acquire("k", 2, "b", 5)
    assert not driver.leases.acquire("k", 2, "c", 5)
    assert driver.leases.acquire("k", 2, "a", 5)  # re-acquire by a holder is idempotent
    clock.advance(timedelta(seconds=6))
    assert not driver.leases.renew("k", "a", 5)
    assert driver.leases.acquire("k", 2, "c", 5)
    assert driver.leases.release("k", "c")
    assert not driver.leases.release("k", "c")


def test_an_id_clash_is_a_backend_failure_not_a_duplicate(driver: MongoDriver) -> None:
    """Only the live-key index answers 'duplicate'; any other unique clash surfaces as JC_DB_ERROR."""
    driver.enqueue("a", key="k")
    driver._meta.update_one({"_id": "seq"}, {"$set": {"value": 0}})  # a counter restored from an old backup
    with pytest.raises(BackendFailure) as caught:
        driver.enqueue("b")
    assert isinstance(caught.value.__cause__, pe.DuplicateKeyError)

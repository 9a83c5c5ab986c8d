"""How the MongoDB driver stores jobs: documents, indexes, query plans, URLs and error translation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.mongo import AsyncMongoDriver, MongoDriver
from jobcore.drivers.mongo import _docs as docs
from jobcore.drivers.mongo._errors import translate
from pymongo import errors as pe

from jobcore import connect
from jobcore.errors import (
    BackendFailure,
    BackendTimeout,
    BackendUnavailable,
    JobNotRemovable,
    OptionInvalid,
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


def _explain(driver: MongoDriver, query: dict[str, Any], sort: Any, hint: str | None) -> list[str]:
    command: dict[str, Any] = {
        "findAndModify": driver._jobs.name, "query": query, "sort": dict(sort), "update": {"$set": {"state": "x"}},
    }
    if hint is not None:
        command["hint"] = hint
    explained = driver._jobs.database.command("explain", command, verbosity="queryPlanner")
    return _stages(explained.get("queryPlanner", explained))


def test_claim_query_uses_the_claim_index(driver: MongoDriver, clock: Any) -> None:
    """The due-job claim, exactly as the driver sends it (findAndModify, sort, hint), plans an index scan."""
    driver.enqueue_many([{"name": "a", "queue": q, "priority": p} for q in ("q1", "q2") for p in range(3)])
    stages = _explain(driver, docs.due_query(["q1", "q2"], clock.now()), docs.CLAIM_ORDER, docs.CLAIM_INDEX)
    assert "COLLSCAN" not in stages
    assert "IXSCAN" in stages


@pytest.mark.parametrize("final", [None, True, False], ids=["claim", "burial", "rescue"])
def test_lapsed_lease_queries_have_an_index(driver: MongoDriver, clock: Any, final: bool | None) -> None:
    """jc_lease serves the lapsed-lease queries of claim, burial and rescue.

    The driver leaves these to the planner (they match running jobs only, and MongoDB's
    planner picks jc_lease); the stand-in server collection-scans them unhinted, so this
    checks the index can serve the query rather than what one server's planner chose.
    """
    driver.enqueue_many([{"name": "a"} for _ in range(4)])
    driver.claim(["default"], worker_id="w", limit=2, lease=1)
    query = docs.lapsed_query(["default"] if final is None else None, clock.now(), final=final)
    stages = _explain(driver, query, docs.CLAIM_ORDER, docs.LEASE_INDEX)
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
    """A schema version above this jobcore's, not declared compatible with it, refuses use instead of
    corrupting the store (a record without compatible_from needs its own version's code)."""
    first = make()
    first._meta.update_one(
        {"_id": "schema"}, {"$set": {"version": docs.SCHEMA_VERSION + 1}, "$unset": {"compatible_from": ""}}
    )
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
    driver = connect(url, clock=clock, auto_migrate=True)
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


@pytest.mark.parametrize(("cls", "client"), [(MongoDriver, "MongoClient"), (AsyncMongoDriver, "AsyncMongoClient")])
def test_a_database_name_mongodb_would_misread_is_refused_before_a_client_exists(
    cls: Any, client: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A newline at the end of a URL read from a secret made PyMongo use database "app\\n":
    another database than the enqueuers', silently (MongoDB takes the name). Now such a name
    is refused, from the URL's path or the ``database`` option, with no client made."""
    made: list[object] = []
    module = "_store" if cls is MongoDriver else "_store_async"
    monkeypatch.setattr(f"jobcore.drivers.mongo.{module}.{client}", lambda *a, **k: made.append(a))
    with pytest.raises(UrlInvalid) as from_url:
        cls.from_url("mongodb://127.0.0.1:1/app\n")
    assert "'app\\n'" in from_url.value.cause
    assert "it holds '\\n'" in from_url.value.cause
    assert "strip it" in from_url.value.fix
    for name, problem in [("a b", "it holds ' '"), ("we$ird", "it holds '$'"), ("x" * 64, "64 bytes")]:
        with pytest.raises(OptionInvalid) as refused:
            cls("mongodb://127.0.0.1:1/", database=name)
        assert problem in refused.value.cause
    assert made == []


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
        (pe.WriteConcernError("Primary stepped down while waiting for replication", 189), BackendUnavailable),
        (pe.OperationFailure("Interrupted due to repl state change", 11602), BackendUnavailable),
        (pe.OperationFailure("not primary", 10107), BackendUnavailable),
        (pe.OperationFailure("shutdown in progress", 91), BackendUnavailable),
        (pe.OperationFailure("x", 262, {"errorLabels": ["RetryableWriteError"]}), BackendUnavailable),
        (pe.OperationFailure("x", 251, {"errorLabels": ["TransientTransactionError"]}), BackendUnavailable),
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


def test_a_full_claim_still_buries_and_reclaims_no_more(driver: MongoDriver, clock: Any) -> None:
    """With the claim full after one reclaim, a lapsed final-attempt job is still buried and
    the other lapsed job waits for the next claim (C07, C08)."""
    first = driver.enqueue("a", priority=5, max_attempts=3)
    second = driver.enqueue("a", priority=4, max_attempts=3)
    final = driver.enqueue("a", priority=1, max_attempts=1)
    driver.claim(["default"], worker_id="crashed", limit=3, lease=1)
    clock.advance(seconds=2)
    result = driver.claim(["default"], worker_id="w", limit=1, lease=60)
    assert [c.job.id for c in result.claimed] == [first.id]
    assert [j.id for j in result.buried] == [final.id]
    assert result.buried[0].last_error.type == "LeaseLapsedFinalAttempt"
    assert driver.introspect.get(second.id).worker_id == "crashed"
    again = driver.claim(["default"], worker_id="w", limit=5, lease=60)
    assert [c.job.id for c in again.claimed] == [second.id]
    assert again.buried == ()
    assert [e.type for e in again.claimed[0].job.errors] == ["LeaseExpired"]

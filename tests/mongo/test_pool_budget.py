"""The MongoDB driver bounds its client's pool (PyMongo's own default is 100 per server), and its
capability checks follow topology and server version as docs/drivers/mongo.md says."""

from __future__ import annotations

from typing import Any

import pytest
from jobcore.drivers.mongo import DEFAULT_POOL_MAX, MongoDriver, capabilities_of
from pymongo.database import Database

from jobcore.cli.worker import WORKER_CONNECTIONS, connection_budget
from jobcore.errors import NotSupported, OptionInvalid, UrlInvalid

# No server is needed: a MongoClient connects lazily, and these read its options.
_URI = "mongodb://127.0.0.1:9/jc"


@pytest.mark.parametrize(
    ("url", "options", "expected"),
    [
        (_URI, {}, DEFAULT_POOL_MAX),
        (_URI, {"pool_max": 3}, 3),
        (f"{_URI}?pool_max=5", {}, 5),
        (f"{_URI}?maxPoolSize=7", {"pool_max": 3}, 7),  # the URI's own PyMongo option stands
        (f"{_URI}?MAXPOOLSIZE=7", {}, 7),
        (_URI, connection_budget(_URI, None), WORKER_CONNECTIONS),  # what `jobcore worker` passes
    ],
    ids=["default", "keyword", "url-option", "uri-maxPoolSize-wins", "any-case", "worker-budget"],
)
def test_the_client_pool_is_bounded(url: str, options: dict[str, Any], expected: int) -> None:
    driver = MongoDriver.from_url(url, **options)
    try:
        assert driver._client.options.pool_options.max_pool_size == expected
    finally:
        driver.close()


@pytest.mark.parametrize("value", [0, -2, True, "4", 2.5, None])
def test_a_pool_size_that_is_not_a_positive_int_is_refused(value: Any) -> None:
    with pytest.raises(OptionInvalid, match="pool_max"):
        MongoDriver(_URI, pool_max=value)


def test_a_pool_size_in_the_url_that_is_not_an_int_is_refused() -> None:
    with pytest.raises(UrlInvalid, match="pool_max"):
        MongoDriver.from_url(f"{_URI}?pool_max=many")
    with pytest.raises(OptionInvalid, match="pool_max=0"):
        MongoDriver.from_url(f"{_URI}?pool_max=0")


# -- capabilities by topology and server version (docs/drivers/mongo.md, "At scale") ----------------


@pytest.mark.parametrize(
    ("hello", "extra"),
    [
        ({"maxWireVersion": 21}, set()),  # standalone 7.0
        ({"setName": "rs0", "maxWireVersion": 6}, {"notify", "finish_notify"}),  # rs 3.6: change streams, no txn
        ({"setName": "rs0", "maxWireVersion": 7}, {"notify", "finish_notify", "transactional_enqueue"}),
        ({"msg": "isdbgrid", "maxWireVersion": 7}, {"notify", "finish_notify"}),  # mongos 4.0: no sharded txn
        ({"msg": "isdbgrid", "maxWireVersion": 8}, {"notify", "finish_notify", "transactional_enqueue"}),
        ({"setName": "rs0"}, set()),  # no version answered: nothing assumed
    ],
    ids=["standalone", "rs-3.6", "rs-4.0", "mongos-4.0", "mongos-4.2", "no-version"],
)
def test_capabilities_follow_topology_and_version(hello: dict[str, Any], extra: set[str]) -> None:
    base = {"shared_store", "ack_landed_only", "deferred_start", "dependencies", "heartbeat_many"}
    assert capabilities_of(hello) == frozenset(base | extra)


def test_a_sharded_jobs_collection_is_refused_through_mongos(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through mongos the driver reads collStats; a sharded jobs collection answers JC_NOT_SUPPORTED naming the fix."""
    driver = MongoDriver(_URI)
    try:
        monkeypatch.setattr(driver, "_hello", lambda: {"msg": "isdbgrid", "maxWireVersion": 21})
        answers = {"sharded": True}
        monkeypatch.setattr(Database, "command", lambda self, name, *a, **k: dict(answers))
        with pytest.raises(NotSupported, match="is sharded") as caught:
            driver._check_unsharded()
        assert "movePrimary" in caught.value.fix
        answers["sharded"] = False
        driver._check_unsharded()  # unsharded: fine
        monkeypatch.setattr(driver, "_hello", lambda: {"setName": "rs0", "maxWireVersion": 21})
        answers["sharded"] = True
        driver._check_unsharded()  # not mongos: not asked
    finally:
        driver.close()

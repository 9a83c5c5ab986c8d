"""An enqueue whose insert was carried out and whose answer was lost, made for real.

The driver talks to the server through the parity suite's TCP proxy, whose
``lose_next_reply(after=1)`` lets the sequence counter's answer through and resets the
connection when the insert's answer comes back. The jobs are counted on a client of the
test's own.

* On a replica set PyMongo retries the insert. ``mongod`` recognises the retry; the
  MongoDB-wire test server does not and refuses the second insert on ``_id``. On the tree
  before (7885696) that answered ``JC_DB_ERROR`` "MongoDB refused insert jobs
  (DuplicateKeyError ...)" for a job that was stored. Now either server answers the job.
* A standalone server retries nothing: the call answers ``JC_DB_UNAVAILABLE``, whose fix
  said "the call may be retried" before; now it says a retried enqueue without a key can
  store the job twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from jobcore.parity._proxy import Proxy
from jobcore.parity.plugin import START
from pymongo import MongoClient
from pymongo.uri_parser import parse_uri

from fixtures import mongo as fx
from jobcore.clock import ManualClock
from jobcore.errors import MAY_HAVE_LANDED, BackendFailure, BackendUnavailable

ENQUEUES: dict[str, Callable[[MongoDriver], Any]] = {
    "enqueue": lambda d: d.enqueue("charge", {"invoice": 7}),
    "enqueue_many": lambda d: d.enqueue_many([{"name": "charge", "payload": {"invoice": n}} for n in range(3)]),
}


@pytest.fixture(params=["session", "standalone"])
def served(request: pytest.FixtureRequest, server: fx.MongoServer) -> Iterator[tuple[str, bool]]:
    """``(url, retries)``: the session's server, or a standalone stand-in of this test's own;
    ``retries``: whether PyMongo retries writes there (a replica set or a mongos)."""
    if request.param == "session":
        process, url = None, server.url
    else:
        if fx.secantus_binary() is None:
            pytest.skip("secantusd-py is not installed; the session's server covers its kind")
        process, url, _ = fx.start_secantus(standalone=True)
    with MongoClient(url, serverSelectionTimeoutMS=15_000) as client:
        hello = client.admin.command("hello")
    try:
        yield url, "setName" in hello or hello.get("msg") == "isdbgrid"
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=15)


@pytest.fixture
def lossy(served: tuple[str, bool]) -> Iterator[tuple[MongoDriver, Proxy, MongoClient[Any], bool]]:
    """A migrated driver through a proxy (one pooled connection), the proxy, a direct client, ``retries``."""
    url, retries = served
    host, port = parse_uri(url)["nodelist"][0]
    proxy = Proxy(host, port).start()
    database = f"jc_test_{uuid.uuid4().hex[:16]}"
    via = f"mongodb://{proxy.host}:{proxy.port}/?directConnection=true&maxPoolSize=1&heartbeatFrequencyMS=60000"
    driver = MongoDriver(via, database=database, clock=ManualClock(START), call_timeout=5.0)
    direct: MongoClient[Any] = MongoClient(url, serverSelectionTimeoutMS=15_000)
    try:
        driver.migrate()
        yield driver, proxy, direct, retries
    finally:
        driver.close()
        proxy.close()
        direct.drop_database(database)
        direct.close()


def _stored(direct: MongoClient[Any], driver: MongoDriver) -> int:
    return int(direct[driver._jobs.database.name][driver._jobs.name].count_documents({"name": "charge"}))


@pytest.mark.parametrize("call", sorted(ENQUEUES))
def test_an_enqueue_whose_insert_answer_was_lost_is_stored_once_and_says_so(
    lossy: tuple[MongoDriver, Proxy, MongoClient[Any], bool], call: str
) -> None:
    """Retried by PyMongo: the stored job is answered. Not retried: the fix warns that a retry
    without a key would store it twice. Either way the job is stored exactly once."""
    driver, proxy, direct, retries = lossy
    enqueue = ENQUEUES[call]
    enqueue(driver)  # the connection opened and warm
    per_call = _stored(direct, driver)
    proxy.lose_next_reply(after=1)  # the counter's answer goes through, the insert's is lost
    if retries:
        answered = enqueue(driver)
        jobs = answered if isinstance(answered, list) else [answered]
        assert [j.state.value for j in jobs] == ["ready"] * per_call
        assert all(direct[driver._jobs.database.name][driver._jobs.name].find_one({"_id": int(j.id)}) for j in jobs)
    else:
        with pytest.raises(BackendUnavailable) as info:
            enqueue(driver)
        assert MAY_HAVE_LANDED in info.value.fix
        assert "lost during insert jobs" in info.value.cause
    assert proxy.replies_lost == 1
    assert _stored(direct, driver) == 2 * per_call


def test_an_id_clash_with_another_job_is_not_taken_for_a_landed_insert(
    lossy: tuple[MongoDriver, Proxy, MongoClient[Any], bool],
) -> None:
    """A document already holding the next id (a counter set back by a restore) is not ours: refused, not answered."""
    driver, _, direct, _ = lossy
    job = driver.enqueue("charge", {"invoice": 1})
    jobs = direct[driver._jobs.database.name][driver._jobs.name]
    stranger = dict(jobs.find_one({"_id": int(job.id)}) or {}, _id=int(job.id) + 1, payload='{"invoice":2}')
    jobs.insert_one(stranger)
    with pytest.raises(BackendFailure):
        driver.enqueue("charge", {"invoice": 3})
    assert _stored(direct, driver) == 2

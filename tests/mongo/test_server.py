"""The MongoDB driver against a live server: concurrency, transactions, change streams, faults."""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from pymongo import MongoClient
from pymongo import errors as pe

from fixtures import mongo as fx
from jobcore.errors import BackendUnavailable, NotSupported, OptionInvalid


def _in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    barrier = threading.Barrier(count)

    def run(index: int) -> Any:
        barrier.wait()
        return work(index)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


@pytest.fixture
def clients(server: fx.MongoServer) -> Any:
    """Four independent clients, so concurrent claimers really race on separate connections."""
    made = [MongoClient(server.url) for _ in range(4)]
    yield made
    for client in made:
        client.close()


def _peers(driver: MongoDriver, clients: list[Any]) -> list[MongoDriver]:
    name = driver._jobs.database.name
    return [MongoDriver(c, database=name, clock=driver.clock) for c in clients]


def test_concurrent_claimers_never_share_a_job(driver: MongoDriver, clients: list[Any]) -> None:
    """Four claimers racing over the same jobs each get distinct ones, and all get claimed (C03)."""
    driver.enqueue_many([{"name": "a", "priority": i % 3} for i in range(16)])
    peers = _peers(driver, clients)

    def work(index: int) -> list[str]:
        got: list[str] = []
        while True:
            batch = peers[index].claim(["default"], worker_id=f"w{index}", limit=2, lease=60).claimed
            if not batch:
                return got
            got += [c.job.id for c in batch]

    taken = [job for got in _in_threads(4, work) for job in got]
    assert len(taken) == 16
    assert len(set(taken)) == 16


def test_concurrent_claimers_bury_each_job_once(driver: MongoDriver, clients: list[Any], clock: Any) -> None:
    """Lapsed final-attempt jobs are buried once, reported to exactly one of the racing claims (C08)."""
    driver.enqueue_many([{"name": "a", "max_attempts": 1} for _ in range(6)])
    driver.claim(["default"], worker_id="crashed", limit=6, lease=1)
    clock.advance(seconds=2)
    peers = _peers(driver, clients)
    results = _in_threads(4, lambda i: peers[i].claim(["default"], worker_id=f"w{i}", lease=60))
    buried = Counter(job.id for result in results for job in result.buried)
    assert len(buried) == 6
    assert set(buried.values()) == {1}
    assert all(not result.claimed for result in results)


def test_concurrent_reclaim_hands_a_lapsed_job_to_one_claimer(
    driver: MongoDriver, clients: list[Any], clock: Any
) -> None:
    """A lapsed job with attempts left is reclaimed by exactly one racing claimer (C07)."""
    job = driver.enqueue("a")
    old = driver.claim(["default"], worker_id="old", lease=1).claimed[0]
    clock.advance(seconds=2)
    peers = _peers(driver, clients)
    results = _in_threads(4, lambda i: peers[i].claim(["default"], worker_id=f"w{i}", lease=60))
    winners = [c for r in results for c in r.claimed]
    assert [c.job.id for c in winners] == [job.id]
    assert winners[0].job.claim_no == 2
    assert driver.ack(old.token) is None
    assert driver.ack(winners[0].token) is not None


def test_racing_enqueues_with_one_key_insert_once(driver: MongoDriver, clients: list[Any]) -> None:
    """Concurrent enqueues of one key insert one job; the others answer it as a duplicate (E02)."""
    peers = _peers(driver, clients)
    jobs = _in_threads(4, lambda i: peers[i].enqueue("send", {"n": i}, key="k"))
    assert len({j.id for j in jobs}) == 1
    assert sum(not j.duplicate for j in jobs) == 1
    assert driver._jobs.count_documents({"key": "k"}) == 1


def test_racing_lease_acquires_respect_the_limit(driver: MongoDriver, clients: list[Any]) -> None:
    """Concurrent acquires of one key never hand out more than its limit of slots (K01)."""
    peers = _peers(driver, clients)
    answers = _in_threads(4, lambda i: peers[i].leases.acquire("conc", 2, f"h{i}", 60))
    assert sum(answers) == 2


def test_enqueue_joins_a_committed_transaction(driver: MongoDriver) -> None:
    """enqueue(session=...) writes inside the caller's transaction: visible only once committed."""
    if "transactional_enqueue" not in driver.capabilities:
        pytest.skip("the server offers no transactions")
    client = driver._client
    orders = driver._jobs.database["orders"]
    with client.start_session() as session, session.start_transaction():
        orders.insert_one({"_id": 1}, session=session)
        job = driver.enqueue("ship", {"order": 1}, session=session)
        batch = driver.enqueue_many([{"name": "mail"}, {"name": "bill"}], session=session)
        assert driver.introspect.get(job.id) is None
    assert driver.introspect.get(job.id) is not None
    assert all(driver.introspect.get(j.id) is not None for j in batch)


def test_enqueue_in_an_aborted_transaction_leaves_nothing(driver: MongoDriver) -> None:
    """An aborted transaction takes its enqueued jobs with it."""
    if "transactional_enqueue" not in driver.capabilities:
        pytest.skip("the server offers no transactions")
    with driver._client.start_session() as session:
        session.start_transaction()
        job = driver.enqueue("ship", session=session, key="order-2")
        session.abort_transaction()
    assert driver.introspect.get(job.id) is None
    assert not driver.enqueue("ship", key="order-2").duplicate


def test_a_session_of_another_client_is_refused(driver: MongoDriver, server: fx.MongoServer) -> None:
    """A session from a client the driver does not use is refused before anything is written."""
    with MongoClient(server.url) as other, other.start_session() as session, pytest.raises(OptionInvalid):
        driver.enqueue("a", session=session)
    assert driver._jobs.count_documents({}) == 0


def test_change_stream_wakes_subscribers(driver: MongoDriver) -> None:
    """subscribe() calls back when a job of a watched queue becomes ready (not for other queues or
    future jobs); subscriptions share one stream, and close() ends each on its own."""
    if "notify" not in driver.capabilities:
        pytest.skip("the server offers no change streams")
    woken: list[tuple[str, str]] = []
    events = {"mail": threading.Event(), "sms": threading.Event()}

    def listener(name: str) -> Callable[[str], None]:
        def callback(queue: str) -> None:
            woken.append((name, queue))
            events[name].set()

        return callback

    mail = driver.subscribe(["mail"], listener("mail"))
    sms = driver.subscribe(["sms", "mail"], listener("sms"))
    assert driver._hub is not None
    try:
        # The stream is open once subscribe() returns: the very next change is seen.
        driver.enqueue("other", queue="elsewhere")
        driver.enqueue("later", queue="mail", delay=60)
        driver.enqueue("send", queue="mail")
        assert events["mail"].wait(10)
        assert events["sms"].wait(10)
        assert sorted(woken) == [("mail", "mail"), ("sms", "mail")]
        mail.close()
        events["sms"].clear()
        driver.enqueue("text", queue="sms")
        assert events["sms"].wait(10)
        assert ("sms", "sms") in woken
        assert len(woken) == 3
    finally:
        mail.close()
        sms.close()
    assert driver._hub is None  # the last close stopped the stream
    events["mail"].clear()
    driver.enqueue("send", queue="mail")
    assert not events["mail"].wait(1.0)
    assert len(woken) == 3


@pytest.fixture
def standalone(tmp_path: Any) -> Any:
    """A second stand-in server that answers hello as a standalone mongod (no setName)."""
    if fx.secantus_binary() is None:
        pytest.skip("secantusd-py is not installed")
    process, url, storage = fx.start_secantus(storage=str(tmp_path / "standalone"), standalone=True)
    yield url
    process.terminate()
    process.wait(timeout=15)
    shutil.rmtree(storage, ignore_errors=True)


def test_standalone_server_offers_no_notify_or_transactions(standalone: str, clock: Any) -> None:
    """On a standalone server: no notify, no transactional enqueue, a silent subscription; jobs and wait still work."""
    with MongoClient(standalone) as client:
        driver = MongoDriver(client, database="jc_standalone", clock=clock, auto_migrate=True)
        assert driver.capabilities == frozenset(
            {"shared_store", "ack_landed_only", "deferred_start", "dependencies", "heartbeat_many"}
        )
        fired: list[str] = []
        driver.subscribe(["default"], fired.append).close()
        with client.start_session() as session:
            session.start_transaction()
            with pytest.raises(NotSupported):
                driver.enqueue("a", session=session)
            session.abort_transaction()
        job = driver.enqueue("a")
        claimed = driver.claim(["default"], worker_id="w", lease=5).claimed[0]
        assert claimed.job.id == job.id
        assert fired == []
        # no change streams: wait (A02) polls, and still answers the job once acked
        timer = threading.Timer(0.3, lambda: driver.ack(claimed.token, "polled"))
        timer.start()
        assert driver.wait(job.id, timeout=30, poll=0.1).result == "polled"
        timer.join()
        driver.close()


def test_server_restart_surfaces_as_unavailable_then_recovers(tmp_path: Any, clock: Any) -> None:
    """A stopped server is JC_DB_UNAVAILABLE (pymongo's error on __cause__); after a restart the same
    driver works, wake-ups included."""
    if fx.secantus_binary() is None:
        pytest.skip("secantusd-py is not installed")
    port, storage = fx.free_port(), str(tmp_path / "restart")
    process, url, _ = fx.start_secantus(port, storage)
    client: MongoClient[Any] = MongoClient(url, timeoutMS=1500)  # its own bound: each call, finding a server too
    driver = MongoDriver(client, database="jc_restart", clock=clock, auto_migrate=True)
    woken = threading.Event()
    subscription = driver.subscribe(["default"], lambda queue: woken.set()) if "notify" in driver.capabilities else None
    try:
        job = driver.enqueue("survives")
        process.terminate()
        process.wait(timeout=15)
        with pytest.raises(BackendUnavailable) as caught:
            driver.claim(["default"], worker_id="w", lease=5)
        assert isinstance(caught.value.__cause__, pe.PyMongoError)
        assert caught.value.code == "JC_DB_UNAVAILABLE"
        process, _, _ = fx.start_secantus(port, storage)
        claimed = driver.claim(["default"], worker_id="w", lease=5).claimed
        assert [c.job.id for c in claimed] == [job.id]
        assert driver.ack(claimed[0].token) is not None
        if subscription is not None:  # the change stream reopened by itself
            woken.clear()
            deadline = time.monotonic() + 20
            while not woken.is_set() and time.monotonic() < deadline:
                driver.enqueue("wakes")
                woken.wait(1)
            assert woken.is_set()
    finally:
        driver.close()
        client.close()
        process.terminate()
        process.wait(timeout=15)


def test_key_race_between_transactions_is_retryable(driver: MongoDriver) -> None:
    """Two transactions enqueueing one key: the loser gets the server's transient write conflict,
    untranslated so with_transaction retries it, and the retry answers the holder as a duplicate."""
    if "transactional_enqueue" not in driver.capabilities:
        pytest.skip("the server offers no transactions")
    client = driver._client
    with client.start_session() as first, client.start_session() as second:
        first.start_transaction()
        second.start_transaction()
        holder = driver.enqueue("a", key="k", session=first)
        with pytest.raises(pe.PyMongoError) as caught:
            driver.enqueue("a", key="k", session=second)
        assert caught.value.has_error_label("TransientTransactionError")
        first.commit_transaction()
        second.abort_transaction()
        again = second.with_transaction(lambda s: driver.enqueue("a", key="k", session=s))
    assert again.duplicate
    assert again.id == holder.id


def test_racing_batches_with_one_key_insert_it_once(driver: MongoDriver, clients: list[Any]) -> None:
    """Concurrent enqueue_many batches sharing a key: the key's job is inserted once, the rest of each batch lands."""
    peers = _peers(driver, clients)
    batches = _in_threads(
        4, lambda i: peers[i].enqueue_many([{"name": "own", "payload": i}, {"name": "send", "key": "k"}])
    )
    shared = {batch[1].id for batch in batches}
    assert len(shared) == 1
    assert sum(not batch[1].duplicate for batch in batches) == 1
    assert len({batch[0].id for batch in batches}) == 4
    assert driver._jobs.count_documents({}) == 5

"""The MongoDB driver's command budget (issue 22): round trips and documents written per call.

The stand-in server the tests run on (secantusdb) is far slower than ``mongod``, so the
driver's cost is stated in units that do not depend on its speed: the commands the driver
sends (one command is one round trip) and the documents those commands wrote, both taken
from PyMongo's command monitoring (``pymongo.monitoring.CommandListener``) on a client of
the test's own. Documents written are read from each command's reply as the server gave
it (``n`` of an insert, ``nModified`` of an update, ``lastErrorObject.n`` of a
``findAndModify`` that changed a document), never from what the driver meant to do.

Budgets (they are what ``docs/benchmarks.md`` lists beside PostgreSQL's statements per job):

* ``enqueue``: 2 round trips (the sequence counter's ``$inc``, the insert), 2 documents
  written (the counter and the job);
* ``enqueue_many`` of N jobs without keys: 2 round trips, N + 1 documents written;
* ``claim(limit=B)`` of B due jobs: B + 1 round trips (one probe for lapsed leases, then
  one ``findAndModify`` per job taken), B documents written;
* ``ack_many`` of B > 1 jobs: 2 round trips (one unordered bulk update, one read of the
  settle marks), B documents written; of one job: 1 round trip, 1 document;
* so a claimed-and-acked job costs ``(B + 3) / B`` round trips for B > 1 (3 at B = 1) and 2
  documents written;
* ``start`` of B held claims and ``heartbeat_many`` of B leases: 1 round trip, B documents
  (one more round trip, a read, when only some of the tokens are current); ``heartbeat``,
  ``progress`` and ``nack``: 1 round trip and 1 document each.

A change that adds a round trip per job, or writes a document twice, fails here. The
clock is the test's manual clock: the driver's default clock reads the server's time with
one ``hello`` per 30 seconds (``StoreClock``), not per call, so it adds nothing per job.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from jobcore.drivers.mongo import MongoDriver
from pymongo import MongoClient, monitoring

from fixtures import mongo as fx
from jobcore import vocabulary as v
from jobcore.clock import ManualClock
from jobcore.errors import OptionInvalid
from jobcore.records import JobSpec

JOBS = 12
"""Small on purpose: the stand-in server is slow."""


@attrs.define
class Command:
    name: str
    written: int


class Listener(monitoring.CommandListener):
    """Every command a client sends, with the documents its reply says it wrote (thread-safe)."""

    def __init__(self) -> None:
        self.done: list[Command] = []
        self.names: dict[int, str] = {}
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self.lock:
            self.names[event.request_id] = event.command_name

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        with self.lock:
            self.done.append(Command(event.command_name, _written(event.command_name, event.reply)))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        with self.lock:
            self.done.append(Command(event.command_name, 0))

    def take(self) -> list[Command]:
        """The commands completed since the last call (and forget them)."""
        with self.lock:
            done, self.done = self.done, []
        return done


def _written(name: str, reply: Any) -> int:
    """Documents the server says this command inserted, changed or removed."""
    if name == "insert" or name == "delete":
        return int(reply.get("n", 0))
    if name == "update":
        return int(reply.get("nModified", 0)) + len(reply.get("upserted", []))
    if name == "findAndModify":
        return int(reply.get("lastErrorObject", {}).get("n", 0))
    return 0


@pytest.fixture
def listened(server: fx.MongoServer) -> Iterator[tuple[MongoClient[Any], Listener]]:
    """A client of the test's own whose every command is recorded (closed after the driver's teardown)."""
    listener = Listener()
    client: MongoClient[Any] = MongoClient(server.url, event_listeners=[listener], serverSelectionTimeoutMS=15_000)
    try:
        yield client, listener
    finally:
        client.close()


@pytest.fixture
def counted(
    listened: tuple[MongoClient[Any], Listener], make: Callable[..., Any]
) -> tuple[MongoDriver, Listener]:
    """A migrated driver on that client, warmed up (schema checked) before anything is counted."""
    client, listener = listened
    driver = make(client=client)
    driver.introspect.get("1")
    listener.take()
    return driver, listener


def _cost(commands: list[Command]) -> tuple[list[str], int]:
    return [c.name for c in commands], sum(c.written for c in commands)


def test_enqueue_costs_two_round_trips_single_or_batch(counted: tuple[MongoDriver, Listener]) -> None:
    """One job: the counter's $inc and the insert, two documents. A batch: the same two
    round trips whatever its size, the counter plus one document per job."""
    driver, listener = counted
    driver.enqueue("budget", {"n": 0})
    assert _cost(listener.take()) == (["findAndModify", "insert"], 2)
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}} for i in range(JOBS)])
    assert _cost(listener.take()) == (["findAndModify", "insert"], JOBS + 1)
    assert driver._jobs.count_documents({"state": "ready"}) == JOBS + 1


@pytest.mark.parametrize("landed_only", [False, True], ids=["jobs", "landed_only"])
@pytest.mark.parametrize("batch", [1, 4, JOBS])
def test_a_claimed_and_acked_job_costs_one_round_trip_each_plus_three_per_batch(
    counted: tuple[MongoDriver, Listener], batch: int, landed_only: bool
) -> None:
    """claim(limit=B) then ack_many of the B jobs: B + 1 round trips to claim, 2 to ack
    (1 when B = 1), and exactly two documents written per job (its claim and its ack); no
    job here has children, so no further command is sent (rules D)."""
    driver, listener = counted
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}} for i in range(JOBS)])
    assert "ack_landed_only" in driver.capabilities  # read once per driver (hello), as a worker does at start
    listener.take()
    per_batch: list[tuple[list[str], int]] = []
    settled = 0
    while settled < JOBS:
        claimed = driver.claim(["default"], worker_id="w-budget", limit=batch, lease=60).claimed
        assert len(claimed) == batch
        claim_cost = _cost(listener.take())
        pairs = [(c.token, None) for c in claimed]
        if landed_only:
            assert driver.ack_many(pairs, landed_only=True) == [True] * batch
        else:
            assert all(a is not None for a in driver.ack_many(pairs))
        per_batch.append(claim_cost)
        per_batch.append(_cost(listener.take()))
        settled += batch
    claim = (["findAndModify"] * (batch + 1), batch)  # the lapsed-lease probe, then one per job
    # One ack is one findAndModify, landed_only too: it reads back whether the job is a
    # parent (rules D: its children are settled after it), projected to two fields.
    ack = (["findAndModify"], 1) if batch == 1 else (["update", "find"], batch)
    assert per_batch == [claim, ack] * math.ceil(JOBS / batch)
    round_trips = sum(len(names) for names, _ in per_batch)
    written = sum(n for _, n in per_batch)
    assert round_trips / JOBS == (batch + 1 + len(ack[0])) / batch
    assert written / JOBS == 2
    assert driver.introspect.get(claimed[-1].job.id).state.value == "done"


def test_a_stale_ack_in_a_batch_writes_nothing_and_costs_nothing_extra(counted: tuple[MongoDriver, Listener]) -> None:
    """The fence is inside the one bulk update: a stale token of the same job writes no document."""
    driver, listener = counted
    driver.enqueue("budget", None)
    token = driver.claim(["default"], worker_id="w-budget", lease=60).claimed[0].token
    stale = attrs.evolve(token, claim_no=token.claim_no - 1)
    listener.take()
    answers = driver.ack_many([(stale, "stale"), (token, "ok")])
    assert answers[0] is None
    assert answers[1] is not None
    assert answers[1].result == "ok"
    assert _cost(listener.take()) == (["update", "find"], 1)


def test_start_of_held_claims_heartbeat_and_nack(counted: tuple[MongoDriver, Listener], clock: ManualClock) -> None:
    """start of B held claims and heartbeat_many of B leases: one bulk update writing B
    documents each; heartbeat, progress and nack one round trip and one document each."""
    driver, listener = counted
    driver.enqueue_many([{"name": "budget", "payload": {"n": i}} for i in range(4)])
    claimed = driver.claim(["default"], worker_id="w-budget", limit=4, lease=60, start=False).claimed
    listener.take()
    assert driver.start([c.token for c in claimed]) == [True] * 4
    assert _cost(listener.take()) == (["update"], 4)
    clock.advance(seconds=5)  # so the heartbeat moves the lease (an unchanged document is not written)
    assert driver.heartbeat(claimed[0].token, 60)
    assert _cost(listener.take()) == (["update"], 1)
    clock.advance(seconds=5)
    assert driver.heartbeat_many([c.token for c in claimed], 60) == [True] * 4
    assert _cost(listener.take()) == (["update"], 4)
    assert driver.progress(claimed[0].token, 0.5, "half")
    assert _cost(listener.take()) == (["update"], 1)
    assert driver.nack(claimed[1].token, "boom") is not None
    assert _cost(listener.take()) == (["findAndModify"], 1)


def test_a_batch_at_both_limits_is_still_one_insert(counted: tuple[MongoDriver, Listener]) -> None:
    """E05's one round trip at its largest: MAX_ENQUEUE_BATCH specs whose payloads come to
    MAX_ENQUEUE_BATCH_BYTES, with names and queues of MAX_NAME_LENGTH, go in one insert.

    PyMongo splits an insert that outgrows the server's message (48 MB on ``mongod``) or
    its write batch (100,000 documents) into several; past the byte limit the batch is
    refused before any command is sent."""
    driver, listener = counted
    hello = driver._jobs.database.client.admin.command("hello")
    assert (hello["maxMessageSizeBytes"], hello["maxWriteBatchSize"]) == (48_000_000, 100_000)
    listener.take()
    count, size = v.MAX_ENQUEUE_BATCH, v.MAX_ENQUEUE_BATCH_BYTES
    each = "x" * (size // count - 2)  # with its quotes, an equal share of the limit
    name, queue = "n" * v.MAX_NAME_LENGTH, "q" * v.MAX_NAME_LENGTH
    specs = [JobSpec(name=name, queue=queue, payload=each) for _ in range(count)]
    with pytest.raises(OptionInvalid):
        driver.enqueue_many([*specs[:-1], JobSpec(name=name, queue=queue, payload=each + "x" * (size % count + 1))])
    assert listener.take() == []
    driver.enqueue_many(specs)
    assert _cost(listener.take()) == (["findAndModify", "insert"], count + 1)

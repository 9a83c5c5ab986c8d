"""A cancelled ``await`` of a write leaves either the whole write or none of it (async only).

Each round starts a write as a task and cancels it after a random short while (before
it is sent, while the server runs it, while the reply is read), many times. Afterwards
the rows are counted from another connection (the sync driver's pool): every batch is
all there or not at all, every acked batch is all settled or all still running. Right
after each cancel the driver runs a probe statement on its small pool (2 connections),
and its answer must be its own: an interrupted connection handed out again mid-statement
would answer the previous statement's reply, or "another command is already in progress".

A cancel lands before the statement was sent (nothing is written), after it was sent (the
connection is closed: the write stands, whole, and its reply is lost, as on a network
failure) or after the answer; each kind is seen in every run.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver

from jobcore.records import JobFilter, JobState

ROUNDS = 150
BATCH = 5
SEED = 1818


@pytest.fixture
def store(make: Callable[..., Any]) -> Any:
    """A migrated sync driver in a fresh schema: the independent reader of what was stored."""
    return make(clock=None)


def _all(store: Any, queue: str) -> list[Any]:
    """Every job of ``queue``, page by page."""
    jobs: list[Any] = []
    after = None
    while True:
        page = store.introspect.list(JobFilter(queue=queue), 200, after=after)
        jobs.extend(page.jobs)
        if page.after is None:
            return jobs
        after = page.after


async def _cancel_after(coro: Any, rng: random.Random, took: float) -> str:
    """Run ``coro`` as a task and cancel it: a third of the time after 0-2 turns of the loop
    (before it starts; just after its statement was sent), else after up to twice the call's
    ``took``. Answers 'done' or 'cancelled'."""
    task = asyncio.ensure_future(coro)
    if rng.random() < 1 / 3:
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
    else:
        await asyncio.sleep(rng.uniform(0, 2 * took))
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"
    return "done"


async def _typical(call: Callable[[], Any]) -> float:
    """The median time of five uncancelled calls: the rounds cancel within twice that, so
    cancels land before the statement is sent, while it runs, and after it answered."""
    times = []
    for _ in range(5):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return sorted(times)[2]


async def _probe(driver: AsyncPostgresDriver, tag: int) -> None:
    """A write and a read whose answers must be their own (a reused interrupted connection's would not)."""
    job = await driver.enqueue("probe", {"tag": tag}, queue="probe")
    assert job.payload == {"tag": tag}
    got = await driver.introspect.get(job.id)
    assert got is not None
    assert got.payload == {"tag": tag}


def test_cancelled_enqueue_many_is_all_or_nothing(store: Any, pg_url: str) -> None:
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()

    async def scenario() -> None:
        async with AsyncPostgresDriver(pg_url, schema=store.schema, pool_max=2) as driver:
            await _probe(driver, -1)  # connections open, schema checked: the rounds time the write itself
            took = await _typical(lambda: driver.enqueue_many([{"name": "warm", "queue": "warm"}] * BATCH))
            for batch in range(ROUNDS):
                specs = [{"name": "c", "payload": {"batch": batch, "i": i}} for i in range(BATCH)]
                outcome = await _cancel_after(driver.enqueue_many(specs), rng, took)
                outcomes[outcome] += 1
                await _probe(driver, batch)

    asyncio.run(scenario())
    per_batch = Counter(job.payload["batch"] for job in _all(store, "default"))
    assert set(per_batch.values()) <= {BATCH}, "a batch was stored in part"
    # every write that answered is stored; cancelled ones landed whole (sent before the cancel) or not at all
    assert len(per_batch) >= outcomes["done"]
    landed = len(per_batch) - outcomes["done"]
    assert landed > 0, f"no cancel came after the statement was sent: {outcomes}"
    assert outcomes["cancelled"] - landed > 0, f"no cancel came before the statement was sent: {outcomes}"
    probes = _all(store, "probe")
    assert len(probes) == ROUNDS + 1


def test_cancelled_ack_many_is_all_or_nothing(store: Any, pg_url: str) -> None:
    rng = random.Random(SEED + 1)
    outcomes: Counter[str] = Counter()
    store.enqueue_many([{"name": "a", "payload": {"i": i}} for i in range(ROUNDS * 3)])
    store.enqueue_many([{"name": "t", "queue": "timing"}] * 5)

    async def scenario() -> None:
        async with AsyncPostgresDriver(pg_url, schema=store.schema, pool_max=2) as driver:
            await _probe(driver, -1)
            timing = iter((await driver.claim(["timing"], worker_id="t", limit=5, lease=60)).claimed)
            took = await _typical(lambda: driver.ack(next(timing).token))
            for round_ in range(ROUNDS):
                claimed = (await driver.claim(["default"], worker_id=f"w{round_}", limit=3, lease=60)).claimed
                assert len(claimed) == 3
                items = [(c.token, {"round": round_}) for c in claimed]
                if round_ % 2:  # one ack, one statement
                    ack = driver.ack(claimed[0].token, {"round": round_})
                    outcome = await _cancel_after(ack, rng, took)
                else:
                    outcome = await _cancel_after(driver.ack_many(items), rng, took)
                outcomes[outcome] += 1
                await _probe(driver, round_)

    asyncio.run(scenario())
    jobs = _all(store, "default")
    by_round: dict[int, list[Any]] = {}
    for job in jobs:
        assert job.state in (JobState.RUNNING, JobState.DONE), job
        if job.state is JobState.DONE:
            by_round.setdefault(job.result["round"], []).append(job)
    for round_, settled in by_round.items():
        assert len(settled) == (1 if round_ % 2 else 3), f"round {round_}'s ack landed in part: {settled}"
    assert len(by_round) >= outcomes["done"]
    landed = len(by_round) - outcomes["done"]
    assert landed > 0, f"no cancel came after the ack was sent: {outcomes}"
    assert outcomes["cancelled"] - landed > 0, f"no cancel came before the ack was sent: {outcomes}"

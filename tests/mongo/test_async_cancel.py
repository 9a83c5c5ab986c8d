"""Async-only: a cancelled ``await`` of enqueue or ack leaves the whole write or none of it.

Each round starts the verb as a task and cancels it at a different point: before it ran,
after a few loop turns (while it checks a connection out, sends, or waits for the reply),
or after a growing delay. What landed is then read from an independent record (a sync
``MongoClient`` of its own, not the driver's), and must be all or nothing: every job of
a cancelled batch or none, a job settled ``done`` with its result and finish time or
still running under the same token (which then still acks).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from typing import Any

import pytest
from jobcore.drivers.mongo import AsyncMongoDriver
from pymongo import MongoClient

from fixtures import mongo as fx
from jobcore.clock import ManualClock

pytestmark = pytest.mark.filterwarnings(
    # PyMongo 4.20's async pool leaks the socket of a connection being opened when the task is
    # cancelled between connecting it and wrapping it in a transport
    # (pool_shared._configured_protocol_interface closes nothing on CancelledError); the garbage
    # collector closes it. Not a write, so not what this file checks.
    r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning",
)

BATCH = 4
DELAYS: list[tuple[str, float]] = [
    ("turns", 0), ("turns", 1), ("turns", 2), ("turns", 3), ("turns", 5), ("turns", 8), ("turns", 13),
    ("turns", 21), ("turns", 34), ("seconds", 0.0005), ("seconds", 0.001), ("seconds", 0.002),
    ("seconds", 0.004), ("seconds", 0.008), ("seconds", 0.016), ("seconds", 0.032), ("seconds", 0.064),
    ("seconds", 2.0),
]
"""Where each round cancels: after that many loop turns, or after that long (the last lets it finish)."""


async def _cancel_after(task: asyncio.Task[Any], how: str, amount: float) -> str:
    """Cancel ``task`` at the given point; ``"cancelled"`` or ``"finished"`` (it ended first)."""
    if how == "turns":
        for _ in range(int(amount)):
            await asyncio.sleep(0)
    else:
        await asyncio.sleep(amount)
    if task.done():
        task.result()  # a real failure surfaces here
        return "finished"
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"
    return "finished"  # the answer came in before the cancellation was delivered


def _options(server: fx.MongoServer) -> dict[str, Any]:
    options: dict[str, Any] = dict(server.driver_options)
    if server.max_pool is not None:
        options["pool_max"] = server.max_pool
    return options


def test_a_cancelled_enqueue_leaves_the_whole_batch_or_none(server: fx.MongoServer, clock: ManualClock) -> None:
    name = f"jc_test_{uuid.uuid4().hex[:16]}"

    async def main() -> list[tuple[str, int]]:
        outcomes = []
        async with AsyncMongoDriver(server.url, database=name, clock=clock, **_options(server)) as driver:
            await driver.migrate()
            for round_no, (how, amount) in enumerate(DELAYS):
                if round_no % 2:
                    specs = [{"name": "batch", "payload": {"round": round_no, "item": i}} for i in range(BATCH)]
                    task = asyncio.ensure_future(driver.enqueue_many(specs))
                else:
                    task = asyncio.ensure_future(driver.enqueue("one", {"round": round_no}, key=f"k{round_no}"))
                outcomes.append((await _cancel_after(task, how, amount), round_no))
            # The driver is still sound after all those cut-off calls.
            assert (await driver.enqueue("after", {"round": -1})).name == "after"
        return outcomes

    with MongoClient(server.url) as record:
        try:
            outcomes = asyncio.run(main())
            jobs = record[name]["jobcore_jobs"]
            per_round = Counter(
                json.loads(doc["payload"])["round"]
                for doc in jobs.find({"name": {"$in": ["batch", "one"]}}, {"payload": 1})
            )
            seen = Counter()
            for outcome, round_no in outcomes:
                whole = BATCH if round_no % 2 else 1
                assert per_round[round_no] in (0, whole), (round_no, per_round[round_no])
                if outcome == "finished":
                    assert per_round[round_no] == whole  # an answered call wrote everything
                seen["whole" if per_round[round_no] == whole else "none"] += 1
                if outcome == "cancelled" and per_round[round_no] == whole:
                    seen["landed though cancelled"] += 1
                if round_no % 2 == 0 and per_round[round_no] == 0:
                    # nothing half-written either: the key was never taken
                    assert jobs.count_documents({"live_key": f"k{round_no}"}) == 0
            assert seen["none"] >= 1
            assert seen["whole"] >= 1
            assert jobs.count_documents({"name": "after"}) == 1
        finally:
            record.drop_database(name)


def test_a_cancelled_ack_settles_the_job_wholly_or_leaves_it_running(
    server: fx.MongoServer, clock: ManualClock,
) -> None:
    name = f"jc_test_{uuid.uuid4().hex[:16]}"
    rounds = len(DELAYS)

    async def main() -> list[tuple[str, str, int, str]]:
        outcomes = []
        async with AsyncMongoDriver(server.url, database=name, clock=clock, **_options(server)) as driver:
            await driver.migrate()
            await driver.enqueue_many([{"name": "job", "payload": i} for i in range(rounds)])
            claimed = (await driver.claim(["default"], worker_id="w", limit=rounds, lease=600)).claimed
            assert len(claimed) == rounds
            for (how, amount), item in zip(DELAYS, claimed, strict=True):
                token = item.token
                task = asyncio.ensure_future(driver.ack(token, {"ok": item.job.payload}))
                outcomes.append((await _cancel_after(task, how, amount), token.job_id, token.claim_no, "w"))
        return outcomes

    with MongoClient(server.url) as record:
        try:
            outcomes = asyncio.run(main())
            jobs = record[name]["jobcore_jobs"]
            seen = Counter()
            unsettled = []
            for outcome, job_id, claim_no, worker in outcomes:
                doc = jobs.find_one({"_id": int(job_id)})
                assert doc is not None
                if doc["state"] == "done":
                    assert json.loads(doc["result"]) == {"ok": json.loads(doc["payload"])}
                    assert doc.get("finished_at") is not None
                    assert "worker_id" not in doc
                    assert "lease_expires_at" not in doc
                    seen["whole"] += 1
                else:
                    assert outcome == "cancelled"
                    assert doc["state"] == "running"
                    assert (doc["worker_id"], doc["claim_no"]) == (worker, claim_no)
                    assert "result" not in doc
                    assert "finished_at" not in doc
                    seen["none"] += 1
                    unsettled.append((job_id, claim_no))
            assert seen["none"] >= 1
            assert seen["whole"] >= 1

            # The token of a job left running is still current: acking it again lands once.
            async def again() -> list[Any]:
                from jobcore.records import ClaimToken  # noqa: PLC0415

                async with AsyncMongoDriver(server.url, database=name, clock=clock, **_options(server)) as driver:
                    return [
                        await driver.ack(ClaimToken(job_id=job_id, worker_id="w", claim_no=claim_no), "late")
                        for job_id, claim_no in unsettled
                    ]

            assert all(job is not None and job.result == "late" for job in asyncio.run(again()))
            assert jobs.count_documents({"state": "done"}) == rounds
        finally:
            record.drop_database(name)


@pytest.mark.parametrize("verb", ["enqueue", "ack"])
def test_cancelling_before_the_call_runs_writes_nothing(verb: str, server: fx.MongoServer, clock: ManualClock) -> None:
    """A task cancelled before its first step never reaches the server."""
    name = f"jc_test_{uuid.uuid4().hex[:16]}"

    async def main() -> None:
        async with AsyncMongoDriver(server.url, database=name, clock=clock, **_options(server)) as driver:
            await driver.migrate()
            if verb == "enqueue":
                task = asyncio.ensure_future(driver.enqueue("never"))
            else:
                await driver.enqueue("job")
                token = (await driver.claim(["default"], worker_id="w", lease=600)).claimed[0].token
                task = asyncio.ensure_future(driver.ack(token, "never"))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    with MongoClient(server.url) as record:
        try:
            asyncio.run(main())
            jobs = record[name]["jobcore_jobs"]
            assert jobs.count_documents({"name": "never"}) == 0
            assert jobs.count_documents({"state": "done"}) == 0
        finally:
            record.drop_database(name)

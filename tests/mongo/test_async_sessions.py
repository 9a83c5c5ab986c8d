"""AsyncMongoDriver against a live server: enqueue inside the caller's AsyncClientSession transaction,
the refusals of a handle it cannot join, and a native change-stream subscription.

Each test runs its own event loop (``asyncio.run``) and its own driver, on a fresh database.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from jobcore.drivers.mongo import AsyncMongoDriver, MongoDriver
from pymongo import AsyncMongoClient, MongoClient
from pymongo.asynchronous.client_session import AsyncClientSession

from fixtures import mongo as fx
from jobcore.clock import ManualClock
from jobcore.errors import BackendFailure, JobcoreError, OptionInvalid


@asynccontextmanager
async def opened(server: fx.MongoServer, clock: Any = None) -> AsyncIterator[AsyncMongoDriver]:
    name = f"jc_test_{uuid.uuid4().hex[:16]}"
    options: dict[str, Any] = dict(server.driver_options)
    if server.max_pool is not None:
        options["pool_max"] = server.max_pool
    async with AsyncMongoDriver(server.url, database=name, clock=clock, **options) as driver:
        await driver.migrate()
        try:
            yield driver
        finally:
            await driver._client.drop_database(name)


def run(server: fx.MongoServer, clock: Any, body: Callable[[AsyncMongoDriver], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with opened(server, clock) as driver:
            return await body(driver)

    return asyncio.run(main())


def _transactions(driver: AsyncMongoDriver) -> None:
    if "transactional_enqueue" not in driver.capabilities:
        pytest.skip("the server offers no transactions")


def test_enqueue_joins_a_committed_async_transaction(server: fx.MongoServer, clock: ManualClock) -> None:
    """enqueue/enqueue_many(session=...) write inside the caller's transaction: seen by others only once committed."""

    async def body(driver: AsyncMongoDriver) -> None:
        _transactions(driver)
        orders = driver._jobs.database["orders"]
        async with driver._client.start_session() as session:
            assert isinstance(session, driver._backend.connection_type)
            async with await session.start_transaction():
                await orders.insert_one({"_id": 1}, session=session)
                job = await driver.enqueue("ship", {"order": 1}, session=session, key="order-1")
                batch = await driver.enqueue_many([{"name": "mail"}, {"name": "bill"}], session=session)
                assert await driver.introspect.get(job.id) is None  # not committed: invisible outside
                assert await driver._jobs.count_documents({}) == 0
        assert (await driver.introspect.get(job.id)) is not None
        assert all([await driver.introspect.get(j.id) is not None for j in batch])
        assert await driver._jobs.count_documents({}) == 3
        assert await orders.count_documents({}) == 1
        assert (await driver.enqueue("ship", key="order-1")).duplicate  # the committed job holds its key

    run(server, clock, body)


def test_an_aborted_async_transaction_leaves_no_job(server: fx.MongoServer, clock: ManualClock) -> None:
    """An aborted transaction (explicitly, or by an exception leaving its block) takes its jobs with it."""

    async def body(driver: AsyncMongoDriver) -> None:
        _transactions(driver)
        async with driver._client.start_session() as session:
            await session.start_transaction()
            job = await driver.enqueue("ship", session=session, key="order-2")
            many = await driver.enqueue_many([{"name": "mail", "key": "m"}], session=session)
            await session.abort_transaction()

        async def fails_inside() -> None:
            async with driver._client.start_session() as session, await session.start_transaction():
                await driver.enqueue("ship", session=session, key="order-3")
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await fails_inside()
        assert await driver.introspect.get(job.id) is None
        assert await driver.introspect.get(many[0].id) is None
        assert await driver._jobs.count_documents({}) == 0
        # The keys were never taken: enqueued again they make fresh jobs.
        assert not (await driver.enqueue("ship", key="order-2")).duplicate
        assert not (await driver.enqueue("ship", key="order-3")).duplicate

    run(server, clock, body)


def test_a_handle_the_driver_cannot_join_is_refused_as_the_sync_driver_refuses_it(
    server: fx.MongoServer, clock: ManualClock,
) -> None:
    """Another client's session, a sync ClientSession, junk: JC_OPTION_INVALID on both flavours, nothing written."""

    def sync_code(handle_of: Callable[[MongoClient[Any]], Any]) -> str:
        with MongoClient(server.url) as client:
            driver = MongoDriver(client, database=f"jc_test_{uuid.uuid4().hex[:16]}", clock=clock)
            handle = handle_of(client)
            try:
                with pytest.raises(JobcoreError) as refused:
                    driver.enqueue("a", session=handle)
            finally:
                if hasattr(handle, "end_session"):
                    handle.end_session()
            return refused.value.code

    async def body(driver: AsyncMongoDriver) -> list[str]:
        codes = []
        async with AsyncMongoClient(server.url) as other, other.start_session() as foreign:
            for handle in (foreign, "session", 42):
                with pytest.raises(OptionInvalid) as refused:
                    await driver.enqueue("a", session=handle)  # type: ignore[arg-type]
                assert "AsyncClientSession" in str(refused.value)
                codes.append(refused.value.code)
                with pytest.raises(OptionInvalid):
                    await driver.enqueue_many([{"name": "a"}], session=handle)  # type: ignore[arg-type]
        with (
            MongoClient(server.url) as sync_client, sync_client.start_session() as sync_session,
            pytest.raises(OptionInvalid),
        ):
            await driver.enqueue("a", session=sync_session)  # type: ignore[arg-type]
        assert await driver._jobs.count_documents({}) == 0
        return codes

    codes = run(server, clock, body)
    assert codes == ["JC_OPTION_INVALID"] * 3
    assert sync_code(lambda client: "session") == "JC_OPTION_INVALID"
    with MongoClient(server.url) as other:
        assert sync_code(lambda client: other.start_session()) == "JC_OPTION_INVALID"


def test_a_session_outside_a_transaction_works_on_the_async_flavour(server: fx.MongoServer, clock: ManualClock) -> None:
    """A session without a transaction (causal consistency) is taken as the sync driver takes it."""

    async def body(driver: AsyncMongoDriver) -> None:
        async with driver._client.start_session() as session:
            assert isinstance(session, AsyncClientSession)
            job = await driver.enqueue("a", session=session)
        assert (await driver.introspect.get(job.id)) is not None

    run(server, clock, body)


def test_subscribe_follows_a_native_change_stream_on_the_loop(server: fx.MongoServer) -> None:
    """subscribe wakes a subscriber on the driver's loop when a job becomes ready; close() stops it."""

    async def main() -> tuple[list[str], list[str], bool]:
        async with opened(server) as driver:  # the server's own clock: due times are the store's
            if "notify" not in driver.capabilities:
                pytest.skip("the server offers no change streams")
            woken: list[str] = []
            arrived = asyncio.Event()

            def wake(queue: str) -> None:
                woken.append(queue)
                arrived.set()

            subscription = await driver.subscribe(["mail"], wake)
            await driver.enqueue("other", queue="elsewhere")
            await driver.enqueue("send", queue="mail")
            await asyncio.wait_for(arrived.wait(), 60)
            subscription.close()
            await asyncio.sleep(0.2)
            hub_gone = driver._hub is None
            before = list(woken)
            await driver.enqueue("send", queue="mail")
            await asyncio.sleep(1.0)
            return before, woken, hub_gone

    before, after, hub_gone = asyncio.run(main())
    assert before == ["mail"]
    assert after == ["mail"]  # closed: the later enqueue woke nobody
    assert hub_gone  # the last subscription closed: its stream and task stopped


def test_the_default_clock_is_the_servers_read_by_awaiting(server: fx.MongoServer) -> None:
    """Without clock=, times are the server's (F01), read by awaited calls; clock.now() never blocks."""
    name = f"jc_test_{uuid.uuid4().hex[:16]}"

    async def main() -> None:
        async with AsyncMongoDriver(server.url, database=name, auto_migrate=True, **server.driver_options) as driver:
            with pytest.raises(BackendFailure):  # no reading yet, and now() will not block the loop for one
                driver.clock.now()
            job = await driver.enqueue("a")  # the first call checks the schema and reads the clock
            now = driver.clock.now()
            assert now >= job.created_at
            assert now - job.created_at < timedelta(seconds=30)
            assert abs(now - datetime.now(timezone.utc)) < timedelta(seconds=30)  # the server runs on this host
            assert repr(driver.clock).startswith("AsyncStoreClock(rtt=")
            await driver._client.drop_database(name)

    asyncio.run(main())

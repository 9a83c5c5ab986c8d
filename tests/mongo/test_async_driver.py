"""AsyncMongoDriver's construction: the sync driver's arguments, checks and coded refusals, and no I/O."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from jobcore.drivers.mongo import AsyncMongoDriver, MongoDriver
from pymongo import AsyncMongoClient, MongoClient

import jobcore
from jobcore.errors import JobcoreError

NOWHERE = "mongodb://127.0.0.1:1/app"  # nothing listens: any I/O would fail


@pytest.mark.parametrize(
    ("target", "options"),
    [
        (42, {}),
        ("mongodb://host:99999999/app", {}),
        ("mongodb://h/app?sslmode=require", {}),
        (NOWHERE, {"pool_max": 0}),
        (NOWHERE, {"pool_max": True}),
        (NOWHERE, {"call_timeout": -1}),
        (NOWHERE, {"connect_timeout": float("nan")}),
        (NOWHERE, {"database": ""}),
        (NOWHERE, {"collection_prefix": "a$b"}),
        (NOWHERE, {"default_max_attempts": 0}),
    ],
)
def test_the_constructor_refuses_what_mongodriver_refuses_with_the_same_code(target: Any, options: Any) -> None:
    with pytest.raises(JobcoreError) as sync_refusal:
        MongoDriver(target, **options)
    with pytest.raises(JobcoreError) as async_refusal:
        AsyncMongoDriver(target, **options)
    assert async_refusal.value.code == sync_refusal.value.code
    assert async_refusal.value.fix


def test_each_flavour_refuses_the_other_flavours_client() -> None:
    with MongoClient(NOWHERE, connect=False) as sync_client, pytest.raises(JobcoreError) as refused:
        AsyncMongoDriver(sync_client)  # type: ignore[arg-type]
    assert refused.value.code == "JC_OPTION_INVALID"
    assert "AsyncMongoClient" in str(refused.value)

    async def other_way() -> str:
        async with AsyncMongoClient(NOWHERE, connect=False) as async_client:
            with pytest.raises(JobcoreError) as refused:
                MongoDriver(async_client)  # type: ignore[arg-type]
            return refused.value.code

    assert asyncio.run(other_way()) == "JC_OPTION_INVALID"


def test_construction_and_from_url_do_no_io_and_close_cleanly() -> None:
    """Built outside any loop against a port nobody listens on: nothing is tried until awaited."""
    driver = AsyncMongoDriver.from_url(NOWHERE + "?auto_migrate=true&pool_max=3", call_timeout=0.5)
    assert driver.auto_migrate
    assert driver._client.options.pool_options.max_pool_size == 3
    assert driver._jobs.full_name == "app.jobcore_jobs"
    assert driver.capabilities == frozenset({"shared_store", "ack_landed_only", "deferred_start", "heartbeat_many"})
    assert driver.url == NOWHERE

    async def use() -> str:
        async with driver:
            with pytest.raises(JobcoreError) as refused:
                await driver.enqueue("a")
            return refused.value.code

    assert asyncio.run(use()) == "JC_DB_UNAVAILABLE"  # the same code MongoDriver answers


def test_connect_async_builds_the_async_mongo_driver() -> None:
    driver = jobcore.connect_async(NOWHERE + "?pool_max=2")
    assert isinstance(driver, AsyncMongoDriver)
    assert isinstance(driver, jobcore.AsyncJobDriver)
    assert driver._client.options.pool_options.max_pool_size == 2
    asyncio.run(driver.close())

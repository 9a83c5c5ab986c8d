"""The async API's front: connect_async, the process-wide async driver, handles' async verbs.

Every rule of the async drivers is pinned by the whole parity suite run through
:class:`jobcore._bridge.SyncBridge` (``memory-async``, ``postgres-async``, ``mongo-async``);
this file checks what sits above the drivers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from jobcore.drivers.memory import AsyncMemoryDriver, MemoryDriver

import jobcore
from jobcore import Registry
from jobcore._bridge import SyncBridge
from jobcore.errors import JobcoreError
from jobcore.records import JobState


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_connect_async_builds_the_async_flavour_and_refuses_what_connect_refuses() -> None:
    driver = jobcore.connect_async("memory://")
    assert isinstance(driver, AsyncMemoryDriver)
    assert isinstance(driver, jobcore.AsyncJobDriver)
    for bad in ("nope", "memory://x?y=1", "zz://host", 42):
        with pytest.raises(JobcoreError) as sync_refusal:
            jobcore.connect(bad)  # type: ignore[arg-type]
        with pytest.raises(JobcoreError) as async_refusal:
            jobcore.connect_async(bad)  # type: ignore[arg-type]
        assert async_refusal.value.code == sync_refusal.value.code
        assert async_refusal.value.fix


def test_handles_enqueue_on_the_process_wide_async_driver() -> None:
    registry = Registry()

    @registry.job(name="send", queue="mail", priority=3, max_attempts=4)
    async def send(payload: Any) -> None:
        return None

    async def main() -> tuple[Any, ...]:
        async with AsyncMemoryDriver() as driver:
            with jobcore.use_async_job_driver(driver):
                one = await send.enqueue_async({"to": "a"}, key="k1")
                again = await send.enqueue_async({"to": "b"}, key="k1")
                many = await send.enqueue_many_async([{"to": "c"}, {"to": "d"}], delay=60)
                stats = await driver.introspect.stats()
            return one, again, many, stats

    one, again, many, stats = run(main())
    assert (one.name, one.queue, one.priority, one.max_attempts, one.payload) == ("send", "mail", 3, 4, {"to": "a"})
    assert again.id == one.id
    assert again.duplicate
    assert [j.payload for j in many] == [{"to": "c"}, {"to": "d"}]
    assert all(j.state is JobState.SCHEDULED for j in many)
    assert stats.counts["mail"] == {JobState.READY: 1, JobState.SCHEDULED: 2}


def test_without_an_async_driver_the_refusal_is_coded_and_names_the_fix() -> None:
    registry = Registry()

    @registry.job
    def work(payload: Any) -> None:
        return None

    previous = jobcore.set_async_job_driver(None)
    try:
        with pytest.raises(JobcoreError) as refusal:
            run(work.enqueue_async(1))
    finally:
        jobcore.set_async_job_driver(previous)
    assert refusal.value.code == "JC_NO_DRIVER"
    assert "set_async_job_driver" in str(refusal.value.fix)


def test_bad_input_gets_the_same_coded_refusal_on_both_flavours_and_writes_nothing() -> None:
    calls = [
        ("enqueue", ("",), {}),
        ("enqueue", ("job",), {"priority": "high"}),
        ("enqueue", ("job",), {"delay": -1}),
        ("enqueue", ("job", object()), {}),
        ("enqueue_many", ([{"name": "job", "queue": ""}],), {}),
        ("claim", ([],), {"worker_id": "w", "lease": 30}),
        ("claim", (["q"],), {"worker_id": "w", "lease": 0}),
        ("heartbeat", ("not a token", 30), {}),
        ("progress", ("not a token", 0.5), {}),
        ("nack", ("not a token", "boom"), {}),
    ]
    sync_driver = MemoryDriver()

    async def refused_async(driver: AsyncMemoryDriver, verb: str, args: Any, kwargs: Any) -> str:
        with pytest.raises(JobcoreError) as refusal:
            await getattr(driver, verb)(*args, **kwargs)
        return refusal.value.code

    async_driver = AsyncMemoryDriver()
    for verb, args, kwargs in calls:
        with pytest.raises(JobcoreError) as refusal:
            getattr(sync_driver, verb)(*args, **kwargs)
        assert run(refused_async(async_driver, verb, args, kwargs)) == refusal.value.code, verb
    assert run(async_driver.introspect.stats()).counts == {}


def test_cancel_job_async_cancels_a_live_job_and_refuses_a_finished_one() -> None:
    async def main() -> tuple[Any, str]:
        async with AsyncMemoryDriver() as driver:
            job = await driver.enqueue("job")
            cancelled = await jobcore.cancel_job_async(job.id, "no longer wanted", driver=driver)
            with pytest.raises(JobcoreError) as refusal:
                await jobcore.cancel_job_async(job.id, driver=driver)
            return cancelled, refusal.value.code

    cancelled, code = run(main())
    assert cancelled.state is JobState.CANCELLED
    assert code == "JC_JOB_NOT_CANCELLABLE"


def test_an_async_producer_and_a_sync_twin_share_one_memory_store() -> None:
    twin = MemoryDriver()

    async def main() -> str:
        driver = AsyncMemoryDriver(twin=twin)
        return (await driver.enqueue("job", {"n": 1})).id

    job_id = run(main())
    claimed = twin.claim(["default"], worker_id="w", lease=30).claimed
    assert [c.job.id for c in claimed] == [job_id]
    with pytest.raises(JobcoreError) as refusal:
        AsyncMemoryDriver(twin=twin, clock=jobcore.SystemClock())
    assert refusal.value.code == "JC_OPTION_INVALID"


def test_the_bridge_refuses_a_sync_call_from_its_own_loop() -> None:
    async def main() -> str:
        bridge = SyncBridge(AsyncMemoryDriver(), asyncio.get_running_loop())
        with pytest.raises(JobcoreError) as refusal:
            bridge.enqueue("job")
        return refusal.value.code

    assert run(main()) == "JC_OPTION_INVALID"

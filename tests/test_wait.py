"""wait beyond the parity rules: the async flavour never blocks its loop, a cancelled wait
leaves nothing behind, and the process-wide ``wait_for_job`` / ``wait_for_job_async``."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from jobcore.drivers.memory import AsyncMemoryDriver, MemoryDriver

import jobcore
from jobcore.clock import ManualClock
from jobcore.errors import NoDriver, WaitTimeout
from jobcore.records import JobState


def test_await_wait_lets_the_loop_run() -> None:
    """A 1 ms ticker keeps ticking while a coroutine awaits wait; the ack from another task answers it."""

    async def main() -> tuple[int, object]:
        driver = AsyncMemoryDriver()
        job = await driver.enqueue("report")
        token = (await driver.claim(["default"], worker_id="w", lease=30)).claimed[0].token
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        async def finish() -> None:
            await asyncio.sleep(0.3)
            await driver.ack(token, {"rows": 3})

        tasks = [asyncio.create_task(ticker()), asyncio.create_task(finish())]
        got = await driver.wait(job.id, timeout=10, poll=60)
        stop.set()
        await asyncio.gather(*tasks)
        return ticks, got.result

    ticks, result = asyncio.run(main())
    assert result == {"rows": 3}
    assert ticks >= 50  # 300 ms of a 1 ms ticker, however slow the machine: it was never blocked for long


def test_a_cancelled_await_leaves_no_watch_behind() -> None:
    """Cancelling ``await driver.wait(...)`` ends the wait; the job is untouched and nothing keeps watching it."""

    async def main() -> None:
        driver = AsyncMemoryDriver()
        job = await driver.enqueue("report")
        waiting = asyncio.create_task(driver.wait(job.id, timeout=60, poll=60))
        await asyncio.sleep(0.05)
        assert driver.twin._store._watchers  # the waiter watches the job
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert driver.twin._store._watchers == {}
        after = await driver.introspect.get(job.id)
        assert after is not None
        assert after.state is JobState.READY

    asyncio.run(main())


def test_the_timeout_is_real_time_not_the_injected_clock() -> None:
    """A ManualClock that never moves does not stop a timeout: it is the waiting process's own time."""
    driver = MemoryDriver(clock=ManualClock())
    job = driver.enqueue("report")
    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        driver.wait(job.id, timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 10
    assert driver._store._watchers == {}


def test_wait_for_job_uses_the_process_wide_driver() -> None:
    """jobcore.wait_for_job waits on the driver set for the process (or the one given)."""
    driver = MemoryDriver()
    job = driver.enqueue("report")
    token = driver.claim(["default"], worker_id="w", lease=30).claimed[0].token
    threading.Timer(0.2, lambda: driver.ack(token, "ok")).start()
    with jobcore.use_job_driver(driver):
        assert jobcore.wait_for_job(job.id, timeout=10).result == "ok"
    assert jobcore.wait_for_job(job.id, timeout=1, driver=driver).state is JobState.DONE
    previous = jobcore.set_job_driver(None)
    try:
        with pytest.raises(NoDriver):
            jobcore.wait_for_job(job.id, timeout=1)
    finally:
        jobcore.set_job_driver(previous)


def test_wait_for_job_async_uses_the_process_wide_async_driver() -> None:
    """jobcore.wait_for_job_async awaits the process-wide async driver's wait; a timeout is WaitTimeout."""

    async def main() -> None:
        driver = AsyncMemoryDriver()
        job = await driver.enqueue("report")
        with jobcore.use_async_job_driver(driver):
            with pytest.raises(WaitTimeout) as info:
                await jobcore.wait_for_job_async(job.id, timeout=0.1)
            assert info.value.code == "JC_WAIT_TIMEOUT"
            await driver.introspect.cancel(job.id)
            got = await jobcore.wait_for_job_async(job.id, timeout=5)
            assert got.state is JobState.CANCELLED

    asyncio.run(main())

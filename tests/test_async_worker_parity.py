"""The worker parity scenarios (rules W01-W07 and the rate limits' T01-T03: parity_tests/test_worker.py
and test_rate_limits.py) run through AsyncWorker.

Each scenario builds its workers with ``make_worker``; here that builds an
:class:`~jobcore.AsyncWorker` on an application loop (a thread of its own, as a web
server's), driven from the scenario's thread through the Worker's sync API. The store is
the memory driver seen both ways: the scenario reads and writes the sync driver, while the
worker is given its async twin (``AsyncMemoryDriver(twin=...)``), so every store call of
the worker goes through the bridge onto the application loop; a scenario that wraps the
driver (fault injection) hands the worker that sync wrapper as it is.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from datetime import datetime, timezone
from typing import Any, TypeVar

import pytest
from jobcore.drivers.memory import AsyncMemoryDriver, MemoryDriver
from jobcore.parity import _support, test_rate_limits, test_worker

from jobcore import AsyncWorker, Registry
from jobcore.clock import ManualClock, to_millis

T = TypeVar("T")


class AppLoop:
    """An event loop on a thread of its own: the application's."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="app-loop", daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class LoopedWorker:
    """The Worker API the scenarios use, over an AsyncWorker living on the application loop."""

    def __init__(self, app: AppLoop, driver: Any, registry: Registry, options: dict[str, Any]) -> None:
        self._app = app

        async def build() -> AsyncWorker:
            return AsyncWorker(["default"], driver=driver, registry=registry, **options)

        self.aworker = app.call(build())
        self.engine = self.aworker.engine

    def start(self) -> LoopedWorker:
        self._app.call(self.aworker.start())
        return self

    def stop(self, timeout: float | None = None) -> bool:
        return self._app.call(self.aworker.stop(timeout))

    def request_stop(self, drain_timeout: float | None = None) -> None:
        self.aworker.request_stop(drain_timeout)

    def wait(self, timeout: float | None = None) -> bool:
        return self.engine.wait(timeout)

    def kill(self) -> None:
        self.engine.kill()

    @property
    def counts(self) -> Counter[str]:
        return self.aworker.counts

    @property
    def in_flight(self) -> int:
        return self.aworker.in_flight

    @property
    def worker_id(self) -> str:
        return self.aworker.worker_id


def _fixture_names(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


MODULES = (test_worker, test_rate_limits)
SCENARIOS = {
    name: (module, fn)
    for module in MODULES
    for name, fn in vars(module).items()
    if name.startswith(("test_W", "test_T")) and callable(fn)
}


@pytest.fixture
def app_loop() -> Iterator[AppLoop]:
    app = AppLoop()
    yield app
    app.close()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_worker_scenario_through_the_async_worker(
    name: str, app_loop: AppLoop, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(to_millis(datetime(2026, 1, 1, tzinfo=timezone.utc)))
    driver = MemoryDriver(clock=clock)
    twin = AsyncMemoryDriver(twin=driver)
    built: list[LoopedWorker] = []

    def make_worker(given: Any, registry: Registry, **options: Any) -> LoopedWorker:
        settings: dict[str, Any] = {
            "lease": _support.LEASE, "poll_interval": 0.01, "heartbeat_interval": 0.01, "rescue_interval": None,
            "drain_timeout": 2.0, "seed": 7, **options,
        }
        worker = LoopedWorker(app_loop, twin if given is driver else given, registry, settings)
        built.append(worker)
        return worker

    module, scenario = SCENARIOS[name]
    monkeypatch.setattr(module, "make_worker", make_worker)
    given = {"driver": driver, "clock": clock, "caplog": caplog}
    try:
        scenario(**{arg: given[arg] for arg in _fixture_names(scenario)})
    finally:
        for worker in built:
            worker.stop(0)
    assert built, "the scenario ran no worker"
    assert all(w.aworker.loop is app_loop.loop for w in built)

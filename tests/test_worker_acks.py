"""How the worker acks (issue 7): ``landed_only`` where the driver offers it and nothing needs
the settled jobs; full answers for ``on_settled`` and for drivers without the capability."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver

from jobcore.records import ClaimToken, Job, JobState
from jobcore.registry import Registry
from jobcore.worker import Worker
from tests.worker_run import run_until_done


class RecordingDriver(MemoryDriver):
    """The memory driver, noting how each ``ack_many`` was asked."""

    def __init__(self, capabilities: frozenset[str]) -> None:
        super().__init__()
        self.capabilities = capabilities
        self.asked: list[dict[str, Any]] = []

    def ack_many(self, items: Iterable[tuple[ClaimToken, Any]], **options: Any) -> Any:  # type: ignore[override]
        self.asked.append(options)
        return super().ack_many(items, **options)


def _drain(driver: MemoryDriver, jobs: int, on_settled: Any = None) -> tuple[Worker, Registry]:
    registry = Registry()

    @registry.job(name="double")
    def double(payload: int) -> int:
        return payload * 2

    double.enqueue_many(list(range(jobs)), driver=driver)
    worker = Worker(
        ["default"], driver=driver, registry=registry, poll_interval=0.01, rescue_interval=None, retention=None,
        scheduler=False, on_settled=on_settled,
    )
    run_until_done(worker, driver, jobs)
    return worker, registry


def test_without_on_settled_the_worker_acks_landed_only() -> None:
    """Nothing needs the settled jobs back: every ack goes landed_only, and every job ends done with its result."""
    driver = RecordingDriver(frozenset({"notify", "ack_landed_only"}))
    worker, _ = _drain(driver, 20)
    assert driver.asked
    assert all(options == {"landed_only": True} for options in driver.asked)
    done = driver.introspect.list(limit=50).jobs
    assert sorted(j.result for j in done) == [2 * i for i in range(20)]
    assert worker.counts["completed"] == 20


def test_on_settled_gets_the_settled_jobs() -> None:
    """With on_settled set, acks answer full jobs and on_settled sees each one done."""
    driver = RecordingDriver(frozenset({"notify", "ack_landed_only"}))
    seen: list[tuple[Job, str]] = []
    _drain(driver, 5, on_settled=lambda job, outcome: seen.append((job, outcome)))
    assert driver.asked
    assert all(options == {} for options in driver.asked)
    assert sorted((j.state, j.result, o) for j, o in seen) == [(JobState.DONE, 2 * i, "completed") for i in range(5)]


@pytest.mark.parametrize("capabilities", [frozenset(), frozenset({"notify"})], ids=["none", "notify"])
def test_a_driver_without_the_capability_is_never_asked_landed_only(capabilities: frozenset[str]) -> None:
    """A driver written before ack_landed_only (no such keyword) works unchanged."""
    driver = RecordingDriver(capabilities)
    worker, _ = _drain(driver, 10)
    assert driver.asked
    assert all(options == {} for options in driver.asked)
    assert worker.counts["completed"] == 10


class PassThrough:
    """A wrapper as users write them: everything delegated, ``ack_many`` overridden without
    the keyword; it declares what it offers, the inner driver's capabilities less ``ack_landed_only``."""

    def __init__(self, inner: MemoryDriver) -> None:
        self._inner = inner
        self.acks = 0
        self.capabilities = inner.capabilities - {"ack_landed_only"}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def ack_many(self, items: Any) -> Any:
        self.acks += 1
        return self._inner.ack_many(items)


def test_a_wrapper_without_the_capability_gets_plain_acks() -> None:
    """The worker reads capabilities only: a wrapper not declaring ack_landed_only gets plain acks."""
    inner = MemoryDriver()
    wrapper = PassThrough(inner)
    assert "ack_landed_only" in inner.capabilities
    assert "ack_landed_only" not in wrapper.capabilities
    registry = Registry()

    @registry.job(name="one")
    def one(payload: int) -> int:
        return payload

    one.enqueue_many(list(range(10)), driver=inner)
    worker = Worker(
        ["default"], driver=wrapper, registry=registry, poll_interval=0.01, rescue_interval=None,  # type: ignore[arg-type]
        retention=None, scheduler=False,
    )
    run_until_done(worker, inner, 10, "the jobs through the wrapper")
    assert wrapper.acks >= 1
    assert worker.counts["completed"] == 10
    assert worker.counts["settle_errors"] == 0

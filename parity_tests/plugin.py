"""The pytest plugin behind the parity suite: one ``driver`` fixture, parametrised over drivers.

Every scenario takes ``driver`` (a fresh, empty driver on a :class:`ManualClock`) and,
when it moves time, ``clock``. The memory driver is always in the loop; other drivers
join through a *driver factory*: a callable taking a clock and returning a context
manager that yields a fresh, isolated driver and cleans it up on exit. Given ``None``
instead of a clock, the factory makes a driver on its store's own clock (rule F01: the
fault scenarios run such drivers next to clients whose wall clock is off).

A third-party driver runs the whole suite with::

    pytest -p jobcore.parity.plugin --pyargs jobcore.parity \\
        --jobcore-driver mydriver=mypackage.testing:driver_factory

or, from a conftest or plugin of its own, by implementing the hook
``pytest_jobcore_driver_factories(config)`` to answer ``{"mydriver": factory}``.
``--jobcore-drivers memory,mydriver`` (or ``JOBCORE_TEST_DRIVERS``) narrows the run.

Scenarios that need a capability carry ``@pytest.mark.requires("notify")``; they are
skipped on drivers that do not declare it in ``driver.capabilities`` (never by name).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import Any

import pytest

from jobcore.clock import Clock, ManualClock
from jobcore.driver import JobDriver

__all__ = ["START", "DriverFactory", "memory_factory"]

DriverFactory = Callable[[Clock | None], AbstractContextManager[JobDriver]]
START = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
"""Where every scenario's clock starts."""

_FACTORIES = pytest.StashKey[dict[str, DriverFactory]]()


@contextlib.contextmanager
def memory_factory(clock: Clock | None) -> Iterator[JobDriver]:
    """A fresh in-memory driver on ``clock``."""
    from jobcore.drivers.memory import MemoryDriver  # noqa: PLC0415 - keep plugin import light

    driver = MemoryDriver(clock=clock)
    try:
        yield driver
    finally:
        driver.close()


class _HookSpecs:
    @pytest.hookspec
    def pytest_jobcore_driver_factories(self, config: pytest.Config) -> dict[str, DriverFactory]:  # type: ignore[empty-body]
        """Answer ``{name: factory}`` for drivers the parity suite should run against."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(_HookSpecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jobcore", "jobcore parity suite")
    group.addoption(
        "--jobcore-driver", action="append", default=[], metavar="NAME=MODULE:FACTORY",
        help="add a driver factory to the parity suite (repeatable)",
    )
    group.addoption(
        "--jobcore-drivers", default=None, metavar="NAMES",
        help="comma-separated driver names to run (default: every registered driver; "
        "env JOBCORE_TEST_DRIVERS)",
    )


def _load(spec: str) -> tuple[str, DriverFactory]:
    name, _, target = spec.partition("=")
    module_name, _, attr = target.partition(":")
    if not name or not module_name or not attr:
        raise pytest.UsageError(f"--jobcore-driver wants NAME=MODULE:FACTORY, got {spec!r}")
    factory: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        factory = getattr(factory, part)
    return name, factory


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires(capability): needs a driver capability")
    factories: dict[str, DriverFactory] = {"memory": memory_factory}
    for answer in config.hook.pytest_jobcore_driver_factories(config=config):
        factories.update(answer or {})
    for spec in config.getoption("--jobcore-driver", default=[]) or []:
        name, factory = _load(spec)
        factories[name] = factory
    wanted = config.getoption("--jobcore-drivers", default=None) or os.environ.get("JOBCORE_TEST_DRIVERS")
    if wanted:
        names = [n.strip() for n in wanted.split(",") if n.strip()]
        unknown = [n for n in names if n not in factories]
        if unknown:
            raise pytest.UsageError(f"unknown jobcore drivers {unknown}; registered: {sorted(factories)}")
        factories = {n: factories[n] for n in names}
    config.stash[_FACTORIES] = factories


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "driver_name" in metafunc.fixturenames:
        names = list(metafunc.config.stash[_FACTORIES])
        metafunc.parametrize("driver_name", names, ids=names)


@pytest.fixture
def clock() -> ManualClock:
    """The scenario's clock, starting at :data:`START`; move it with ``advance``."""
    return ManualClock(START)


@pytest.fixture
def driver_factory(request: pytest.FixtureRequest, driver_name: str) -> Iterator[Callable[..., JobDriver]]:
    """``make(clock=None, *, store_clock=False)``: another fresh driver of this parameter's
    kind, closed at teardown.

    For scenarios that need several independent stores (the stateful test makes one per
    example). Drivers made with the same clock share nothing but the clock. With
    ``store_clock=True`` the driver decides on its store's own clock (no clock injected).
    """
    factory = request.config.stash[_FACTORIES][driver_name]
    with contextlib.ExitStack() as stack:

        def make(clock: Clock | None = None, *, store_clock: bool = False) -> JobDriver:
            if store_clock:
                return stack.enter_context(factory(None))
            return stack.enter_context(factory(clock if clock is not None else ManualClock(START)))

        yield make


@pytest.fixture
def driver(request: pytest.FixtureRequest, driver_factory: Callable[..., JobDriver], clock: ManualClock) -> JobDriver:
    """A fresh, empty driver of the current kind, on the scenario's ``clock``."""
    made = driver_factory(clock)
    for mark in request.node.iter_markers("requires"):
        missing = [cap for cap in mark.args if cap not in made.capabilities]
        if missing:
            pytest.skip(f"driver lacks capability {', '.join(missing)}")
    return made


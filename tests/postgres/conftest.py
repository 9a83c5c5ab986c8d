"""Fixtures for the PostgreSQL driver's private tests: the session's server and fresh drivers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobcore.drivers.postgres import PostgresDriver
from jobcore.parity.plugin import START

from fixtures import postgres as fx
from jobcore.clock import ManualClock


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """The session server's URL (skipped, or failed under CI=true, when none can be had)."""
    return fx.server_url(request.config)


@pytest.fixture
def pool(request: pytest.FixtureRequest, pg_url: str) -> Any:
    """The session's shared connection pool."""
    return fx.shared_pool(request.config)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def make(pool: Any, clock: ManualClock) -> Iterator[Callable[..., Any]]:
    """``make(schema=None, migrate=True, **options)``: a driver in a fresh schema, dropped at teardown."""
    with contextlib.ExitStack() as stack:

        def build(schema: str | None = None, *, migrate: bool = True, target: Any = None, **options: Any) -> Any:
            name = schema or fx.schema_name()
            options.setdefault("clock", clock)
            driver = PostgresDriver(pool if target is None else target, schema=name, **options)
            stack.callback(fx.drop_schema, pool, name)
            stack.callback(driver.close)
            if migrate:
                driver.migrate()
            return driver

        yield build


@pytest.fixture
def driver(make: Callable[..., Any]) -> Any:
    """A migrated driver in its own schema, on the test's clock."""
    return make()

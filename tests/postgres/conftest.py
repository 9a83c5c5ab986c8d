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
from tests.postgres.proxy import Proxy, proxy_to, through


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


@pytest.fixture
def proxied(pg_url: str, pool: Any) -> Iterator[Callable[..., tuple[PostgresDriver, Proxy]]]:
    """``make(store_clock=False, **url_options)``: a migrated driver whose every connection passes
    a proxy of its own (``call_timeout`` 1000 ms unless given); on a ManualClock, or on the
    store's clock (as in production) with ``store_clock=True``."""
    made: list[tuple[PostgresDriver, Proxy]] = []

    def make(*, store_clock: bool = False, **options: Any) -> tuple[PostgresDriver, Proxy]:
        proxy = proxy_to(pg_url)
        options.setdefault("call_timeout", 1000)
        driver = PostgresDriver.from_url(
            through(pg_url, proxy, schema=fx.schema_name(), **options),
            clock=None if store_clock else ManualClock(START),
        )
        made.append((driver, proxy))
        driver.migrate()
        return driver, proxy

    yield make
    for driver, proxy in made:
        proxy.close()
        driver.close()
        fx.drop_schema(pool, driver.schema)

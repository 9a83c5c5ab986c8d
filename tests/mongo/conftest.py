"""Fixtures for the MongoDB driver's private tests: the session's server and fresh drivers."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from jobcore.parity.plugin import START

from fixtures import mongo as fx
from jobcore.clock import ManualClock


@pytest.fixture
def server(request: pytest.FixtureRequest) -> fx.MongoServer:
    """The session's MongoDB-wire server (skipped, or failed in CI, when none can be had)."""
    return fx.server(request.config)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def make(server: fx.MongoServer, clock: ManualClock) -> Iterator[Callable[..., Any]]:
    """``make(database=None, client=None, clock=None)``: a migrated driver; dropped at teardown."""
    with contextlib.ExitStack() as stack:

        def build(database: str | None = None, client: Any = None, clock_: Any = None) -> MongoDriver:
            name = database or f"jc_test_{uuid.uuid4().hex[:16]}"
            target = client if client is not None else server.client
            driver = MongoDriver(target, database=name, clock=clock_ or clock, **server.driver_options)
            driver.migrate()
            stack.callback(target.drop_database, name)
            stack.callback(driver.close)
            return driver

        yield build


@pytest.fixture
def driver(make: Callable[..., Any]) -> Any:
    return make()

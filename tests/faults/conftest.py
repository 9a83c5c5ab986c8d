"""Fixtures of the fault scenarios: an isolated store on a shared server, or on a server of the test's own.

Both are parametrised over the drivers the parity plugin registers (``driver_name``), so
``--jobcore-drivers`` / ``JOBCORE_TEST_DRIVERS`` narrow these scenarios too; a driver
whose store other processes cannot share (``shared_store``, the in-memory one) is
skipped by capability, through the project's ``requires`` marker.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jobcore.clock import SystemClock
from tests.faults import harness as h


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _check_requires(request: pytest.FixtureRequest, driver: Any) -> None:
    for mark in request.node.iter_markers("requires"):
        missing = [cap for cap in mark.args if cap not in driver.capabilities]
        if missing:
            pytest.skip(f"driver lacks capability {', '.join(missing)}")


@pytest.fixture
def store(request: pytest.FixtureRequest, driver_factory: Callable[..., Any]) -> h.Store:
    """A fresh schema (PostgreSQL) or database (MongoDB) on the session's server, on the real clock."""
    driver = driver_factory(SystemClock())  # the worker processes live in real time
    _check_requires(request, driver)
    try:
        return h.store_from_driver(driver)
    except ValueError as exc:
        pytest.skip(str(exc))


def _made(what: str, make: Callable[[], h.Store]) -> Iterator[h.Store]:
    """The store ``make()`` answers, closed after the test; where it cannot be had, a skip
    (a failure under CI=true)."""
    try:
        made = make()
    except Exception as exc:
        if _in_ci():
            pytest.fail(f"no {what} under CI=true: {exc}", pytrace=False)
        pytest.skip(f"no {what}: {exc}")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def own_store(
    request: pytest.FixtureRequest, driver_factory: Callable[..., Any], driver_name: str
) -> Iterator[h.Store]:
    """A store on a server of this test's own, which the test may stop and start."""
    probe = driver_factory(SystemClock())  # the session's driver of this kind: skips where it cannot be had
    _check_requires(request, probe)
    own = {
        "postgres": h.own_postgres,
        # PgBouncer refuses logins for server_login_retry (15 s by default) after the server failed
        # one: an outage seen through it would last that much longer than the server's own.
        "postgres-pgbouncer": lambda: h.own_postgres_through_pgbouncer(server_login_retry="1"),
        "mongo": h.own_mongo,
    }
    if driver_name not in own:
        pytest.skip(f"no server of the test's own for driver {driver_name}")
    yield from _made(f"server of the test's own for {driver_name}", own[driver_name])


@pytest.fixture
def own_odd_postgres(driver_name: str) -> Iterator[h.Store]:
    """A PostgreSQL server of this test's own whose every session defaults to what jobcore's
    statements do not read (:data:`~tests.faults.harness.OTHER_DEFAULTS`, as postgresql.conf would)."""
    if driver_name != "postgres":
        pytest.skip(f"server-wide session defaults are PostgreSQL's own, not {driver_name}'s")
    yield from _made("PostgreSQL server of the test's own", lambda: h.own_postgres(**h.OTHER_DEFAULTS))


@pytest.fixture
def own_pair(driver_name: str) -> Iterator[h.Store]:
    """A primary and a synchronous standby of this test's own (PostgreSQL's failover)."""
    if driver_name != "postgres":
        pytest.skip(f"the failover scenario is PostgreSQL's own (a primary and its standby), not {driver_name}'s")
    yield from _made("primary and standby of the test's own", h.own_postgres_pair)


@pytest.fixture
def faketime() -> None:
    """libfaketime (Debian's faketime) installed: skipped without it, except under CI=true where that fails."""
    h.require_faketime()


@pytest.fixture
def own_postgres_as_app(driver_name: str) -> Iterator[h.Store]:
    """A PostgreSQL server of this test's own, the driver and the workers on a role that is no
    superuser (:func:`~tests.faults.harness.own_postgres_as_app`): a role's connection limit binds it."""
    if driver_name != "postgres":
        pytest.skip(f"a role's connection limit is PostgreSQL's own, not {driver_name}'s")
    yield from _made("PostgreSQL server of the test's own", h.own_postgres_as_app)


@pytest.fixture
def own_postgres_on_small_disk(driver_name: str) -> Iterator[h.Store]:
    """A PostgreSQL server of this test's own whose jobs live on a disk the test can fill
    (:class:`~tests.faults.harness.SmallDisk`)."""
    if driver_name != "postgres":
        pytest.skip(f"the full-disk scenario fills a PostgreSQL tablespace, not {driver_name}'s store")
    yield from _made("PostgreSQL server of the test's own on a small disk", h.own_postgres_on_small_disk)

"""Transactional enqueue on the async driver: the job exists if and only if the caller's async transaction commits.

Both ways, on a psycopg ``AsyncConnection`` and on SQLAlchemy's ``AsyncSession`` and
``AsyncConnection`` (psycopg underneath): the job is checked from another connection
(the sync driver's pool), so what is counted is what the store holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import psycopg
import pytest
from jobcore.drivers.postgres import AsyncPostgresDriver

from jobcore.errors import OptionInvalid

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def store(make: Callable[..., Any]) -> Any:
    """A migrated sync driver in a fresh schema: the independent reader of what was stored."""
    return make()


def _async(store: Any, pg_url: str) -> AsyncPostgresDriver:
    return AsyncPostgresDriver(pg_url, schema=store.schema, pool_max=2)


def test_committed_async_transaction_keeps_the_job(store: Any, pg_url: str) -> None:
    """Enqueued on the caller's AsyncConnection: invisible until the commit, stored after it."""

    async def scenario() -> tuple[Any, Any]:
        async with _async(store, pg_url) as driver:
            async with await psycopg.AsyncConnection.connect(pg_url) as conn:
                job = await driver.enqueue("mail", {"to": "a"}, connection=conn)
                before = store.introspect.get(job.id)
                await conn.commit()
            return job, before

    job, before = run(scenario())
    assert before is None  # not visible outside the open transaction
    assert store.introspect.get(job.id) == job


def test_rolled_back_async_transaction_leaves_no_job(store: Any, pg_url: str) -> None:
    """Rolling the caller's AsyncConnection back takes the job (and the batch) with it."""

    async def scenario() -> list[Any]:
        async with _async(store, pg_url) as driver:
            async with await psycopg.AsyncConnection.connect(pg_url) as conn:
                one = await driver.enqueue("mail", {"to": "a"}, connection=conn)
                many = await driver.enqueue_many([{"name": "a"}, {"name": "b"}], connection=conn)
                await conn.rollback()
            return [one, *many]

    jobs = run(scenario())
    assert [store.introspect.get(j.id) for j in jobs] == [None, None, None]
    assert store.claim(["default"], worker_id="w", lease=30).claimed == ()


def test_transaction_block_undone_by_an_exception(store: Any, pg_url: str) -> None:
    """Inside ``async with conn.transaction()``, the caller's exception undoes the enqueue."""

    async def scenario() -> tuple[Any, Any]:
        gone: list[Any] = []
        async with _async(store, pg_url) as driver, await psycopg.AsyncConnection.connect(
            pg_url, autocommit=True
        ) as conn:

            async def failing_unit_of_work() -> None:
                async with conn.transaction():
                    gone.append(await driver.enqueue("x", connection=conn))
                    raise RuntimeError("the caller's own work failed")

            with pytest.raises(RuntimeError):
                await failing_unit_of_work()
            async with conn.transaction():
                kept = await driver.enqueue("x", connection=conn)
        return gone[0], kept

    gone, kept = run(scenario())
    assert store.introspect.get(gone.id) is None
    assert store.introspect.get(kept.id) == kept


def test_sync_connection_refused_by_the_async_driver(store: Any, pg_url: str) -> None:
    """A sync psycopg Connection is not the async driver's handle: refused, nothing written."""

    async def scenario() -> None:
        async with _async(store, pg_url) as driver:
            with psycopg.connect(pg_url) as conn, pytest.raises(OptionInvalid, match="AsyncConnection"):
                await driver.enqueue("x", connection=conn)

    run(scenario())
    assert store.introspect.stats().counts == {}


# -- SQLAlchemy (a test dependency only) ------------------------------------------------------


def _engine(pg_url: str) -> Any:
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    return create_async_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_sqlalchemy_async_session(store: Any, pg_url: str, commit: bool) -> None:
    """An AsyncSession is accepted as it is: the job joins the session's transaction."""
    from sqlalchemy.ext.asyncio import AsyncSession  # noqa: PLC0415

    async def scenario() -> Any:
        engine = _engine(pg_url)
        try:
            async with _async(store, pg_url) as driver:
                async with AsyncSession(engine) as session:
                    job = await driver.enqueue("mail", {"order": 1}, connection=session)
                    await (session.commit() if commit else session.rollback())
                return job
        finally:
            await engine.dispose()

    job = run(scenario())
    assert (store.introspect.get(job.id) == job) is commit
    assert (store.introspect.get(job.id) is None) is not commit


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_sqlalchemy_async_connection(store: Any, pg_url: str, commit: bool) -> None:
    """An SQLAlchemy AsyncConnection (``engine.connect()``) is accepted too, batch included."""

    async def scenario() -> list[Any]:
        engine = _engine(pg_url)
        try:
            async with _async(store, pg_url) as driver, engine.connect() as conn:
                await conn.begin()
                jobs = await driver.enqueue_many([{"name": "a"}, {"name": "b"}], connection=conn)
                await (conn.commit() if commit else conn.rollback())
                return jobs
        finally:
            await engine.dispose()

    jobs = run(scenario())
    assert [store.introspect.get(j.id) for j in jobs] == (jobs if commit else [None, None])

"""Client options that cannot keep the rules: unacknowledged writes, and reads from secondaries.

With ``w=0`` PyMongo sends a write and never reads its answer: a refused duplicate key, an ack
that did not land and a claim's answer all go unseen (the first enqueue on such a client
failed as "could not reserve enqueue sequence numbers", JC_DB_ERROR). It is refused when the
driver is built, before anything is written. A ``readPreference`` other than primary is
overridden on the driver's own collections: a claim, an ack and a rescue decide on what they
read, and a secondary's copy may be behind (no replica set runs here, so that half is
checked on the collections' settings only).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobcore.drivers.mongo import AsyncMongoDriver, MongoDriver
from pymongo import AsyncMongoClient, MongoClient, ReadPreference

import jobcore
from fixtures import mongo as fx
from jobcore.errors import OptionInvalid, UrlInvalid


def _with(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


@pytest.mark.parametrize("option", ["w=0", "W=0", "w=0&journal=false"])
def test_a_uri_asking_for_unacknowledged_writes_is_refused_and_nothing_is_written(
    server: fx.MongoServer, option: str,
) -> None:
    """``w=0`` in the URI: JC_URL_INVALID naming it, from the driver and from ``jobcore.connect``; no database made."""
    name = f"jc_test_{uuid.uuid4().hex[:16]}"
    url = _with(server.url.replace("/?", f"/{name}?") if "/?" in server.url else f"{server.url.rstrip('/')}/{name}",
                option)
    for build in (lambda: MongoDriver.from_url(url, auto_migrate=True), lambda: jobcore.connect(url)):
        with pytest.raises(UrlInvalid) as refused:
            build().enqueue("x")
        assert refused.value.code == "JC_URL_INVALID"
        assert "asks for w=0: unacknowledged writes cannot keep jobcore's rules" in refused.value.cause
        assert refused.value.fix.startswith("drop w=0")
    assert name not in server.client.list_database_names()


def test_a_client_with_unacknowledged_writes_is_refused_and_left_as_it_was(server: fx.MongoServer) -> None:
    """A ``MongoClient(w=0)`` of the caller's: JC_OPTION_INVALID; the client stays open for its owner."""
    client: MongoClient[Any] = MongoClient(server.url, w=0)
    try:
        with pytest.raises(OptionInvalid, match="the client's write concern is w=0"):
            MongoDriver(client, database="jc_never")
        assert client.admin.command("ping")["ok"] == 1.0
    finally:
        client.close()

    async def scenario() -> None:
        aclient: AsyncMongoClient[Any] = AsyncMongoClient(server.url, w=0)
        try:
            with pytest.raises(OptionInvalid, match="the client's write concern is w=0"):
                AsyncMongoDriver(aclient, database="jc_never")
        finally:
            await aclient.close()

    asyncio.run(scenario())


@pytest.fixture
def clients(server: fx.MongoServer) -> Iterator[Callable[..., MongoClient[Any]]]:
    """``clients(**options)``: a client of the test's own, closed after the drivers made on it are dropped."""
    made: list[MongoClient[Any]] = []

    def build(**options: Any) -> MongoClient[Any]:
        made.append(MongoClient(server.url, **options))
        return made[-1]

    yield build
    for client in made:
        client.close()


def test_acknowledged_write_concerns_are_kept(clients: Any, make: Any) -> None:
    """``w=1`` works as before: a keyed enqueue answers its duplicate."""
    driver = make(client=clients(w=1))
    first, second = driver.enqueue("x", key="k"), driver.enqueue("x", key="k")
    assert (second.id, second.duplicate) == (first.id, True)


def test_the_drivers_collections_read_from_the_primary_whatever_the_client_prefers(clients: Any,
                                                                                     make: Any) -> None:
    """A client reading from secondaries by default: the driver's jobs, leases and schedules read from the primary."""
    client = clients(readPreference="secondaryPreferred")
    driver = make(client=client)
    assert client.read_preference == ReadPreference.SECONDARY_PREFERRED
    # The leases' and schedules' collections come from the same database object.
    assert driver._jobs.database.read_preference == ReadPreference.PRIMARY
    assert [c.read_preference for c in (driver._jobs, driver._meta)] == [ReadPreference.PRIMARY] * 2
    job = driver.enqueue("x")
    assert driver.introspect.get(job.id) == job

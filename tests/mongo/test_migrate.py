"""Explicit migrations on MongoDB: no index is created unless told to, `migrate` says what it did,
and a store a newer jobcore set up is used when it says this jobcore may."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobcore.drivers.mongo import MongoDriver
from jobcore.drivers.mongo import _docs as d

from fixtures import mongo as fx
from jobcore.clock import ManualClock
from jobcore.errors import SchemaOutdated


@pytest.fixture
def fresh(server: fx.MongoServer, clock: ManualClock) -> Iterator[Callable[..., MongoDriver]]:
    """``fresh(**options)``: a driver on a database nothing was set up in, not migrated; dropped at teardown."""
    made: list[tuple[MongoDriver, str]] = []
    name = f"jc_test_{uuid.uuid4().hex[:16]}"

    def build(**options: Any) -> MongoDriver:
        driver = MongoDriver(server.client, database=name, clock=clock, **{**server.driver_options, **options})
        made.append((driver, name))
        return driver

    yield build
    for driver, db in made:
        driver.close()
        server.client.drop_database(db)


def test_an_unmigrated_database_is_refused_and_left_untouched(fresh: Callable[..., MongoDriver]) -> None:
    driver = fresh()
    with pytest.raises(SchemaOutdated, match="is not set up") as info:
        driver.enqueue("x")
    assert "jobcore migrate" in info.value.fix
    assert driver._jobs.database.list_collection_names() == []


def test_dry_run_lists_the_commands_and_writes_nothing(fresh: Callable[..., MongoDriver]) -> None:
    driver = fresh()
    plan = driver.migrate(dry_run=True)
    assert (plan.before, plan.after, plan.applied, plan.language) == (None, d.SCHEMA_VERSION, False, "mongosh")
    assert plan.describe() == f"would install version {d.SCHEMA_VERSION}"
    created = [s for s in plan.statements if ".createIndex(" in s]
    assert len(created) == len(d.INDEXES)
    assert all(f"name: {model.document['name']!r}" in s for model, s in zip(d.INDEXES, created, strict=True))
    assert "updateOne({_id: 'schema'}" in plan.statements[-1]
    assert driver._jobs.database.list_collection_names() == []


def test_the_mongosh_commands_set_the_store_up(fresh: Callable[..., MongoDriver]) -> None:
    """What a DBA applies from `jobcore migrate --sql` (here: each command run through the client's own
    calls) leaves a store that migrate finds current and that enqueues and claims."""
    driver = fresh()
    plan = driver.migrate(dry_run=True)
    db = driver._jobs.database
    for model in d.INDEXES:
        spec = dict(model.document)
        db.command({"createIndexes": driver._jobs.name, "indexes": [spec]})
    db[driver._meta.name].update_one({"_id": "seq"}, {"$setOnInsert": {"value": 0}}, upsert=True)
    db[driver._meta.name].update_one(
        {"_id": "schema"}, {"$set": {"version": d.SCHEMA_VERSION, "compatible_from": d.COMPATIBLE_FROM}}, upsert=True
    )
    assert len(plan.statements) == len(d.INDEXES) + 2
    again = fresh()
    assert again.migrate(dry_run=True).statements == ()
    job = again.enqueue("x")
    assert again.claim(["default"], worker_id="w", lease=30).claimed[0].job.id == job.id


def test_migrate_says_installed_then_already(fresh: Callable[..., MongoDriver]) -> None:
    driver = fresh()
    first = driver.migrate()
    assert first.describe() == f"installed version {d.SCHEMA_VERSION}"
    assert len(first.statements) == len(d.INDEXES) + 2
    assert driver.enqueue("x").state == "ready"
    again = fresh().migrate()
    assert (again.describe(), again.statements) == (f"already at version {d.SCHEMA_VERSION}", ())


def test_auto_migrate_sets_up_on_first_use(fresh: Callable[..., MongoDriver]) -> None:
    driver = fresh(auto_migrate=True)
    assert driver.enqueue("x").state == "ready"
    assert fresh().migrate(dry_run=True).statements == ()


def test_auto_migrate_in_the_url_is_jobcore_s_own_option(server: fx.MongoServer) -> None:
    name = f"jc_test_{uuid.uuid4().hex[:16]}"
    base, _, query = server.url.partition("?")
    url = f"{base.rstrip('/')}/{name}?{query + '&' if query else ''}auto_migrate=true"
    driver = MongoDriver.from_url(url, **server.driver_options)
    try:
        assert driver.auto_migrate is True
        assert driver.enqueue("x").state == "ready"
        assert "auto_migrate" not in driver.url
    finally:
        driver.close()
        server.client.drop_database(name)


def _newer(driver: MongoDriver, compatible_from: int) -> None:
    """What a next release's migration records."""
    driver._meta.update_one(
        {"_id": "schema"}, {"$set": {"version": d.SCHEMA_VERSION + 1, "compatible_from": compatible_from}}
    )


def test_a_newer_store_that_declares_this_release_compatible_is_used(fresh: Callable[..., MongoDriver]) -> None:
    setup = fresh()
    setup.migrate()
    _newer(setup, compatible_from=d.SCHEMA_VERSION)
    older = fresh()
    assert older.enqueue("x").state == "ready"
    left = older.migrate()
    newer, ours = d.SCHEMA_VERSION + 1, d.SCHEMA_VERSION
    assert left.describe() == f"at version {newer}, newer than this jobcore's {ours}: left alone"
    assert setup._meta.find_one({"_id": "schema"})["version"] == d.SCHEMA_VERSION + 1  # not moved back


def test_a_newer_store_that_breaks_this_release_is_refused(fresh: Callable[..., MongoDriver]) -> None:
    setup = fresh()
    setup.migrate()
    _newer(setup, compatible_from=d.SCHEMA_VERSION + 1)
    with pytest.raises(SchemaOutdated, match="newer jobcore") as info:
        fresh().enqueue("x")
    assert "upgrade jobcore" in info.value.fix

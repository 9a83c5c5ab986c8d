"""Migrations: fresh install, idempotence, concurrent runs, upgrade from every earlier version."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _schema, make_pool
from psycopg import sql

from fixtures import postgres as fx
from jobcore.current import connect
from jobcore.errors import SchemaOutdated


def _version(pool: Any, schema: str) -> int | None:
    with pool.connection() as conn:
        return _schema.current_version(conn, schema)


def test_fresh_schema_migrates_to_the_latest_version(make: Callable[..., Any], pool: Any) -> None:
    """migrate() on an empty database installs every step and records the version."""
    driver = make()
    assert _version(pool, driver.schema) == _schema.LATEST
    assert driver.enqueue("a").state == "ready"


def test_migrate_is_idempotent(make: Callable[..., Any], pool: Any) -> None:
    """A second and third migrate() change nothing and keep the data."""
    driver = make()
    job = driver.enqueue("a", {"x": 1})
    driver.migrate()
    driver.migrate()
    assert _version(pool, driver.schema) == _schema.LATEST
    with pool.connection() as conn:
        rows = conn.execute(
            sql.SQL("SELECT version FROM {} ORDER BY version").format(sql.Identifier(driver.schema, "schema_versions"))
        ).fetchall()
    assert [r[0] for r in rows] == list(range(1, _schema.LATEST + 1))
    assert driver.introspect.get(job.id) == job


def test_concurrent_migrations_apply_each_step_once(pg_url: str, make: Callable[..., Any], pool: Any) -> None:
    """Several processes' worth of connections migrating one schema at once all succeed, each step once."""
    schema = fx.schema_name()
    make(schema, migrate=False)  # registers the drop at teardown
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                barrier.wait()
                _schema.migrate(conn, schema)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _version(pool, schema) == _schema.LATEST


@pytest.mark.parametrize("start", range(_schema.LATEST))
def test_upgrade_from_every_earlier_version(start: int, make: Callable[..., Any], pool: Any) -> None:
    """A store at any earlier version replays the missing steps; rows written before survive."""
    schema = fx.schema_name()
    driver = make(schema, migrate=False)
    with pool.connection() as conn:
        _schema.migrate(conn, schema, target=start)
    assert _version(pool, schema) == (start if start else 0)
    if start >= 1:  # the jobs table exists: put a row in it the old way
        with pool.connection() as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (name, queue, payload, state, priority, attempt, max_attempts, run_at,"
                    " created_at, claim_no, errors) VALUES ('old', 'default', '{{\"a\":1}}', 'ready', 0, 0, 3,"
                    " '2030-01-01T00:00Z', '2030-01-01T00:00Z', 0, '[]')"
                ).format(sql.Identifier(schema, "jobs"))
            )
    with pytest.raises(SchemaOutdated):
        driver.enqueue("refused")  # an old schema is refused until migrated
    driver.migrate()
    assert _version(pool, schema) == _schema.LATEST
    claimed = driver.claim(["default"], worker_id="w", limit=5, lease=30).claimed
    if start >= 1:
        assert [c.job.payload for c in claimed] == [{"a": 1}]
    new = driver.enqueue("new", key="k")
    assert driver.enqueue("new", key="k").id == new.id


def test_missing_schema_is_refused_with_a_coded_error(make: Callable[..., Any]) -> None:
    """A driver on an empty schema raises JC_SCHEMA_OUTDATED naming the fix, and writes nothing."""
    driver = make(migrate=False)
    with pytest.raises(SchemaOutdated) as info:
        driver.enqueue("x")
    assert info.value.code == "JC_SCHEMA_OUTDATED"
    assert "migrate" in info.value.fix


def test_auto_migrate_installs_on_first_use(make: Callable[..., Any], pool: Any) -> None:
    """auto_migrate=True (tests, demos) installs the schema on the first call."""
    driver = make(migrate=False, auto_migrate=True)
    assert driver.enqueue("x").state == "ready"
    assert _version(pool, driver.schema) == _schema.LATEST


def test_a_newer_schema_is_refused(make: Callable[..., Any], pool: Any) -> None:
    """A store migrated by a newer jobcore is refused rather than misread."""
    driver = make()
    with pool.connection() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(sql.Identifier(driver.schema, "schema_versions")),
            (_schema.LATEST + 1,),
        )
    fresh = make(driver.schema, migrate=False)
    with pytest.raises(SchemaOutdated, match="newer"):
        fresh.enqueue("x")
    with pytest.raises(SchemaOutdated, match="newer"):
        fresh.migrate()


def test_schema_name_is_quoted(make: Callable[..., Any]) -> None:
    """A schema name needing quotes (mixed case, spaces, a quote) works: it is an identifier, not text."""
    driver = make(f'Odd "Name" {fx.schema_name()}'[:60])
    job = driver.enqueue("x", {"k": "v"})
    assert driver.introspect.get(job.id) == job


def test_from_url_takes_jobcore_options(pg_url: str, pool: Any) -> None:
    """from_url strips schema/auto_migrate from the URL and passes the rest to libpq."""
    schema = fx.schema_name()
    sep = "&" if "?" in pg_url else "?"
    driver = connect(f"{pg_url}{sep}schema={schema}&auto_migrate=true&application_name=jc")
    try:
        assert isinstance(driver, PostgresDriver)
        assert driver.schema == schema
        assert driver.enqueue("x").id
    finally:
        driver.close()
        fx.drop_schema(pool, schema)


def test_url_reaches_the_same_store(driver: Any) -> None:
    """driver.url (schema included) opens another driver on the same store, as the CLI does."""
    job = driver.enqueue("x", {"a": 1})
    other = connect(driver.url)
    try:
        assert other.introspect.get(job.id) == job
    finally:
        other.close()


def test_make_pool_keeps_the_callers_session_options(pg_url: str) -> None:
    """``options`` in the URL survive next to the driver's own (UTC, generic plans)."""
    sep = "&" if "?" in pg_url else "?"
    pool = make_pool(f"{pg_url}{sep}options=-c%20application_name%3Djc_opts", min_size=1)
    try:
        with pool.connection() as conn:
            assert conn.execute("SHOW application_name").fetchone() == ("jc_opts",)
            assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
    finally:
        pool.close()

"""Migrations: fresh install, idempotence, concurrent runs, upgrade from every earlier version."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _schema, _sql, make_pool
from psycopg import sql

from fixtures import postgres as fx
from jobcore.current import connect
from jobcore.errors import SchemaOutdated
from jobcore.registry import Registry
from jobcore.worker import Worker


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
    assert _version(pool, schema) == (start or None)
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
    left = fresh.migrate()  # an older jobcore's migrate leaves a newer store alone, and says so
    assert (left.before, left.after, left.statements) == (_schema.LATEST + 1, _schema.LATEST + 1, ())
    assert "newer" in left.describe()
    with pytest.raises(SchemaOutdated, match="newer"):
        fresh.enqueue("x")


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


def test_migrate_says_what_it_did(make: Callable[..., Any], pool: Any) -> None:
    """migrate() answers installed / moved from M to N / already at N, with the statements it ran."""
    schema = fx.schema_name()
    driver = make(schema, migrate=False)
    first = driver.migrate()
    assert (first.before, first.after, first.applied) == (None, _schema.LATEST, True)
    assert first.describe() == f"installed version {_schema.LATEST}"
    assert any("CREATE TABLE" in s for s in first.statements)
    again = driver.migrate()
    assert (again.before, again.after, again.statements) == (_schema.LATEST, _schema.LATEST, ())
    assert again.describe() == f"already at version {_schema.LATEST}"

    older = fx.schema_name()
    old = make(older, migrate=False)
    with pool.connection() as conn:
        _schema.migrate(conn, older, target=4)
    moved = old.migrate()
    assert moved.describe() == f"moved from version 4 to {_schema.LATEST}"
    assert _version(pool, older) == _schema.LATEST


def test_dry_run_writes_nothing_and_its_sql_installs_the_schema(make: Callable[..., Any], pool: Any) -> None:
    """migrate(dry_run=True) reads only; the SQL it lists, applied by hand (as a DBA would), is a full install."""
    schema = fx.schema_name()
    driver = make(schema, migrate=False)
    plan = driver.migrate(dry_run=True)
    assert (plan.before, plan.after, plan.applied, plan.language) == (None, _schema.LATEST, False, "sql")
    assert plan.describe() == f"would install version {_schema.LATEST}"
    assert _version(pool, schema) is None  # nothing was written
    with pytest.raises(SchemaOutdated):
        driver.enqueue("refused")
    with pool.connection() as conn, conn.transaction():
        for statement in plan.statements:
            conn.execute(statement.encode())
    assert _version(pool, schema) == _schema.LATEST
    fresh = make(schema, migrate=False)
    assert fresh.enqueue("x").state == "ready"
    assert fresh.migrate(dry_run=True).statements == ()


def test_a_store_from_before_the_compatibility_record_is_read_and_upgraded(make: Callable[..., Any], pool: Any) -> None:
    """A schema_versions table without compatible_from (stores set up before it existed) works as it is."""
    schema = fx.schema_name()
    make(schema, migrate=False)
    with pool.connection() as conn, conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (version integer PRIMARY KEY, applied_at timestamptz NOT NULL"
                             " DEFAULT now())").format(sql.Identifier(schema, "schema_versions")))
        for version, step in enumerate(_schema.MIGRATIONS, start=1):
            for statement in step:
                conn.execute(_sql.render(statement, schema))
            conn.execute(sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(
                sql.Identifier(schema, "schema_versions")), (version,))
    driver = make(schema, migrate=False)
    assert driver.enqueue("x").state == "ready"
    assert driver.migrate().describe() == f"already at version {_schema.LATEST}"


def _next_step(pool: Any, schema: str, compatible_from: int) -> None:
    """What a next release's additive migration does: a defaulted column, an index, its record."""
    with pool.connection() as conn, conn.transaction():
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN tenant text NOT NULL DEFAULT ''").format(
            sql.Identifier(schema, "jobs")))
        conn.execute(sql.SQL("CREATE INDEX jobs_tenant ON {} (tenant)").format(sql.Identifier(schema, "jobs")))
        conn.execute(sql.SQL("INSERT INTO {} (version, compatible_from) VALUES (%s, %s)").format(
            sql.Identifier(schema, "schema_versions")), (_schema.LATEST + 1, compatible_from))


def test_workers_keep_running_on_a_newer_schema_that_declares_itself_compatible(
    make: Callable[..., Any], pool: Any
) -> None:
    """Rolling deploy: the next release migrates first (an additive step declaring compatible_from = this
    release's version); this release's worker, started before and after, drains its jobs on it."""
    driver = make()
    registry = Registry()
    done: list[int] = []
    registry.job(name="add", queue="q")(lambda payload: done.append(payload["n"]))
    for n in range(5):
        driver.enqueue("add", {"n": n}, queue="q")
    _next_step(pool, driver.schema, compatible_from=_schema.LATEST)
    for n in range(5, 10):
        driver.enqueue("add", {"n": n}, queue="q")
    later = make(driver.schema, migrate=False)  # a process of this release started after the migration
    assert later.migrate(dry_run=True).describe().startswith(f"at version {_schema.LATEST + 1}, newer")
    for n in range(10, 15):
        later.enqueue("add", {"n": n}, queue="q")
    worker = Worker(["q"], driver=later, registry=registry, concurrency=2, poll_interval=0.05, scheduler=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        pause = threading.Event()
        for _ in range(600):
            if later.introspect.stats().count("done") == 15:
                break
            pause.wait(0.05)
    finally:
        worker.stop()
        thread.join(30)
    assert sorted(done) == list(range(15))
    left = later.migrate()
    assert left.describe() == f"at version {_schema.LATEST + 1}, newer than this jobcore's {_schema.LATEST}: left alone"


def test_a_newer_schema_that_breaks_this_release_is_refused(make: Callable[..., Any], pool: Any) -> None:
    """A next step that declares itself incompatible (compatible_from beyond this release) is refused, coded."""
    driver = make()
    _next_step(pool, driver.schema, compatible_from=_schema.LATEST + 1)
    fresh = make(driver.schema, migrate=False)
    with pytest.raises(SchemaOutdated, match="upgrade jobcore"):
        fresh.enqueue("x")
    assert len(_schema.COMPATIBLE_FROM) == len(_schema.MIGRATIONS)
    assert all(1 <= c <= n for n, c in enumerate(_schema.COMPATIBLE_FROM, start=1))

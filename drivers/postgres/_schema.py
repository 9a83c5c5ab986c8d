# Generated from _schema_async.py by tools/unasync.py: edit that file, then run the tool.
"""jobcore's own PostgreSQL schema: versioned migrations, applied in order, safe to race.

``MIGRATIONS[n - 1]`` is the list of statements taking a schema from version ``n - 1``
to ``n``; the table ``schema_versions`` holds one row per applied version. Steps are
only ever appended, never edited, so any older store replays the missing steps in
order. :func:`migrate` takes a transaction-scoped advisory lock keyed on the schema
name first, so two processes migrating at once apply each step exactly once: the
second waits, then finds nothing left to do.

Rolling deploys: ``COMPATIBLE_FROM[n - 1]`` is the oldest schema version whose code
still runs correctly against a store at version ``n``; it is recorded next to the
version. A driver meets a store newer than itself without refusing it when the store's
recorded ``compatible_from`` is at most the driver's :data:`LATEST`, so workers of the
previous release keep running while the new release's ``migrate`` has already run
(expand first; a step that breaks older code is only ever released after a release
that no longer needs what it removes). See docs/deploy.md, "Upgrades".

The statements, migration steps included, are in :mod:`._sql.schema` (index design
there too); this module decides which to run.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import psycopg

from ._pool import READ_COMMITTED
from ._sql import render
from ._sql.schema import (
    ADD_COMPATIBLE,
    CREATE_SCHEMA,
    CREATE_VERSIONS,
    MIGRATE_LOCK,
    MIGRATIONS,
    NO_TIMEOUT,
    READ_VERSION,
    RECORD_VERSION,
    SCHEMA_EXISTS,
    TABLE_EXISTS,
)

__all__ = ["COMPATIBLE_FROM", "LATEST", "MIGRATIONS", "StoreVersion", "current_version", "migrate", "plan"]

LATEST: Final = len(MIGRATIONS)

COMPATIBLE_FROM: Final[tuple[int, ...]] = (1, 2, 3, 4, 5, 6, 6, 6, 6, 6)
"""Per step, the oldest schema version whose code runs against a store after that step.
Steps 1-6 predate the record and claim nothing (each needs its own release's code); a
step that only adds (a nullable or defaulted column, an index, a table) says ``n - 1``.
Steps 7-10 (the nullable ``progress`` and ``trace`` columns, the defaulted ``waited`` one,
the dependency columns with their index and trigger) only add what version 6 code never
names, so each says 6: a rolling deploy from a version 6 release to this one keeps the old
workers running (the trigger settles a parent's children whichever release ended it)."""


class StoreVersion(NamedTuple):
    """A store's schema version, and the oldest version whose code runs against it."""

    version: int
    compatible_from: int


def current_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's version, or None when jobcore's schema is not installed there."""
    found = read_version(conn, schema)
    return None if found is None else found.version


def read_version(conn: psycopg.Connection[Any], schema: str) -> StoreVersion | None:
    """The schema's version and compatibility, or None when jobcore's schema is not installed there.

    A store without a recorded ``compatible_from`` needs code of its own version."""
    table = psycopg.sql.Identifier(schema, "schema_versions").as_string()
    row = conn.execute(render(TABLE_EXISTS), {"name": table}).fetchone()
    if row is None or not row[0]:
        return None
    found = conn.execute(render(READ_VERSION, schema)).fetchone()
    if found is None:
        return StoreVersion(0, 0)
    version = int(found[0])
    return StoreVersion(version, version if found[1] is None else int(found[1]))


def _steps(schema: str, before: int | None, target: int, *, create_schema: bool) -> list[bytes]:
    """The statements taking ``schema`` from ``before`` (None: nothing installed) to ``target``."""
    start = before or 0
    if start >= target:
        return []
    out: list[bytes] = []
    if create_schema:
        out.append(render(CREATE_SCHEMA, schema))
    out.append(render(CREATE_VERSIONS if before is None else ADD_COMPATIBLE, schema))
    for version in range(start + 1, target + 1):
        out.extend(render(statement, schema) for statement in MIGRATIONS[version - 1])
        out.append(render(
            RECORD_VERSION, schema,
            version=psycopg.sql.Literal(version), compatible=psycopg.sql.Literal(COMPATIBLE_FROM[version - 1]),
        ))
    return out


def _schema_exists(conn: psycopg.Connection[Any], schema: str) -> bool:
    name = psycopg.sql.Identifier(schema).as_string()
    row = conn.execute(render(SCHEMA_EXISTS), {"name": name}).fetchone()
    return bool(row and row[0])


def plan(conn: psycopg.Connection[Any], schema: str, target: int = LATEST) -> tuple[int | None, list[str]]:
    """The store's version now and the SQL :func:`migrate` would run (read-only).

    The statements are complete (identifiers quoted, values inlined), in order, for a
    DBA to apply in one transaction: ``jobcore migrate --sql`` prints them so."""
    before = current_version(conn, schema)
    steps = _steps(schema, before, target, create_schema=not _schema_exists(conn, schema))
    return before, [step.decode() for step in steps]


def migrate(conn: psycopg.Connection[Any], schema: str, target: int = LATEST) -> tuple[int | None, list[str]]:
    """Bring ``schema`` up to version ``target`` in one transaction.

    Answers the version before (None: not installed) and the statements that ran. Runs
    on ``conn`` (its own transaction). Idempotent; concurrent callers serialise on the
    advisory lock. A store newer than ``target`` is left alone. ``CREATE SCHEMA`` is
    skipped when the schema exists, so a role that owns the schema but may not create
    schemas in the database can migrate it.
    """
    with conn.transaction():
        # The lock, then the version read after it: at read committed whatever the session's default.
        conn.execute(READ_COMMITTED)
        # DDL on a large table may take long: no statement timeout of the session (the
        # driver's default follows its call_timeout) cuts a migration short.
        conn.execute(render(NO_TIMEOUT))
        conn.execute(render(MIGRATE_LOCK), {"schema": schema})
        before = current_version(conn, schema)
        steps = _steps(schema, before, target, create_schema=not _schema_exists(conn, schema))
        for statement in steps:
            conn.execute(statement)
    return before, [step.decode() for step in steps]

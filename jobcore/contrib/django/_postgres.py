""":class:`DjangoPostgresDriver`: the PostgreSQL driver whose enqueues join ``transaction.atomic()``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from django.db import connections

from jobcore.driver import Duration
from jobcore.drivers.postgres import PostgresDriver  # type: ignore[import-not-found]
from jobcore.errors import NotSupported
from jobcore.records import Job

__all__ = ["DjangoPostgresDriver", "django_connection"]


def django_connection(alias: str) -> psycopg.Connection[Any]:
    """The psycopg connection under Django's connection ``alias`` (connected first), in
    whatever transaction Django has open on it."""
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise NotSupported(
            f"Django database {alias!r} is {wrapper.vendor}, and only a PostgreSQL connection can carry a job",
            "enqueue on a PostgreSQL database alias (using=...), or without joining Django's transaction",
        )
    wrapper.ensure_connection()
    conn = wrapper.connection
    if not isinstance(conn, psycopg.Connection):
        raise NotSupported(
            f"Django database {alias!r} runs on {type(conn).__module__}, not psycopg 3",
            "pip install 'psycopg[binary]>=3.3.6' (Django uses psycopg 3 when it is installed)",
        )
    return conn


class DjangoPostgresDriver(PostgresDriver):
    """A :class:`~jobcore.drivers.postgres.PostgresDriver` that, called inside
    ``transaction.atomic()`` on Django database ``django_database``, enqueues on Django's own
    connection, so the job commits or rolls back with the block (savepoints included).
    Outside an atomic block (Django's autocommit) it enqueues on its own pool, at once.

    Args:
        django_database: The Django database alias whose transactions enqueues join.
        join_atomic: ``False``: never join (every enqueue commits at once on the driver's pool).
        database_name: The ``NAME`` of the Django database the driver was built on, or ``None``
            (built from a URL): the migration re-points the process-wide driver when Django's
            test runner migrates a test database of another name.
        dsn_or_pool, options: As for :class:`~jobcore.drivers.postgres.PostgresDriver`.
    """

    def __init__(
        self, dsn_or_pool: Any, *, django_database: str = "default", join_atomic: bool = True,
        database_name: str | None = None, **options: Any,
    ) -> None:
        super().__init__(dsn_or_pool, **options)
        self.django_database = django_database
        self.join_atomic = join_atomic
        self.database_name = database_name

    def atomic_connection(self) -> psycopg.Connection[Any] | None:
        """Django's connection when this thread is inside ``atomic()`` on :attr:`django_database`, else None."""
        if not self.join_atomic or not connections[self.django_database].in_atomic_block:
            return None
        return django_connection(self.django_database)

    def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, connection: psycopg.Connection[Any] | None = None,
    ) -> Job:
        """Store one job; inside ``atomic()`` it joins Django's transaction (``connection=`` wins)."""
        return super().enqueue(
            name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts,
            key=key, connection=connection if connection is not None else self.atomic_connection(),
        )

    def enqueue_many(self, specs: Iterable[Any], *, connection: psycopg.Connection[Any] | None = None) -> list[Job]:
        """Store a batch; inside ``atomic()`` it joins Django's transaction (``connection=`` wins)."""
        return super().enqueue_many(
            specs, connection=connection if connection is not None else self.atomic_connection()
        )

    def __repr__(self) -> str:
        return f"DjangoPostgresDriver(schema={self.schema!r}, django_database={self.django_database!r})"

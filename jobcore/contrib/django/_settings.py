"""``settings.JOBCORE`` read and checked, and the driver it describes built.

Without ``JOBCORE`` (or without its ``URL``) the driver is a :class:`DjangoPostgresDriver`
on the server and database of ``DATABASES[JOBCORE["DATABASE"]]`` (``"default"``), and
``handle.enqueue(...)`` inside ``transaction.atomic()`` joins Django's transaction. With a
``URL`` the driver is ``jobcore.connect(URL, **OPTIONS)``, and joins only with
``JOIN_ATOMIC: True`` (a ``postgresql://`` URL naming the same database as ``DATABASE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from jobcore.driver import JobDriver
from jobcore.errors import ConfigurationError

__all__ = ["KEYS", "Config", "build_driver", "conninfo_of", "read_config"]

KEYS = ("URL", "OPTIONS", "DATABASE", "JOIN_ATOMIC")
"""The keys ``settings.JOBCORE`` may hold."""

_DJANGO_ONLY_OPTIONS = frozenset({
    "isolation_level", "server_side_binding", "assume_role", "pool", "cursor_factory", "context",
    "prepare_threshold",
})
"""Keys of a Django ``DATABASES[...]["OPTIONS"]`` that are Django's or psycopg's, not libpq's."""

_FIX = 'set JOBCORE = {"URL": "postgresql://...", "OPTIONS": {...}} or leave JOBCORE out (docs/integrations/django.md)'


@attrs.frozen
class Config:
    """``settings.JOBCORE``, checked.

    Attributes:
        url: The driver URL, or ``None``: PostgreSQL on ``DATABASES[database]``.
        options: Keyword options for the driver (``schema``, ``pool_max``, ``call_timeout``...).
        database: The Django database alias whose server the driver uses (without ``url``) and
            whose ``transaction.atomic()`` blocks an enqueue joins.
        join_atomic: Whether ``enqueue`` inside ``atomic()`` on ``database`` joins its transaction.
    """

    url: str | None
    options: Mapping[str, Any]
    database: str
    join_atomic: bool


def read_config(settings: Any) -> Config:
    """``settings.JOBCORE`` checked (``JC_CONFIGURATION`` with cause and fix when it is wrong)."""
    raw = getattr(settings, "JOBCORE", None)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"settings.JOBCORE must be a dict, got {type(raw).__name__}", _FIX)
    unknown = sorted(str(k) for k in raw if k not in KEYS)
    if unknown:
        raise ConfigurationError(
            f"settings.JOBCORE has unknown key(s) {', '.join(unknown)}",
            f"use only {', '.join(KEYS)} (keys are upper case; driver options go inside OPTIONS)",
        )
    url = raw.get("URL")
    if url is not None and (not isinstance(url, str) or "://" not in url):
        raise ConfigurationError(
            f"settings.JOBCORE['URL'] must be a driver URL string, got {type(url).__name__}",
            "give a URL such as postgresql://user@host/db, mongodb://host/db or memory://, or leave URL out "
            "to use the server of DATABASES['default']",
        )
    options = raw.get("OPTIONS", {})
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ConfigurationError(
            f"settings.JOBCORE['OPTIONS'] must be a dict of driver keyword options, got {type(options).__name__}",
            'e.g. "OPTIONS": {"schema": "jobcore", "pool_max": 5}',
        )
    database = raw.get("DATABASE", "default")
    databases = getattr(settings, "DATABASES", {}) or {}
    if not isinstance(database, str) or database not in databases:
        raise ConfigurationError(
            f"settings.JOBCORE['DATABASE'] {database!r:.60} is not a database in settings.DATABASES",
            f"name one of {', '.join(map(repr, databases)) or 'the DATABASES aliases'} (default 'default')",
        )
    scheme = urlsplit(url).scheme.lower() if url is not None else "postgresql"
    if url is None:
        engine = str(databases[database].get("ENGINE", ""))
        if "postgres" not in engine:
            raise ConfigurationError(
                f"DATABASES[{database!r}] uses {engine or 'no ENGINE'}, and without JOBCORE['URL'] jobcore needs "
                "PostgreSQL there",
                "point DATABASES at PostgreSQL (django.db.backends.postgresql), or set JOBCORE['URL'] to the "
                "store jobcore should use (postgresql://, mongodb://, memory://)",
            )
    join = raw.get("JOIN_ATOMIC", url is None)
    if not isinstance(join, bool):
        raise ConfigurationError(
            f"settings.JOBCORE['JOIN_ATOMIC'] must be True or False, got {type(join).__name__}",
            "leave it out (True without URL, False with one) or write True / False",
        )
    if join and scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(
            f"settings.JOBCORE['JOIN_ATOMIC'] is True but the driver URL is {scheme}://: only a PostgreSQL "
            "store can join a Django transaction",
            "set JOIN_ATOMIC to False, or point URL at the PostgreSQL database of DATABASES[DATABASE]",
        )
    return Config(url=url, options=dict(options), database=database, join_atomic=join)


def conninfo_of(settings_dict: Mapping[str, Any]) -> str:
    """A libpq connection string for a Django ``DATABASES`` entry (its ``OPTIONS`` that libpq knows included)."""
    from psycopg.conninfo import make_conninfo  # noqa: PLC0415 - only on PostgreSQL

    params: dict[str, Any] = {
        "dbname": settings_dict.get("NAME") or None, "user": settings_dict.get("USER") or None,
        "password": settings_dict.get("PASSWORD") or None, "host": settings_dict.get("HOST") or None,
        "port": settings_dict.get("PORT") or None,
    }
    for name, value in (settings_dict.get("OPTIONS") or {}).items():
        if name not in _DJANGO_ONLY_OPTIONS and isinstance(value, str | int):
            params[name] = value
    return make_conninfo("", **{k: val for k, val in params.items() if val is not None})


def build_driver(
    config: Config, settings_dict: Mapping[str, Any], *, extra: Mapping[str, Any] | None = None
) -> JobDriver:
    """The driver ``config`` describes; ``settings_dict`` is ``DATABASES[config.database]`` as
    the connection holds it (the test database under Django's test runner). ``extra`` options
    (a worker's connection budget) give way to those set in ``OPTIONS``."""
    options = {**(extra or {}), **config.options}
    if config.url is None or config.join_atomic:
        from ._postgres import DjangoPostgresDriver  # noqa: PLC0415 - psycopg only when PostgreSQL is used

        if config.url is None:
            return DjangoPostgresDriver(
                conninfo_of(settings_dict), django_database=config.database, join_atomic=config.join_atomic,
                database_name=settings_dict.get("NAME"), **options,
            )
        return DjangoPostgresDriver.from_url(
            config.url, django_database=config.database, join_atomic=True, database_name=None, **options
        )
    from jobcore.current import connect  # noqa: PLC0415

    return connect(config.url, **options)

"""What both flavours of the PostgreSQL driver decide the same way, apart from their I/O.

The checks of the constructor's arguments (schema, the two time bounds, ``pooler``,
``listen_url``), the URL's jobcore options (:func:`split_url`), the URL a driver
answers for another process (:func:`store_url`), what to do with the store's schema
version (:func:`needs_migration`) and the answer of ``migrate`` (:func:`migration`).
:class:`~jobcore.drivers.postgres.PostgresDriver` and
:class:`~jobcore.drivers.postgres.AsyncPostgresDriver` call these, so a bad argument or an
outdated schema gets the same coded refusal on both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from psycopg.conninfo import conninfo_to_dict

from jobcore import validate as v
from jobcore.errors import OptionInvalid, SchemaOutdated, UrlInvalid, redact, secrets_of
from jobcore.records import Migration

from . import _schema
from ._pool import POOLER_MODES

__all__ = [
    "check_listen_url", "check_pooler", "check_schema", "migration", "needs_migration", "own_options", "split_url",
    "store_url", "timeouts",
]

_MS = timedelta(milliseconds=1)


def check_schema(schema: object) -> str:
    """``schema`` checked: a name, at most 63 bytes (PostgreSQL's identifier limit)."""
    name = v.check_name(schema, "schema")
    if len(name.encode()) > 63:
        raise OptionInvalid(f"schema name {schema!r:.80} is longer than 63 bytes", "use a shorter schema name")
    return name


def timeouts(statement_timeout: object, call_timeout: object) -> tuple[timedelta | None, timedelta | None]:
    """The two bounds, checked: positive finite durations, or None for none."""
    statement = None if statement_timeout is None else v.check_duration(
        statement_timeout, "statement_timeout", lo=_MS, positive=True
    )
    call = None if call_timeout is None else v.check_duration(call_timeout, "call_timeout", lo=_MS, positive=True)
    return statement, call


def check_pooler(pooler: object) -> str:
    if not isinstance(pooler, str) or pooler not in POOLER_MODES:
        raise OptionInvalid(
            f"pooler={pooler!r:.40} is not one of {', '.join(POOLER_MODES)}",
            "pass pooler='transaction' behind PgBouncer or a cloud pooler, 'none' for a direct server, "
            "or leave the default 'auto' (detected on each new connection)",
        )
    return pooler


def check_listen_url(url: object) -> str | None:
    """``url`` (the direct server wake-ups LISTEN on) checked to be a ``postgresql://`` URL, or None."""
    if url is None:
        return None
    fix = "pass the URL of the PostgreSQL server itself (not the pooler), e.g. postgresql://user@db-host/app"
    if not isinstance(url, str):
        raise UrlInvalid(f"listen_url must be a postgresql:// URL, got {type(url).__name__}", fix)
    shown = redact(repr(url), secrets_of(url))[:80]
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise UrlInvalid(f"listen_url {shown} is not a valid URL ({exc})", fix) from None
    if scheme not in ("postgresql", "postgres"):
        raise UrlInvalid(f"listen_url {shown} is not a PostgreSQL URL", fix)
    return url


URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "schema": str,
    "auto_migrate": lambda s: s.lower() in ("1", "true", "yes", "on"),
    "statement_timeout": lambda s: float(s) / 1000,  # milliseconds, as PostgreSQL writes it
    "call_timeout": lambda s: float(s) / 1000,  # milliseconds, like statement_timeout
    "pool_min": int,
    "pool_max": int,
    "default_max_attempts": int,
    "pooler": str,
    "listen_url": str,
}


def _query_pairs(query: str) -> list[tuple[str, str]]:
    """A URL's query read as libpq reads it: ``%XX`` escapes decode, a ``+`` is a plus (not
    the space of an HTML form, which ``parse_qsl`` alone would make it)."""
    return parse_qsl(query.replace("+", "%2B"), keep_blank_values=True)


def _query_text(pairs: Iterable[tuple[str, str]]) -> str:
    """``pairs`` as a query libpq reads back the same: a space as ``%20`` (``urlencode``'s
    own ``+`` reached the server as a plus: ``options=-c%20...`` became ``+...``)."""
    return urlencode(list(pairs), quote_via=quote)


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """``postgresql://...?schema=...`` split into the conninfo for libpq and jobcore's own options."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unbalanced "[" in the host
        raise UrlInvalid(f"{repr(redact(url))[:80]} is not a valid URL ({redact(exc)})") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise UrlInvalid(f"{parts.scheme}:// is not a PostgreSQL URL", "use postgresql://user@host/db")
    taken: dict[str, Any] = {}
    rest = []
    for name, value in _query_pairs(parts.query):
        if name in URL_OPTIONS:
            try:
                taken[name] = URL_OPTIONS[name](value)
            except ValueError:
                raise UrlInvalid(f"URL option {name}={redact(value)!r:.40} is not valid") from None
        else:
            rest.append((name, value))
    return urlunsplit(parts._replace(query=_query_text(rest))), taken


def own_options(schema: str, pooler: str, listen_url: str | None) -> dict[str, str]:
    """The jobcore options a driver's URL carries: the schema, and how to reach the server past a pooler."""
    own = {"schema": schema}
    if pooler != "auto":
        own["pooler"] = pooler
    if listen_url is not None:
        own["listen_url"] = listen_url
    return own


def store_url(conninfo: object, own: Mapping[str, str]) -> str:
    """A ``postgresql://`` URL for ``conninfo`` (a URL or a keyword/value string) carrying ``own``."""
    text = conninfo if isinstance(conninfo, str) else ""
    if text.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(text)
        query = [(k, val) for k, val in _query_pairs(parts.query) if k not in own]
        return urlunsplit(parts._replace(query=_query_text([*query, *own.items()])))
    params = {k: val for k, val in conninfo_to_dict(text).items() if val is not None}
    user = quote(str(params.pop("user", "")), safe="")
    password = quote(str(params.pop("password", "")), safe="")
    host = str(params.pop("host", ""))
    port = params.pop("port", None)
    dbname = quote(str(params.pop("dbname", "")), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    netloc = f"{auth}{host}{f':{port}' if port else ''}"
    options = _query_text([*((k, str(val)) for k, val in params.items()), *own.items()])
    return f"postgresql://{netloc}/{dbname}?{options}"


def needs_migration(found: Any, schema: str, auto_migrate: bool) -> bool:
    """What a driver does with the store's schema version ``found`` (a ``StoreVersion`` or
    None) on first use: True to migrate it now (``auto_migrate``), False to go on; a missing,
    older (without ``auto_migrate``) or incompatible newer schema raises ``JC_SCHEMA_OUTDATED``."""
    if found is None or found.version < _schema.LATEST:
        if not auto_migrate:
            state = "is not installed" if found is None else f"is at version {found.version}"
            raise SchemaOutdated(
                f"jobcore's schema {schema!r} {state}; this jobcore needs version {_schema.LATEST}"
            )
        return True
    if found.compatible_from > _schema.LATEST:
        raise SchemaOutdated(
            f"schema {schema!r} is at version {found.version}, newer than this jobcore's"
            f" {_schema.LATEST}, and needs a jobcore of schema {found.compatible_from} or later",
            "upgrade jobcore in this process",
        )
    return False


def migration(before: int | None, statements: list[str], *, dry_run: bool) -> Migration:
    """The answer of ``migrate`` from the version found before and the statements run (or planned)."""
    if before is not None and before > _schema.LATEST:
        return Migration(before=before, after=before, latest=_schema.LATEST, applied=False, language="sql")
    after = _schema.LATEST if statements else before
    return Migration(
        before=before, after=after, latest=_schema.LATEST, statements=tuple(statements), applied=not dry_run,
        language="sql",
    )


def configure(
    driver: Any, dsn_or_pool: object, *, pool_class: Callable[..., Any], caller_pool: type, auto_migrate: bool,
    statement_timeout: object, call_timeout: object, pool_min: object, pool_max: object, pooler: object,
    listen_url: object,
) -> None:
    """Set up a driver of either flavour from its constructor's arguments, checked (no I/O):
    its timeouts, pooler mode, listen URL, and its pool: ``pool_class`` (jobcore's own) built
    from a connection string, or the caller's ``caller_pool`` (psycopg_pool's, left open)."""
    from ._lean_wire import lean_forms  # noqa: PLC0415
    from ._notify import channel_for, finish_channel_for  # noqa: PLC0415
    from ._pool import DEFAULT_CALL_TIMEOUT, connect_kwargs  # noqa: PLC0415 - _pool imports this module's peers
    from ._sql import Statements  # noqa: PLC0415

    driver.auto_migrate = bool(auto_migrate)
    statement, call = timeouts(statement_timeout, call_timeout)
    driver.call_timeout = None if call is None else call.total_seconds()
    driver.pooler = check_pooler(pooler)
    driver.listen_url = check_listen_url(listen_url)
    driver._pooled = {"auto": None, "transaction": True, "none": False}[driver.pooler]
    if isinstance(dsn_or_pool, str):
        least = v.check_int(pool_min, "pool_min", 0, 1000)
        driver._pool = pool_class(
            dsn_or_pool, kwargs=connect_kwargs(
                dsn_or_pool, statement_timeout=statement, call_timeout=call, pooler=driver.pooler,
            ),
            min_size=least, max_size=v.check_int(pool_max, "pool_max", max(1, least), 1000),
            timeout=driver.call_timeout or DEFAULT_CALL_TIMEOUT,
        )
        driver._owns_pool = True
    elif isinstance(dsn_or_pool, caller_pool):
        driver._pool = dsn_or_pool
        driver._owns_pool = False
    else:
        kind = caller_pool.__name__
        raise OptionInvalid(
            f"dsn_or_pool must be a connection string or a{'n' if kind[0] in 'AEIOU' else ''} {kind}, "
            f"got {type(dsn_or_pool).__name__}",
            f"pass 'postgresql://user@host/db' or a psycopg_pool.{kind}",
        )
    driver.q = Statements(driver.schema)
    driver.lean = lean_forms(driver.q)
    driver.channel = channel_for(driver.schema)
    driver.finish_channel = finish_channel_for(driver.schema)
    driver._schema_ok = False

"""The one place psycopg errors become jobcore's coded errors.

Every database call of the driver runs inside :func:`translated`, so a caller never sees
a raw psycopg exception; the original stays on ``__cause__``:

* a cancelled statement (``statement_timeout``, ``lock_timeout``) -> ``BackendTimeout``;
* a statement with no answer within ``call_timeout`` (the connection was closed) -> ``BackendTimeout``;
* credentials the server refused (wrong or missing password, unknown role, no
  ``pg_hba.conf`` line admitting them) -> ``BackendAuthFailed`` (``JC_DB_AUTH``), at once;
* a refused or unreachable host, a connection not made within ``connect_timeout``, a lost
  connection, a server starting up or shutting down, an exhausted pool ->
  ``BackendUnavailable``, naming the host and port it tried;
* a connection lost after the statement went out (the server may have carried it out
  and only its answer was lost) -> ``BackendUnavailable`` whose fix says so: a retried
  enqueue without a key can store its job twice;
* a server that takes no writes (a standby, a primary set read-only; no listed host a
  primary during a failover) -> ``BackendUnavailable``, which the driver answers after
  closing that connection, so the next call connects again;
* connection parameters libpq refuses when connecting -> ``UrlInvalid`` (most are refused
  earlier, by :func:`._pool.check_conninfo`, before any connection is tried);
* a missing table or schema -> ``SchemaOutdated`` (run ``jobcore migrate``);
* every connection slot in use (``max_connections``, a role's or database's ``CONNECTION
  LIMIT``, PgBouncer's ``max_client_conn``) -> ``BackendUnavailable`` saying so, not
  "refused the credentials": it may be retried once connections close;
* a server out of disk space or memory, or failing to read or write its files (SQLSTATE
  classes 53 and 58) -> ``BackendUnavailable`` naming the resource; the connection stays;
* a statement beyond one of the server's limits (SQLSTATE class 54) -> ``BackendFailure``;
* a deadlock or serialization failure (rolled back, nothing written) -> ``BackendFailure``;
* a missing privilege -> ``BackendFailure`` naming the grants (docs/deploy.md);
* anything else -> ``BackendFailure``.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Final

import psycopg
import psycopg_pool
from psycopg import errors as pg

from jobcore.errors import (
    MAY_HAVE_LANDED,
    BackendAuthFailed,
    BackendFailure,
    BackendLocked,
    BackendTimeout,
    BackendUnavailable,
    ConfigurationError,
    JobcoreError,
    SchemaOutdated,
    UrlInvalid,
    redact,
)

from ._pool import NO_SLOT, CallTimeout, ConnectFailed

__all__ = ["READ_ONLY", "origin", "route_pool_logging", "translate", "translated"]

_AUTH = re.compile(
    r"authentication failed|fe_sendauth|no password supplied|no pg_hba\.conf entry|"
    r"role \S+ does not exist|not permitted to log in|SCRAM|password is required|"
    r"server did not complete authentication",
    re.IGNORECASE,
)
"""What libpq or the server says when it refuses the credentials (a failed connection
carries no SQLSTATE; these are the server's and libpq's messages, in English)."""
_BAD_PARAMETER = re.compile(r"^connection is bad: (invalid|could not match|unrecognized)|could not match \d+ port")
"""libpq refusing a connection parameter's value before any network traffic."""
_NO_SLOT_FIX = (
    "connections already open use every slot the server allows (max_connections, or the CONNECTION LIMIT "
    "of the role or the database; PgBouncer's max_client_conn): the call may be retried once some close; "
    "budget the fleet's connections (jobcore worker --connections, pool_max in the URL: docs/deploy.md, "
    "'Connection math'), put a transaction pooler in front, or raise the limit"
)
_UNREACHABLE_FIX = (
    "check that PostgreSQL is running at that host and port and accepts TCP connections from this "
    "host (listen_addresses, firewall), and the host and port in the URL; the call may be retried"
)

_READ_ONLY_FIX = (
    "point the URL at the primary; with standbys beside it, list every host "
    "(postgresql://user@db1:5432,db2:5432/app): jobcore then connects only to the one that takes writes "
    "(target_session_attrs=read-write); the call may be retried, and a failover in progress ends once a "
    "standby is promoted"
)
READ_ONLY = pg.ReadOnlySqlTransaction
"""SQLSTATE 25006: the server takes no writes. The driver closes the connection that met it."""
_NOT_WRITABLE = ("session is read-only", "server is in hot standby mode", "could not make a writable connection")
"""What libpq says when no listed host takes writes (``target_session_attrs=read-write``; the
last is libpq 13's wording)."""

_NOT_NOW = ("the database system is starting up", "the database system is shutting down")
"""What a refused connection says while the server starts or stops (SQLSTATE 57P03, which a
failed connection attempt does not carry)."""


_RESOURCES: Final = {
    "53100": ("the database server is out of disk space",
              "free space on the server's data volume (or the tablespace's, or the WAL's): nothing of the statement "
              "was written, and the call may be retried once there is room"),
    "53200": ("the database server ran out of memory",
              "check the server's memory and its settings (work_mem, max_connections; 'out of shared memory' names "
              "max_locks_per_transaction): nothing of the statement was written, and the call may be retried"),
    "53": ("the database server lacks a resource the statement needs",
           "see the server's message and its log: nothing of the statement was written, and the call may be retried"),
    "58": ("the database server could not read or write its files",
           "check the server's disks and its log (an I/O error is the storage's, not jobcore's): nothing of the "
           "statement was written, and the call may be retried"),
}
"""Refusals for lack of a server resource (SQLSTATE classes 53 and 58; the full SQLSTATE first,
then its class), each its own answer rather than "the connection failed": the connection
stays usable, and the statement was rolled back."""


def _resource(exc: BaseException) -> tuple[str, str] | None:
    """What :data:`_RESOURCES` says of ``exc``'s SQLSTATE, if anything."""
    state = getattr(exc, "sqlstate", None) or ""
    return _RESOURCES.get(state) or _RESOURCES.get(state[:2])


def _connect_failure(exc: ConnectFailed, text: str) -> JobcoreError:
    """The coded error for a connection that could not be opened, naming where it tried."""
    where = f"PostgreSQL at {exc.target}"
    role = f" as role {exc.user!r}" if exc.user else ""
    if _BAD_PARAMETER.search(text):
        return UrlInvalid(f"libpq refused the connection parameters: {text}")
    if exc.no_slot:
        for_role = f" for role {exc.user!r}" if exc.user else ""
        return BackendUnavailable(f"{where} has no connection slot free{for_role}: {text}", _NO_SLOT_FIX)
    if _AUTH.search(text):
        return BackendAuthFailed(f"{where} refused the credentials{role}: {text}")
    if isinstance(exc.original, pg.ConnectionTimeout):
        bound = "" if exc.connect_timeout is None else f"={exc.connect_timeout:g}s"
        return BackendUnavailable(
            f"no connection to {where} within connect_timeout{bound} (no answer: a host that is down, "
            f"or a firewall dropping packets): {text}",
            f"{_UNREACHABLE_FIX}, or raise connect_timeout in the URL (seconds)",
        )
    if any(s in text for s in _NOT_NOW):
        return BackendUnavailable(
            f"{where} is starting up or shutting down: {text}", "retry shortly; the call may be retried"
        )
    if any(s in text for s in _NOT_WRITABLE):
        return BackendUnavailable(f"no host of {where} takes writes now: {text}", _READ_ONLY_FIX)
    if "does not exist" in text:  # the database named in the URL
        return BackendUnavailable(
            f"{where} has no such database: {text}", "check the database name in the URL (dbname)"
        )
    return BackendUnavailable(f"{where} cannot be reached{role}: {text}", _UNREACHABLE_FIX)


_ATTEMPT = re.compile(
    r"^- host: '(?P<host>[^']*)', port: '(?P<port>[^']*)'(?:, hostaddr: '[^']*')?: "
    r"(?:connection failed: )?(?:connection to server (?:at|on) .*? failed: )?(?P<reason>.*)$",
    re.MULTILINE,
)
"""One line of psycopg's "Multiple connection attempts failed. All failures were:" list."""


def _per_host(text: str) -> str:
    """psycopg's account of a multi-host connection, one reason per host:
    ``host db1 port 5432: Connection refused; host db2 port 5432: session is read-only``
    (its own text repeats the last failure first and a hint after each: too long to read
    in one line). Empty when ``text`` is not such an account."""
    if "Multiple connection attempts failed" not in text:
        return ""
    reasons = [f"host {m['host']} port {m['port']}: {m['reason'].strip()}" for m in _ATTEMPT.finditer(text)]
    return "; ".join(reasons)[:600]


_UNSENT: Final = ("sending ", "flushing failed", "connection failed", "the connection is closed")
"""psycopg's words for a connection that failed before the server had the whole statement
(libpq's send or flush failed, or it never connected): nothing of the call was done.
Any other lost connection (``consuming input failed: server closed the connection
unexpectedly``) came after it went out, while its answer was awaited."""

_STATEMENT_POOLING: Final = "transaction blocks not allowed in statement pooling mode"

ROLLED_BACK: Final = (
    pg.TransactionRollback, pg.SerializationFailure, pg.DeadlockDetected, pg.TransactionIntegrityConstraintViolation,
)
"""The server rolled the statement's transaction back (SQLSTATE class 40 but 40003, whose
outcome is unknown): each is its own class in psycopg, none a subclass of ``TransactionRollback``."""


def origin(exc: BaseException) -> BaseException:
    """What a translated error keeps on ``__cause__``: psycopg's own exception."""
    return exc.original if isinstance(exc, ConnectFailed) and exc.original is not None else exc


def translate(exc: BaseException, schema: str = "") -> JobcoreError:
    """The coded jobcore error for a psycopg (or pool) exception; passwords masked."""
    secrets = exc.secrets if isinstance(exc, ConnectFailed) else ()
    raw = str(exc)
    text = redact(_per_host(raw) or " ".join(raw.split())[:300], secrets) or type(exc).__name__
    if isinstance(exc, ConnectFailed):
        return _connect_failure(exc, text)
    if isinstance(exc, CallTimeout):
        return BackendTimeout(
            f"no answer from the database within call_timeout={exc.bound:g}s (a stalled connection or an "
            "overloaded server); the connection was discarded",
            "check the network path to PostgreSQL and its load (a synchronous standby that is gone holds "
            "every commit), or raise call_timeout (PostgresDriver(call_timeout=...) or ?call_timeout=<ms> in "
            f"the URL); {MAY_HAVE_LANDED}",
        )
    if isinstance(exc, pg.ConnectionTimeout):
        return BackendUnavailable(
            f"no connection to the database within connect_timeout: {text}",
            "check that PostgreSQL is up and reachable (a firewall dropping packets looks like this), "
            "or raise connect_timeout in the URL (seconds)",
        )
    if isinstance(exc, pg.CannotConnectNow) or any(s in text for s in _NOT_NOW):
        return BackendUnavailable(
            f"the database is starting up or shutting down: {text}", "retry shortly; the call may be retried"
        )
    if isinstance(exc, READ_ONLY):  # a standby, or a primary set read-only
        return BackendUnavailable(f"the database server is read-only (a standby?): {text}", _READ_ONLY_FIX)
    if isinstance(exc, pg.LockNotAvailable):  # lock_timeout: the driver's settle bound, or the server's
        return BackendLocked(f"another session holds a lock the statement needed: {text}")
    if isinstance(exc, pg.QueryCanceled):
        return BackendTimeout(f"the database cancelled the statement: {text}")
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return BackendUnavailable(
            f"no database connection could be had in time: {text}",
            "check that PostgreSQL is up and reachable, or raise the pool size",
        )
    if isinstance(exc, pg.UndefinedTable | pg.InvalidSchemaName | pg.UndefinedColumn):
        return SchemaOutdated(
            f"jobcore's tables in schema {schema!r} are missing or old: {text}",
            "run `jobcore migrate --url ...` (or driver.migrate()) with this jobcore",
        )
    if isinstance(exc, ROLLED_BACK):  # deadlock, serialization failure: nothing was written
        return BackendFailure(
            f"the database rolled the statement back: {text}", "retry the call; nothing of it was written"
        )
    if _STATEMENT_POOLING in text:  # PgBouncer's answer to BEGIN (it also closes the connection)
        return ConfigurationError(
            "PgBouncer pools this database in statement mode, which refuses every transaction: jobcore's"
            f" dependencies, fleet leases, schedules and bulk operations run in one ({text})",
            "set pool_mode = transaction (or session) for this database in pgbouncer.ini",
        )
    refused_connection = isinstance(exc, psycopg.OperationalError) and text.startswith("connection failed")
    if isinstance(exc, pg.TooManyConnections) or (refused_connection and NO_SLOT.search(text)):
        return BackendUnavailable(f"the database has no connection slot free: {text}", _NO_SLOT_FIX)
    resource = _resource(exc)
    if resource is not None:
        return BackendUnavailable(f"{resource[0]}: {text}", resource[1])
    if (getattr(exc, "sqlstate", None) or "").startswith("54"):  # the same statement would fail again
        return BackendFailure(f"the statement exceeds a limit of the database server: {text}")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        if refused_connection and _AUTH.search(text):  # a caller's own connection
            return BackendAuthFailed(f"the database refused the credentials: {text}")
        if getattr(exc, "sqlstate", None) is None and not raw.lstrip().startswith(_UNSENT):
            return BackendUnavailable(
                f"the database connection was lost while the call awaited its answer: {text}",
                f"check that the database is up and reachable; {MAY_HAVE_LANDED}",
            )
        return BackendUnavailable(f"the database connection failed: {text}")
    if isinstance(exc, pg.InsufficientPrivilege):
        return BackendFailure(
            f"the database role may not do what this call needs: {text}",
            "run `jobcore migrate` as the role owning jobcore's schema; workers, the scheduler and the CLI "
            "need the grants listed in docs/deploy.md ('Roles and grants')",
        )
    return BackendFailure(f"the database refused the statement: {type(exc).__name__}: {text}")


class _PoolLogRoute(logging.Filter):
    """Re-logs ``psycopg.pool``'s records through jobcore's logger, passwords masked: the
    first of a run of identical messages at its level, the repeats at DEBUG; the original
    record is dropped (so no raw third-party line reaches a CLI's stderr)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        message = redact(record.getMessage())
        level = record.levelno if message != self.last else logging.DEBUG
        self.last = message
        _log.log(level, "connection pool: %s", message)
        return False


_log = logging.getLogger("jobcore.drivers.postgres")
_route = _PoolLogRoute()


def route_pool_logging() -> None:
    """Send ``psycopg.pool``'s log records through ``jobcore.drivers.postgres`` (idempotent)."""
    pool_log = logging.getLogger("psycopg.pool")
    if _route not in pool_log.filters:
        pool_log.addFilter(_route)


@contextlib.contextmanager
def translated(schema: str = "") -> Iterator[None]:
    """Run the block, turning any psycopg error into its jobcore error (original on ``__cause__``)."""
    try:
        yield
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise translate(exc, schema) from origin(exc)

"""The one place psycopg errors become jobcore's coded errors.

Every database call of the driver runs inside :func:`translated`, so a caller never sees
a raw psycopg exception; the original stays on ``__cause__``:

* a cancelled statement (``statement_timeout``, ``lock_timeout``) -> ``BackendTimeout``;
* a statement with no answer within ``call_timeout`` (the connection was closed) -> ``BackendTimeout``;
* a lost or refused connection, a connection not made within ``connect_timeout``, a server
  starting up or shutting down, an exhausted pool -> ``BackendUnavailable``;
* a missing table or schema -> ``SchemaOutdated`` (run ``jobcore migrate``);
* a deadlock or serialization failure (rolled back, nothing written) -> ``BackendFailure``;
* a missing privilege -> ``BackendFailure`` naming the grants (docs/deploy.md);
* anything else -> ``BackendFailure``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import psycopg_pool
from psycopg import errors as pg

from jobcore.errors import (
    BackendError,
    BackendFailure,
    BackendTimeout,
    BackendUnavailable,
    SchemaOutdated,
)

from ._pool import CallTimeout

__all__ = ["translate", "translated"]

_NOT_NOW = ("the database system is starting up", "the database system is shutting down")
"""What a refused connection says while the server starts or stops (SQLSTATE 57P03, which a
failed connection attempt does not carry)."""


def translate(exc: BaseException, schema: str = "") -> BackendError:
    """The coded jobcore error for a psycopg (or pool) exception."""
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if isinstance(exc, CallTimeout):
        return BackendTimeout(
            f"no answer from the database within call_timeout={exc.bound:g}s (a stalled connection or an "
            "overloaded server); the connection was discarded",
            "check the network path to PostgreSQL and its load, or raise call_timeout "
            "(PostgresDriver(call_timeout=...) or ?call_timeout=<ms> in the URL); the call may be retried",
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
    if isinstance(exc, pg.QueryCanceled | pg.LockNotAvailable):
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
    if isinstance(exc, pg.TransactionRollback):  # deadlock, serialization failure: nothing was written
        return BackendFailure(
            f"the database rolled the statement back: {text}", "retry the call; nothing of it was written"
        )
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return BackendUnavailable(f"the database connection failed: {text}")
    if isinstance(exc, pg.InsufficientPrivilege):
        return BackendFailure(
            f"the database role may not do what this call needs: {text}",
            "run `jobcore migrate` as the role owning jobcore's schema; workers, the scheduler and the CLI "
            "need the grants listed in docs/deploy.md ('Roles and grants')",
        )
    return BackendFailure(f"the database refused the statement: {type(exc).__name__}: {text}")


@contextlib.contextmanager
def translated(schema: str = "") -> Iterator[None]:
    """Run the block, turning any psycopg error into its jobcore error (original on ``__cause__``)."""
    try:
        yield
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise translate(exc, schema) from exc

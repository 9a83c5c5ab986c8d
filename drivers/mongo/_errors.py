"""The one place pymongo errors become coded jobcore errors, and where every call gets its time bound.

Every public method of the MongoDB driver runs inside :func:`translated`, so a caller
never sees a raw pymongo exception: credentials the server refused (``OperationFailure``
code 18, AuthenticationFailed; code 13 for a server that requires credentials none were
given for) are :class:`~jobcore.errors.BackendAuthFailed`, a lost connection, a server
that cannot be reached or a replica set between primaries (an election, a step-down) is
:class:`~jobcore.errors.BackendUnavailable`, a call that ran out of time
:class:`~jobcore.errors.BackendTimeout`, anything else
:class:`~jobcore.errors.BackendFailure`. Errors jobcore raises itself pass through.

The same wrapper bounds the call (rule F07): the whole driver call, however many round
trips it makes, runs under one ``pymongo.timeout`` deadline (client-side operation
timeout), which caps server selection, connection checkout, connecting and every socket
read. A call that passes it is cut off on the client, its connection is discarded by
pymongo, and the caller gets ``JC_DB_TIMEOUT`` (or ``JC_DB_UNAVAILABLE`` when no server
could be selected in time) naming the bound that passed.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, ParamSpec, TypeVar, cast

import attrs
import pymongo
from pymongo import errors as pe

from jobcore.errors import (
    MAY_HAVE_LANDED,
    BackendAuthFailed,
    BackendError,
    BackendFailure,
    BackendTimeout,
    BackendUnavailable,
    redact,
)

__all__ = ["DATABASE_FIX", "Bounds", "database_problem", "translate", "translated", "translated_async"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


@attrs.frozen(kw_only=True)
class Bounds:
    """The client-side time bounds of one driver's calls (F07), in seconds.

    Attributes:
        call: Deadline of each driver call as a whole, waiting for a server included
            (under a call deadline pymongo waits for a server until the deadline, not
            ``serverSelectionTimeoutMS``); ``None`` when the caller switched it off
            (``timeoutMS=0``), leaving the client's own ``serverSelectionTimeoutMS``.
        select: Longest wait for a usable server: ``call``, else the client's
            ``serverSelectionTimeoutMS``.
        connect: Longest wait to open one connection (``connectTimeoutMS``).
        fixed: These are the bounds of a reading of the server's clock, which no option
            raises: an error under them says so rather than advise "raise call_timeout=".
    """

    call: float | None
    select: float
    connect: float
    fixed: bool = False

    def describe(self) -> str:
        call = "none" if self.call is None else f"{self.call:g}s"
        return f"call bound {call}, waiting for a server {self.select:g}s, connecting {self.connect:g}s"


_UNBOUNDED = Bounds(call=None, select=30.0, connect=20.0)  # pymongo's own defaults


_AUTHENTICATION_FAILED = 18
_UNAUTHORIZED = 13
_NO_PRIMARY = frozenset({
    91,  # ShutdownInProgress
    189,  # PrimarySteppedDown
    10107,  # NotWritablePrimary
    11600,  # InterruptedAtShutdown
    11602,  # InterruptedDueToReplStateChange
    13435,  # NotPrimaryNoSecondaryOk
    13436,  # NotPrimaryOrSecondary
})
"""Server codes of a replica set between primaries (an election, a step-down, a shutdown),
which PyMongo answers as ``OperationFailure`` (a write concern error, or after its one retry)."""


_NOT_IN_DATABASE = frozenset('/\\. "$*<>:|?')
"""What MongoDB refuses in a database name (on some platform), the space among it."""
DATABASE_FIX = (
    "name it with up to 63 bytes of letters, digits, _ and -; "
    "a URL read from a file or a secret may end in a newline: strip it"
)


def database_problem(name: str) -> str | None:
    """Why MongoDB would not take ``name`` for a database, or None. A control character
    (the newline at the end of a URL read from a file) counts too: the server would take
    it, making another database than the one meant, silently."""
    bad = sorted({c for c in name if c in _NOT_IN_DATABASE or not c.isprintable()})
    if bad:
        return f"it holds {', '.join(map(repr, bad))}"
    if len(name.encode("utf-8")) > 63:
        return f"{len(name.encode('utf-8'))} bytes, over MongoDB's 63"
    return None


_UNSENT = ("Connection refused", "connection pool paused")
"""PyMongo's words for a failure before any command went out: a connection refused, or a
pool paused after its server was marked unknown."""


def _unavailable_fix(bounds: Bounds) -> str:
    longer = (
        "a reading of the server's clock waits no longer, whatever the call bound" if bounds.fixed
        else "raise call_timeout= or timeoutMS in the URI to wait longer"
    )
    return (
        "check that the MongoDB server is up and reachable from this host; the call may be retried "
        f"(the driver waited {bounds.select:g}s for a server; {longer})"
    )


def translate(exc: pe.PyMongoError, what: str, bounds: Bounds = _UNBOUNDED) -> BackendError:
    """The coded jobcore error for ``exc``, raised while doing ``what`` under ``bounds``.

    Order matters: ``ServerSelectionTimeoutError`` is both a ``ConnectionFailure`` and a
    timeout; a server that cannot be selected in time is unavailable, while a socket or
    operation that ran out of time (``exc.timeout``: a network timeout, the call's
    deadline, ``maxTimeMS`` on the server) is a timeout.
    """
    detail = redact(f"{type(exc).__name__}: {str(exc)[:200]}")
    if isinstance(exc, pe.OperationFailure) and (
        exc.code == _AUTHENTICATION_FAILED or (exc.code == _UNAUTHORIZED and "requires authentication" in str(exc))
    ):
        given = "refused the credentials" if exc.code == _AUTHENTICATION_FAILED else "requires credentials"
        return BackendAuthFailed(
            f"MongoDB {given} during {what} ({detail})",
            "check the user name, password and authSource (the database holding the user, default "
            "the URI's database or admin) in the URI, and that the user exists with a role on the "
            "database; retrying will not help",
        )
    if isinstance(exc, pe.ServerSelectionTimeoutError):
        return BackendUnavailable(
            f"no MongoDB server could be used for {what} in time ({bounds.describe()}; {detail})",
            _unavailable_fix(bounds),
        )
    if exc.timeout or isinstance(exc, pe.ExecutionTimeout | pe.WTimeoutError | pe.WaitQueueTimeoutError):
        bound = "no call bound" if bounds.call is None else f"the {bounds.call:g}s call bound"
        return BackendTimeout(
            f"MongoDB did not finish {what} within {bound} ({bounds.describe()}; {detail})",
            "the connection was dropped; if the server is merely slow, raise call_timeout= (timeoutMS in the "
            f"URI), else check the network and the server's load; {MAY_HAVE_LANDED}",
        )
    if isinstance(exc, pe.ConnectionFailure):
        if any(word in str(exc) for word in _UNSENT):  # no connection to send on: nothing was sent
            return BackendUnavailable(
                f"the MongoDB connection failed during {what} ({detail})", _unavailable_fix(bounds)
            )
        # PyMongo does not say whether the command had gone out: it may have been carried out
        # and only its answer lost (a retryable write covers that only on a replica set).
        return BackendUnavailable(
            f"the MongoDB connection was lost during {what} ({detail})",
            f"check that the MongoDB server is up and reachable from this host; {MAY_HAVE_LANDED}",
        )
    if isinstance(exc, pe.OperationFailure) and (
        exc.code in _NO_PRIMARY or exc.has_error_label("RetryableWriteError")
        or exc.has_error_label("TransientTransactionError")
    ):
        return BackendUnavailable(
            f"MongoDB had no primary to finish {what} (an election, a step-down or a shutdown: {detail})",
            "the call may be retried: a replica set elects a new primary within seconds; if it lasts, check the "
            "replica set's members (rs.status())",
        )
    return BackendFailure(f"MongoDB refused {what} ({detail})", "see the original error on __cause__")


def translated(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run the method ``func`` under its owner's call bound, pymongo errors translated.

    The owner (``args[0]``: the driver or one of its parts) carries ``_bounds``.
    """

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        bounds: Bounds = cast(Any, args[0])._bounds
        try:
            with _bounded(bounds):
                return func(*args, **kwargs)
        except pe.PyMongoError as exc:
            _raise_translated(exc, func, kwargs, bounds)

    return wrapper


def translated_async(func: Callable[_P, Coroutine[Any, Any, _R]]) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """:func:`translated` for a coroutine method (the async flavour): the same bound, the same coded errors.

    ``pymongo.timeout`` is carried by a context variable, so the deadline follows the
    coroutine through every ``await`` and other tasks keep their own.
    """

    @functools.wraps(func)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        bounds: Bounds = cast(Any, args[0])._bounds
        try:
            with _bounded(bounds):
                return await func(*args, **kwargs)
        except pe.PyMongoError as exc:
            _raise_translated(exc, func, kwargs, bounds)

    return wrapper


def _bounded(bounds: Bounds) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext() if bounds.call is None else pymongo.timeout(bounds.call)


def _raise_translated(
    exc: pe.PyMongoError, func: Callable[..., Any], kwargs: dict[str, Any], bounds: Bounds,
) -> NoReturn:
    if kwargs.get("session") is not None and exc.has_error_label("TransientTransactionError"):
        # The caller's own transaction failed transiently (a write conflict, an
        # election): pymongo's with_transaction retries only on its own error
        # with this label, so it passes through untranslated.
        raise exc
    raise translate(exc, func.__name__.strip("_").replace("_", " "), bounds) from exc

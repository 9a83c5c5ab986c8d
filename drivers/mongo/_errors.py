"""The one place pymongo errors become coded jobcore errors (the original stays on ``__cause__``).

Every public method of the MongoDB driver runs inside :func:`translated`, so a caller
never sees a raw pymongo exception: a lost connection or a server that cannot be
reached is :class:`~jobcore.errors.BackendUnavailable`, a timeout
:class:`~jobcore.errors.BackendTimeout`, anything else
:class:`~jobcore.errors.BackendFailure`. Errors jobcore raises itself pass through.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from pymongo import errors as pe

from jobcore.errors import BackendError, BackendFailure, BackendTimeout, BackendUnavailable

__all__ = ["translate", "translated"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_UNAVAILABLE_FIX = "check that the MongoDB server is up and reachable; the call may be retried"


def translate(exc: pe.PyMongoError, what: str) -> BackendError:
    """The coded jobcore error for ``exc``, raised while doing ``what``.

    Order matters: ``ServerSelectionTimeoutError`` and ``NetworkTimeout`` both subclass
    ``AutoReconnect``; a server that cannot be selected is unavailable, while a socket
    or operation that ran out of time is a timeout.
    """
    detail = f"{type(exc).__name__}: {str(exc)[:200]}"
    if isinstance(exc, pe.ServerSelectionTimeoutError):
        return BackendUnavailable(f"MongoDB could not be reached during {what} ({detail})", _UNAVAILABLE_FIX)
    if isinstance(exc, pe.NetworkTimeout | pe.ExecutionTimeout | pe.WTimeoutError | pe.WaitQueueTimeoutError):
        return BackendTimeout(f"MongoDB timed out during {what} ({detail})")
    if isinstance(exc, pe.ConnectionFailure):
        return BackendUnavailable(f"the MongoDB connection failed during {what} ({detail})", _UNAVAILABLE_FIX)
    return BackendFailure(f"MongoDB refused {what} ({detail})", "see the original error on __cause__")


def translated(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``func`` with pymongo errors translated (see :func:`translate`)."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return func(*args, **kwargs)
        except pe.PyMongoError as exc:
            if kwargs.get("session") is not None and exc.has_error_label("TransientTransactionError"):
                # The caller's own transaction failed transiently (a write conflict, an
                # election): pymongo's with_transaction retries only on its own error
                # with this label, so it passes through untranslated.
                raise
            raise translate(exc, func.__name__) from exc

    return wrapper

"""An async backend over a sync one whose calls never wait on I/O (the memory driver's).

A store kept in the process answers in microseconds under its own lock: awaiting it
on the event loop blocks nothing worth a thread hand-off. :class:`Awaiting` gives such a
backend the async backend protocols (:class:`~jobcore.door.AsyncJobsBackend` and the
rest): each method becomes a coroutine function calling the sync one directly, so the
rules it keeps are the sync backend's, exactly. A backend that waits on a network or a
disk must not be wrapped this way: it would stall the loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Final

__all__ = ["Awaiting"]

_PLAIN: Final = frozenset({"clock", "capabilities", "connection_type"})
"""Attributes the async protocols keep plain (not awaited)."""


class Awaiting:
    """The async flavour of ``backend``, a sync backend that never waits on I/O."""

    __slots__ = ("_backend", "_methods")

    def __init__(self, backend: object) -> None:
        self._backend = backend
        self._methods: dict[str, Callable[..., Coroutine[Any, Any, Any]]] = {}

    @property
    def backend(self) -> Any:
        """The sync backend wrapped."""
        return self._backend

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._backend, name)
        if name in _PLAIN or name.startswith("_") or not callable(value):
            return value
        found = self._methods.get(name)
        if found is None:

            @functools.wraps(value)
            async def method(*args: Any, **kwargs: Any) -> Any:
                return getattr(self._backend, name)(*args, **kwargs)

            self._methods[name] = found = method
        return found

    def __repr__(self) -> str:
        return repr(self._backend)

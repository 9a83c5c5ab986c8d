"""The front door of fleet leases (rules K): ``driver.leases``, over a driver's :class:`AsyncLeasesBackend`.

:class:`AsyncLeasesDoor` is the :class:`~jobcore.driver.LeaseStore` users call. It checks
every argument once (names, the slot limit, the ttl) and refuses bad input with a
coded :class:`~jobcore.errors.OptionInvalid` before the store is reached, so nothing is
written. A driver implements only :class:`AsyncLeasesBackend`: three verbs and one read on
checked values, each one atomic step on the store. The read's order and bound are kept
here, once: the door sorts what the backend answers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from jobcore import validate as v
from jobcore.driver import Duration
from jobcore.records import LeaseSlot
from jobcore.vocabulary import MAX_LEASE_SLOTS, MAX_PAGE

__all__ = ["AsyncLeasesBackend", "AsyncLeasesDoor"]


class AsyncLeasesBackend(Protocol):
    """What a driver implements for fleet leases (rules K01-K04): counted slots with expiry.

    A slot is ``(key, holder)`` with an expiry time on the store's clock (F01); at most
    ``limit`` unexpired slots of one key exist at any moment, however many processes
    call at once. Every argument arrives checked by :class:`AsyncLeasesDoor`:

    * ``key`` and ``holder``: str of 1 to ``MAX_NAME_LENGTH`` characters, no NUL, no
      unpaired surrogate; store them literally (never as a query operator or a path);
    * ``limit``: int from 1 to ``MAX_LEASE_SLOTS``;
    * ``ttl``: a ``timedelta`` from ``MIN_LEASE`` to ``MAX_LEASE`` (whole milliseconds are
      enough: expiry times are kept to the millisecond).

    A backend never refuses these; a store failure raises a
    :class:`~jobcore.errors.BackendError` subclass with the original on ``__cause__``.
    """

    async def acquire(self, key: str, limit: int, holder: str, ttl: timedelta) -> bool:
        """Take a slot of ``key`` for ``holder`` until ``now + ttl`` (K01), in one atomic step.

        Answers ``True`` when fewer than ``limit`` unexpired slots of ``key`` existed (the
        new slot is stored), or when ``holder`` already held an unexpired slot of ``key``
        (its expiry moves to ``now + ttl``). Otherwise ``False``, and nothing changes.
        Expired slots never count toward ``limit``; the backend may delete them.
        Concurrent acquirers of one key must never leave more than ``limit`` slots.
        """
        ...

    async def renew(self, key: str, holder: str, ttl: timedelta) -> bool:
        """Move ``holder``'s unexpired slot of ``key`` to ``now + ttl`` (K02).

        ``False`` (and nothing changes) when the slot expired, even if nobody took it
        since, or was never held: a holder never revives a slot it lost.
        """
        ...

    async def release(self, key: str, holder: str) -> bool:
        """Delete ``holder``'s slot of ``key`` (K03); ``True`` when it deleted one.

        An expired slot not yet purged may be deleted (``True``) or already gone (``False``).
        """
        ...

    async def slots(self, key: str | None, limit: int) -> list[LeaseSlot]:
        """The unexpired slots (of ``key``, or of every key when ``None``), K04; a read.

        Unexpired means ``expires_at > now`` on the store's clock. Answers the first
        ``limit`` of them in ``(key, holder)`` code-point order (``limit`` is 1 to
        ``MAX_PAGE``); the list itself may come in any order (the door sorts it). Never
        writes; may read expired slots it then leaves out.
        """
        ...


class AsyncLeasesDoor:
    """``driver.leases``: the checked :class:`~jobcore.driver.LeaseStore` over a :class:`AsyncLeasesBackend`."""

    def __init__(self, backend: AsyncLeasesBackend) -> None:
        self._backend = backend

    async def acquire(self, key: str, limit: int, holder: str, ttl: Duration) -> bool:
        """:meth:`jobcore.driver.LeaseStore.acquire`."""
        key, holder = v.check_name(key, "key"), v.check_name(holder, "holder")
        count = v.check_int(limit, "limit", 1, MAX_LEASE_SLOTS)
        return await self._backend.acquire(key, count, holder, v.check_lease(ttl, "ttl"))

    async def renew(self, key: str, holder: str, ttl: Duration) -> bool:
        """:meth:`jobcore.driver.LeaseStore.renew`."""
        key, holder = v.check_name(key, "key"), v.check_name(holder, "holder")
        return await self._backend.renew(key, holder, v.check_lease(ttl, "ttl"))

    async def release(self, key: str, holder: str) -> bool:
        """:meth:`jobcore.driver.LeaseStore.release`."""
        return await self._backend.release(v.check_name(key, "key"), v.check_name(holder, "holder"))

    async def holders(self, key: str | None = None, limit: int = 100) -> list[LeaseSlot]:
        """:meth:`jobcore.driver.LeaseStore.holders`."""
        name = None if key is None else v.check_name(key, "key")
        count = v.check_int(limit, "limit", 1, MAX_PAGE)
        found = sorted(await self._backend.slots(name, count), key=lambda s: (s.key, s.holder))
        return found[:count]

    def __repr__(self) -> str:
        return f"AsyncLeasesDoor({self._backend!r})"

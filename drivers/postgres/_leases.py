# Generated from _leases_async.py by tools/unasync.py: edit that file, then run the tool.
"""The PostgreSQL driver's :class:`~jobcore.door.LeasesBackend`: counted slots with expiry (rules K).

One row per held slot in ``{leases}``. ``acquire`` is one transaction: an advisory
transaction lock on the key (in this schema's own lock namespace) serializes acquirers
of one key, then expired slots of the key are deleted and the slot is inserted or
refreshed only while fewer than ``limit`` remain, so concurrent acquirers never exceed
it. ``renew`` and ``release`` are one statement each. The statements (``LEASE_*``) are in
:mod:`._sql.jobs`.
"""

from __future__ import annotations

import zlib
from datetime import timedelta, timezone
from typing import TYPE_CHECKING

from jobcore.records import LeaseSlot

if TYPE_CHECKING:
    from . import PostgresDriver

__all__ = ["PostgresLeases"]

_MS = timedelta(milliseconds=1)


class PostgresLeases:
    """Counted slots with expiry (rules K), one row per held slot, on checked values."""

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver
        # advisory-lock namespace of this schema's lease keys (a signed int4)
        self._space = zlib.crc32(f"jobcore.leases.{driver.schema}".encode()) - 2**31

    def acquire(self, key: str, limit: int, holder: str, ttl: timedelta) -> bool:
        q = self._d.q
        now = self._d._now()
        with self._d._transaction() as conn:
            conn.execute(q.LEASE_LOCK, {"space": self._space, "key": key})
            conn.execute(q.LEASE_PURGE, {"key": key, "now": now})
            row = conn.execute(q.LEASE_ACQUIRE, {
                "key": key, "holder": holder, "now": now, "ttl_ms": ttl // _MS, "limit": limit,
            }).fetchone()
        return row is not None

    def renew(self, key: str, holder: str, ttl: timedelta) -> bool:
        rows = self._d._fetch(self._d.q.LEASE_RENEW, {
            "key": key, "holder": holder, "now": self._d._now(), "ttl_ms": ttl // _MS,
        })
        return bool(rows)

    def release(self, key: str, holder: str) -> bool:
        return bool(self._d._fetch(self._d.q.LEASE_RELEASE, {"key": key, "holder": holder}))

    def slots(self, key: str | None, limit: int) -> list[LeaseSlot]:
        rows = self._d._fetch(self._d.q.LEASE_SLOTS, {"key": key, "now": self._d._now(), "limit": limit})
        # the session's zone is the server's (or a pooler's): answer UTC, as every record
        return [LeaseSlot(key=k, holder=h, expires_at=t.astimezone(timezone.utc)) for k, h, t in rows]

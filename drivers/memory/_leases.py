"""The memory driver's :class:`~jobcore.door.LeasesBackend`: counted slots with expiry (rules K).

Slots live in a dict per key, ``holder -> expiry``, under the driver's one lock, so each
verb is atomic against every other call on any thread. Expired slots are dropped when
an acquire of their key looks at them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobcore.clock import to_millis
from jobcore.records import LeaseSlot

if TYPE_CHECKING:
    from . import MemoryDriver

__all__ = ["MemoryLeases"]


class MemoryLeases:
    """Counted slots with expiry (rules K), on checked values."""

    def __init__(self, driver: MemoryDriver) -> None:
        self._driver = driver
        self._slots: dict[str, dict[str, datetime]] = {}

    def acquire(self, key: str, limit: int, holder: str, ttl: timedelta) -> bool:
        with self._driver._lock:
            now = self._driver._now()
            slots = self._slots.setdefault(key, {})
            for name in [h for h, expires in slots.items() if expires <= now]:
                del slots[name]
            if holder not in slots and len(slots) >= limit:
                return False
            slots[holder] = to_millis(now + ttl)
            return True

    def renew(self, key: str, holder: str, ttl: timedelta) -> bool:
        with self._driver._lock:
            now = self._driver._now()
            slots = self._slots.get(key, {})
            if slots.get(holder, now) <= now:
                return False
            slots[holder] = to_millis(now + ttl)
            return True

    def release(self, key: str, holder: str) -> bool:
        with self._driver._lock:
            return self._slots.get(key, {}).pop(holder, None) is not None

    def slots(self, key: str | None, limit: int) -> list[LeaseSlot]:
        with self._driver._lock:
            now = self._driver._now()
            keys = [key] if key is not None else list(self._slots)
            live = [(k, h, t) for k in keys for h, t in self._slots.get(k, {}).items() if t > now]
        live.sort()
        return [LeaseSlot(key=k, holder=h, expires_at=t) for k, h, t in live[:limit]]

"""The MongoDB driver's :class:`~jobcore.door.LeasesBackend` (rules K): one ``<prefix>leases`` document per key.

A key's slots are its document's ``slots`` array. Each verb is one atomic
single-document write. ``acquire`` is an upserting pipeline update that drops expired
slots, refreshes the holder's own slot, or appends a new one only while fewer than
``limit`` live slots remain; the answer is whether the holder's slot is in the document
it wrote. Concurrent acquirers of one key serialize on that document, so the count can
never exceed ``limit``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pymongo import ReturnDocument
from pymongo import errors as pe
from pymongo.asynchronous.collection import AsyncCollection  # sync: from pymongo.collection import Collection

from jobcore.clock import to_millis
from jobcore.records import LeaseSlot

from ._errors import translated_async

if TYPE_CHECKING:
    from ._store_async import AsyncMongoStore

__all__ = ["AsyncMongoLeases"]


class AsyncMongoLeases:
    """Counted slots with expiry (rules K), one document per key, on checked values."""

    def __init__(self, driver: AsyncMongoStore, collection: AsyncCollection[dict[str, Any]]) -> None:
        self._driver, self._slots = driver, collection
        self._bounds = driver._bounds

    @translated_async
    async def acquire(self, key: str, limit: int, holder: str, ttl: timedelta) -> bool:
        now = await self._driver._now()
        expires = to_millis(now + ttl)
        me = {"$literal": holder}
        live = {"$filter": {"input": {"$ifNull": ["$slots", []]}, "as": "s", "cond": {"$gt": ["$$s.expires", now]}}}
        # "$slots.holder" on an empty array differs between servers; $map does not.
        holders = {"$map": {"input": "$slots", "as": "s", "in": "$$s.holder"}}
        mine = {"holder": me, "expires": expires}
        pipeline: list[dict[str, Any]] = [
            {"$set": {"slots": live}},
            {"$set": {"slots": {"$cond": [
                {"$in": [me, holders]},
                {"$map": {"input": "$slots", "as": "s", "in": {
                    "$cond": [{"$eq": ["$$s.holder", me]}, mine, "$$s"],
                }}},
                {"$cond": [
                    {"$lt": [{"$size": "$slots"}, limit]}, {"$concatArrays": ["$slots", [mine]]}, "$slots",
                ]},
            ]}}},
        ]
        doc = None
        for _ in range(3):
            try:
                doc = await self._slots.find_one_and_update(
                    {"_id": key}, pipeline, upsert=True, return_document=ReturnDocument.AFTER,
                )
            except pe.DuplicateKeyError:  # two first-ever upserts of this key raced; retry
                continue
            if doc is not None:
                break
            # None from an upsert means the server applied it as an update after a race
            # without returning the document (the stand-in server does this; real MongoDB
            # answers the document). Acquire is idempotent for a holder, so run it again.
        return doc is not None and any(slot.get("holder") == holder for slot in doc.get("slots", ()))

    @translated_async
    async def renew(self, key: str, holder: str, ttl: timedelta) -> bool:
        now = await self._driver._now()
        found = await self._slots.update_one(
            {"_id": key, "slots": {"$elemMatch": {"holder": holder, "expires": {"$gt": now}}}},
            {"$set": {"slots.$[mine].expires": to_millis(now + ttl)}},
            array_filters=[{"mine.holder": holder}],
        )
        return found.matched_count == 1

    @translated_async
    async def release(self, key: str, holder: str) -> bool:
        mine = {"_id": key, "slots.holder": holder}
        found = await self._slots.update_one(mine, {"$pull": {"slots": {"holder": holder}}})
        return found.modified_count == 1

    @translated_async
    async def slots(self, key: str | None, limit: int) -> list[LeaseSlot]:
        now = await self._driver._now()
        match: dict[str, Any] = {"slots.expires": {"$gt": now}}
        if key is not None:
            match["_id"] = key
        pipeline: list[dict[str, Any]] = [
            {"$match": match},
            {"$unwind": "$slots"},
            {"$match": {"slots.expires": {"$gt": now}}},
            {"$sort": {"_id": 1, "slots.holder": 1}},
            {"$limit": limit},
            {"$project": {"_id": 1, "holder": "$slots.holder", "expires": "$slots.expires"}},
        ]
        return [
            LeaseSlot(key=d["_id"], holder=d["holder"], expires_at=d["expires"])
            async for d in await self._slots.aggregate(pipeline)
        ]

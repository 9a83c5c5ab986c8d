"""Dependencies (rules D) in MongoDB: linking children to parents, and settling children when a parent ends.

A child document holds ``parents`` (the parents' ``_id`` values), ``run_anyway`` when
``on_parent_failure="run"``, and ``waiting: true`` while it is suspended for them; a parent
holds ``has_children: true``. A standalone server has no multi-document transaction, so a
parent's settle and its children's release or cancellation are separate writes, each
conditional on the child still waiting (``waiting``, ``suspended``, never claimed), so
repeating them changes nothing. What a crash between them leaves is repaired by
``introspect.rescue()``, which re-checks every waiting child (:meth:`AsyncFamily.sweep`),
and the enqueue of a child re-checks it once it is stored, so a parent that ended while the
child was being written is never missed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pymongo.asynchronous.client_session import (  # sync: from pymongo.client_session import ClientSession
    AsyncClientSession,  # sync: drop
)  # sync: drop
from pymongo.asynchronous.collection import AsyncCollection  # sync: from pymongo.collection import Collection

from jobcore.records import Job, JobState
from jobcore.vocabulary import CANCELLED_ENTRY, parent_ended_text

from . import _docs as d

if TYPE_CHECKING:
    from ._store_async import AsyncMongoStore

__all__ = ["ENDED_OTHERWISE", "WAITING", "AsyncFamily"]

Doc = dict[str, Any]
ENDED_OTHERWISE = frozenset({JobState.FAILED.value, JobState.DEAD.value, JobState.CANCELLED.value})
FINISHED = frozenset({JobState.DONE.value, *ENDED_OTHERWISE})
WAITING: Doc = {"waiting": True, "state": JobState.SUSPENDED.value, "claim_no": 0}
"""A child still waiting on its parents: suspended and never claimed (a parked job was claimed)."""


class AsyncFamily:
    """The dependency steps of one MongoDB driver (its jobs collection)."""

    def __init__(self, driver: AsyncMongoStore, jobs: AsyncCollection[Doc]) -> None:
        self._d = driver
        self._jobs = jobs

    async def ended(self, docs: Iterable[Doc], now: datetime) -> None:
        """Settle the children of every parent in ``docs`` (documents as a settle wrote them,
        ``has_children`` and ``state`` at least) that has any."""
        parents = [(doc["_id"], doc["state"]) for doc in docs if doc.get("has_children")]
        if parents:
            await self.settle(parents, now)

    async def removed(self, docs: Iterable[Doc], now: datetime) -> None:
        """Settle the children of removed parents: one removed before it finished cancels them (D05)."""
        parents = [
            (doc["_id"], doc["state"] if doc["state"] in FINISHED else "removed")
            for doc in docs if doc.get("has_children")
        ]
        if parents:
            await self.settle(parents, now)

    async def settle(self, parents: Sequence[tuple[int, str]], now: datetime) -> None:
        """Release or cancel the waiting children of ``parents`` (``(id, how it ended)``);
        cancellations go on to the cancelled child's own children."""
        stack = list(parents)
        while stack:
            parent, how = stack.pop()
            children = await self._jobs.find({"parents": parent, **WAITING}).to_list()
            for child in children:
                cancelled = await self._apply(child, now, (parent, how) if how == "removed" else None)
                if cancelled and child.get("has_children"):
                    stack.append((child["_id"], JobState.CANCELLED.value))

    async def recheck(self, ids: Sequence[int], now: datetime) -> None:
        """Decide again for the waiting children ``ids`` (after their enqueue, and in a sweep)."""
        if not ids:
            return
        cancelled = []
        async for child in self._jobs.find({"_id": {"$in": list(ids)}, **WAITING}):
            if await self._apply(child, now, None) and child.get("has_children"):
                cancelled.append((child["_id"], JobState.CANCELLED.value))
        if cancelled:
            await self.settle(cancelled, now)

    async def sweep(self, now: datetime) -> None:
        """Re-check every waiting child: what a crash between a parent's settle and its
        children's step left behind (run by ``introspect.rescue``)."""
        ids = [doc["_id"] async for doc in self._jobs.find({"waiting": True}, {"_id": 1}).hint(d.WAITING_INDEX)]
        await self.recheck(ids, now)

    async def _verdict(self, child: Doc, removed: tuple[int, str] | None) -> tuple[int, str] | bool:
        """``(parent, state)`` to cancel the child for, ``True`` to make it due, ``False`` to keep it waiting."""
        if removed is not None and not child.get("run_anyway"):
            return removed
        live = False
        found = {doc["_id"]: doc["state"] async for doc in self._jobs.find(
            {"_id": {"$in": child.get("parents", [])}}, {"state": 1})}
        for parent in child.get("parents", []):
            state = found.get(parent)  # a parent no longer stored was removed once finished: done
            if state is None or state == JobState.DONE.value:
                continue
            if state in ENDED_OTHERWISE:
                if not child.get("run_anyway"):
                    return parent, state
            else:
                live = True
        return not live

    async def _apply(self, child: Doc, now: datetime, removed: tuple[int, str] | None) -> bool:
        """Apply the child's verdict, if it still waits; ``True`` when this call cancelled it."""
        verdict = await self._verdict(child, removed)
        if verdict is False:
            return False
        guard = {"_id": child["_id"], **WAITING}
        if verdict is True:
            due = child["run_at"] > now
            state = JobState.SCHEDULED.value if due else JobState.READY.value
            await self._jobs.update_one(guard, {"$set": {"state": state}, "$unset": {"waiting": ""}})
            return False
        parent, how = verdict
        update = [
            d.append_error(CANCELLED_ENTRY, parent_ended_text(str(parent), how), now),
            *d.finish_stages(JobState.CANCELLED.value, now),
            {"$unset": ["waiting"]},
        ]
        return (await self._jobs.update_one(guard, update)).modified_count == 1

    async def states(self, ids: Sequence[int], session: AsyncClientSession | None) -> dict[int, str]:
        """The stored jobs among ``ids`` and their states (read only: a refusal writes nothing)."""
        if not ids:
            return {}
        return {doc["_id"]: doc["state"] async for doc in self._jobs.find(
            {"_id": {"$in": list(ids)}}, {"state": 1}, session=session)}

    async def mark(self, ids: Sequence[int], session: AsyncClientSession | None) -> None:
        """Mark ``ids`` as parents: from here on, their settles look for children. A settle
        before the mark is caught by :meth:`recheck` once the children are stored."""
        if ids:
            await self._jobs.update_many({"_id": {"$in": list(ids)}}, {"$set": {"has_children": True}}, session=session)

    async def relatives(self, seq: int) -> tuple[list[Job], list[Job]] | None:
        """Job ``seq``'s stored parents and children, oldest first; ``None`` when unknown."""
        me = await self._jobs.find_one({"_id": seq}, {"parents": 1})
        if me is None:
            return None
        parents = [d.to_job(doc) async for doc in self._jobs.find({"_id": {"$in": me.get("parents", [])}}).sort("_id", 1)]
        children = [d.to_job(doc) async for doc in self._jobs.find({"parents": seq}).sort("_id", 1)]
        return parents, children

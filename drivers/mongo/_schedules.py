# Generated from _schedules_async.py by tools/unasync.py: edit that file, then run the tool.
"""The MongoDB driver's :class:`~jobcore.door.SchedulesBackend` (rules P), crash-safe without transactions.

One document per schedule in ``<prefix>schedules``, ``_id`` = the schedule name::

    _id            str, the name
    definition     str, canonical JSON text (like payloads: never BSON keys)
    watermark      BSON date (ms)
    paused         bool
    last_fired_at, last_outcome, last_job_id       absent until the first firing
    created_at, updated_at                         BSON date
    pending        {job: <the job document to insert>}, only between steps 1 and 3

A standalone ``mongod`` has no multi-document transactions, so ``fire`` moves the
watermark and inserts the job in three single-document steps, each idempotent:

1. Compare-and-set the schedule (filter: name, ``watermark == expected``, not paused,
   no ``pending``, the ``last_job_id`` the overlap check read) setting the watermark,
   outcome, and ``pending.job``: the complete job document with an ``_id`` reserved
   from the enqueue sequence *before* the compare-and-set. Exactly one firer wins.
2. Insert ``pending.job``. Its ``_id`` is the occurrence's unique marker: a duplicate
   ``_id`` means an earlier attempt already inserted it. An idempotency-key clash
   (E02) answers the live holder, as ``enqueue`` does.
3. Set ``last_job_id`` and unset ``pending`` (filter: ``pending.job._id`` is ours).

A scheduler killed between steps leaves ``pending`` behind; every later ``get``,
``list`` or ``fire`` of that schedule (any process) completes steps 2-3 first, so the
occurrence is neither lost nor doubled, and ``fire`` refuses to move a watermark past
an unfinished occurrence. Once step 3 unset ``pending``, nothing can insert that job
again: pruning it later (R02) deletes the job only, and the watermark has moved on.
The one window: a job inserted in step 2, then finished and pruned (or removed) before
any process completed step 3, would be inserted again by the completer; schedulers
read every schedule each tick, so that takes a crash plus no scheduler running for the
whole retention age.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pymongo import ReturnDocument
from pymongo import errors as pe
from pymongo.collection import Collection

from jobcore import validate as v
from jobcore.errors import BackendFailure
from jobcore.records import Schedule, ScheduleOutcome
from jobcore.vocabulary import LIVE_STATES

from . import _docs as d
from ._errors import translated

if TYPE_CHECKING:
    from ._store import MongoStore

__all__ = ["MongoSchedules"]

Doc = dict[str, Any]
_ATTEMPTS = 16
"""Rounds a verb retries when a concurrent writer changed the document under it."""
_LIVE = sorted(state.value for state in LIVE_STATES)
"""The live states (P03 overlap), from :data:`jobcore.vocabulary.LIVE_STATES`."""


def _when(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def to_schedule(doc: Doc) -> Schedule:
    """The :class:`Schedule` of a stored document (``pending`` completed first)."""
    job_id = doc.get("last_job_id")
    return Schedule(
        name=doc["_id"], definition=v.decode_json(doc["definition"]), watermark=doc["watermark"],
        paused=bool(doc.get("paused", False)), last_fired_at=_when(doc.get("last_fired_at")),
        last_outcome=doc.get("last_outcome"), last_job_id=None if job_id is None else str(job_id),
        created_at=doc["created_at"], updated_at=doc["updated_at"],
    )


class MongoSchedules:
    """Periodic schedules' declarations and watermarks (rules P) on MongoDB, on checked values."""

    def __init__(self, driver: MongoStore, collection: Collection[Doc]) -> None:
        self._d, self._docs = driver, collection
        self._bounds = driver._bounds

    @property
    def _jobs(self) -> Collection[Doc]:
        return self._d._jobs

    # -- crash recovery ----------------------------------------------------------------------

    def _settled(self, doc: Doc | None) -> Doc | None:
        """``doc`` with an unfinished firing (``pending``) completed: steps 2 and 3."""
        for _ in range(_ATTEMPTS):
            if doc is None or "pending" not in doc:
                return doc
            job = doc["pending"]["job"]
            job_id = self._insert_once(job)
            done = self._docs.find_one_and_update(
                {"_id": doc["_id"], "pending.job._id": job["_id"]},
                {"$set": {"last_job_id": job_id}, "$unset": {"pending": ""}},
                return_document=ReturnDocument.AFTER,
            )
            # None: another process completed it (or the schedule was removed); read again.
            doc = done if done is not None else self._docs.find_one({"_id": doc["_id"]})
        raise BackendFailure(f"schedule {doc and doc['_id']!r:.60} kept changing while completing a firing")

    def _insert_once(self, job: Doc) -> int:
        """Insert the job of a firing unless an earlier attempt did; answers the job id to record."""
        for _ in range(_ATTEMPTS):
            try:
                self._jobs.insert_one(dict(job))
            except pe.DuplicateKeyError as exc:
                if not d.key_clash(exc.details or {}):
                    return int(job["_id"])  # the _id is taken: this occurrence's job is in
                holder = self._jobs.find_one({"name": job["name"], "live_key": job["live_key"]}, {"_id": 1})
                if holder is not None:
                    return int(holder["_id"])  # E02: a live job holds the key (maybe this very one)
                continue  # the holder finished in between: the key is free again
            return int(job["_id"])
        raise BackendFailure(f"idempotency key {job.get('live_key')!r:.60} kept changing hands during a firing")

    # -- the protocol ------------------------------------------------------------------------

    @translated
    def declare(self, name: str, definition: str, start: datetime | None) -> Schedule:
        self._d._ensure()
        now = self._d._now()
        fresh = {
            "definition": definition, "watermark": now if start is None else start, "paused": False,
            "created_at": now, "updated_at": now,
        }
        for _ in range(_ATTEMPTS):
            try:
                made = self._docs.update_one({"_id": name}, {"$setOnInsert": fresh}, upsert=True)
            except pe.DuplicateKeyError:  # racing first declarers: the loser finds the document
                continue
            if made.upserted_id is None:
                self._docs.update_one(
                    {"_id": name, "definition": {"$ne": definition}},
                    {"$set": {"definition": definition, "updated_at": now}},
                )
            doc = self._settled(self._docs.find_one({"_id": name}))
            if doc is not None:
                return to_schedule(doc)
        raise BackendFailure(f"schedule {name!r:.60} kept disappearing while being declared")

    @translated
    def get(self, name: str) -> Schedule | None:
        self._d._ensure()
        doc = self._settled(self._docs.find_one({"_id": name}))
        return None if doc is None else to_schedule(doc)

    @translated
    def list(self) -> builtins.list[Schedule]:
        self._d._ensure()
        found = []
        for doc in self._docs.find({}):
            settled = self._settled(doc)
            if settled is not None:
                found.append(to_schedule(settled))
        return found

    @translated
    def fire(
        self, name: str, *, expected: datetime, occurrence: datetime, job: v.StoreTimedJob | None,
        outcome: ScheduleOutcome, overlap: bool,
    ) -> Schedule | None:
        dr = self._d
        now = dr._now()
        spec = None if job is None else job.resolve(now)
        dr._ensure()
        reserved: int | None = None
        for _ in range(_ATTEMPTS):
            doc = self._settled(self._docs.find_one({"_id": name}))
            if doc is None or doc.get("paused") or doc["watermark"] != expected:
                return None
            previous = doc.get("last_job_id")
            skip = not overlap and previous is not None and self._live(previous)
            changes: Doc = {"watermark": occurrence, "last_fired_at": now, "updated_at": now,
                            "last_outcome": (ScheduleOutcome.SKIPPED_OVERLAP if skip else outcome).value}
            if spec is not None and not skip:
                if reserved is None:  # reserved before the compare-and-set; a lost race leaves a gap in ids
                    reserved = dr._next_seqs(1)
                changes["pending"] = {"job": d.new_document(reserved, spec, now)}
            query: Doc = {"_id": name, "watermark": expected, "paused": False, "pending": {"$exists": False},
                          "last_job_id": previous if previous is not None else {"$exists": False}}
            won = self._docs.find_one_and_update(query, {"$set": changes}, return_document=ReturnDocument.AFTER)
            if won is not None:
                settled = self._settled(won)
                return None if settled is None else to_schedule(settled)
            # Lost: the watermark moved, the schedule was paused or removed (the next read
            # answers None), or a firing completed in between (the next read retries).
        raise BackendFailure(f"schedule {name!r:.60} kept changing while firing", "retry the firing")

    def _live(self, job_id: int) -> bool:
        """Whether the schedule's previous job is still live (P03); a pruned one is not."""
        return self._jobs.find_one({"_id": job_id, "state": {"$in": _LIVE}}, {"_id": 1}) is not None

    @translated
    def pause(self, name: str) -> Schedule | None:
        self._d._ensure()
        now = self._d._now()
        self._docs.update_one({"_id": name, "paused": False}, {"$set": {"paused": True, "updated_at": now}})
        return self.get(name)

    @translated
    def resume(self, name: str) -> Schedule | None:
        self._d._ensure()
        now = self._d._now()
        # One atomic write: unpause, move updated_at, lift a watermark left in the past. A
        # running schedule does not match, so resuming it changes nothing.
        doc = self._docs.find_one_and_update(
            {"_id": name, "paused": True}, {"$set": {"paused": False, "updated_at": now}, "$max": {"watermark": now}},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            return self.get(name)
        settled = self._settled(doc)
        return None if settled is None else to_schedule(settled)

    @translated
    def remove(self, name: str) -> bool:
        self._d._ensure()
        return (self._docs.delete_one({"_id": name})).deleted_count == 1

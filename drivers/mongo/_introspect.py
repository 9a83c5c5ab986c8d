# Generated from _introspect_async.py by tools/unasync.py: edit that file, then run the tool.
"""The MongoDB driver's :class:`~jobcore.door.IntrospectBackend` (rules O, C10, R01).

Arguments arrive checked by :class:`~jobcore.door.IntrospectDoor`. Single-job verbs are
one conditional write whose filter carries the states the door gave; only when it
matched nothing does a read tell the door what it found. Bulk verbs pick up to
``limit`` candidate ids (oldest first), then move them with one write whose filter
repeats the guard, so a row that changed state in between is simply not moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument, UpdateOne
from pymongo import errors as pe
from pymongo.collection import Collection

from jobcore.door._introspect import FinishedRow, Refused, Spacing, chart_since, prune_cutoffs
from jobcore.records import FINISHED_STATES, BulkResult, Job, JobFilter, JobState, PruneResult, RescueResult, Stats
from jobcore.vocabulary import CANCELLED_ENTRY, CLAIMABLE_STATES, LEASE_EXPIRED, LEASE_EXPIRED_TEXT, MAX_PRUNE_ROWS

from . import _docs as d
from ._errors import translated

if TYPE_CHECKING:
    from ._store import MongoStore

__all__ = ["MongoIntrospect"]

Doc = dict[str, Any]
JobList = list[Job]
DocList = list[Doc]
IdList = list[int]
_NOTHING: Doc = {"_id": {"$in": []}}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _aware(value: datetime) -> datetime:
    """A BSON date as read back (naive UTC unless the client is tz-aware) as aware UTC."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class MongoIntrospect:
    """Reads, operator verbs and retention over the driver's jobs collection."""

    def __init__(self, driver: MongoStore, jobs: Collection[Doc]) -> None:
        self._d, self._jobs = driver, jobs
        self._bounds = driver._bounds  # read by @translated

    def __repr__(self) -> str:
        return "MongoIntrospect()"

    # -- reads -------------------------------------------------------------------------------

    @translated
    def get(self, seq: int) -> Job | None:
        doc = self._jobs.find_one({"_id": seq})
        return None if doc is None else d.to_job(doc)

    @translated
    def list_older(self, flt: JobFilter, limit: int, below: int | None) -> JobList:
        query = _query(flt)
        bound = query if below is None else _and(query, {"_id": {"$lt": below}})
        return [d.to_job(r) for r in self._jobs.find(bound).sort("_id", DESCENDING).limit(limit)]

    @translated
    def list_newer(self, flt: JobFilter, limit: int, above: int) -> JobList:
        bound = _and(_query(flt), {"_id": {"$gt": above}})
        return [d.to_job(r) for r in self._jobs.find(bound).sort("_id", ASCENDING).limit(limit)]

    @translated
    def stats(self) -> Stats:
        now = self._d._now()
        due = {"state": d.states_in(CLAIMABLE_STATES), "run_at": {"$lte": now}}
        # One round trip for both answers: $facet runs the two groupings over one read.
        cursor = self._jobs.aggregate([{"$facet": {
            "counts": [{"$group": {"_id": {"q": "$queue", "s": "$state"}, "n": {"$sum": 1}}}],
            "oldest": [{"$match": due}, {"$group": {"_id": "$queue", "oldest": {"$min": "$run_at"}}}],
        }}])
        found = next(cursor)
        counts: dict[str, dict[JobState, int]] = {}
        for row in found["counts"]:
            counts.setdefault(row["_id"]["q"], {})[JobState(row["_id"]["s"])] = int(row["n"])
        oldest = {row["_id"]: now - row["oldest"] for row in found["oldest"]}
        return Stats(counts=counts, oldest_due_age=oldest)

    @translated
    def dead_letters(self, queue: str | None, limit: int) -> JobList:
        query: Doc = {"state": JobState.DEAD.value} if queue is None else {"state": JobState.DEAD.value, "queue": queue}
        rows = self._jobs.find(query).sort([("finished_at", DESCENDING), ("_id", DESCENDING)]).limit(limit)
        return [d.to_job(r) for r in rows]

    @translated
    def finished_counts(self, minutes: int) -> list[FinishedRow]:
        since = chart_since(self._d._now(), minutes)
        # The minute by arithmetic on the date (date - date is milliseconds, date - ms a date):
        # the test server has no $dateTrunc. Every value here is the driver's own, none a user's.
        minute = {"$subtract": ["$finished_at", {"$mod": [{"$subtract": ["$finished_at", _EPOCH]}, 60_000]}]}
        rows = self._jobs.aggregate([
            {"$match": {"state": d.states_in(FINISHED_STATES), "finished_at": {"$gte": since}}},
            {"$group": {"_id": {"m": minute, "s": "$state"}, "n": {"$sum": 1}}},
        ])
        return [(_aware(row["_id"]["m"]), JobState(row["_id"]["s"]), int(row["n"])) for row in rows]

    # -- single-job verbs --------------------------------------------------------------------

    @translated
    def rescue(self) -> RescueResult:
        self._d._ensure()
        now = self._d._now()
        buried = self._d._bury(None, frozenset(), now)
        self._d._family.sweep(now)  # rules D: children a crash left waiting on parents that ended
        # update_many re-evaluates the filter on each document as it writes it, so a job
        # heartbeated or reclaimed meanwhile is left alone, and a second sweep finds nothing.
        # A held job (F04) lost no attempt: it goes back as it was, nothing recorded.
        lost = d.errors_appended(LEASE_EXPIRED, LEASE_EXPIRED_TEXT, now)
        moved = self._jobs.update_many(
            d.lapsed_query(None, now, final=False),
            [
                {"$set": {"errors": {"$cond": [{"$eq": ["$held", True]}, "$errors", lost]}}},
                {"$set": {"state": JobState.READY.value, "run_at": now}},
                {"$unset": ["lease_expires_at", "worker_id", "held"]},
            ],
        )
        return RescueResult(requeued=moved.modified_count, buried=tuple(buried))

    def _cancel_update(self, message: str, now: datetime) -> DocList:
        return [d.append_error(CANCELLED_ENTRY, message, now), *d.finish_stages(JobState.CANCELLED.value, now)]

    @translated
    def cancel(self, seq: int, states: frozenset[JobState], message: str) -> Job | None:
        now = self._d._now()
        doc = self._jobs.find_one_and_update(
            {"_id": seq, "state": d.states_in(states)}, self._cancel_update(message, now),
            return_document=ReturnDocument.AFTER,
        )
        if doc is not None:
            self._d._family.ended([doc], now)
        return None if doc is None else d.to_job(doc)

    def relatives(self, seq: int) -> tuple[list[Job], list[Job]] | None:
        """Job ``seq``'s parents and children (rules D)."""
        return self._d._family.relatives(seq)

    def _found(self, seq: int) -> Refused | None:
        doc = self._jobs.find_one({"_id": seq}, {"state": 1})
        return None if doc is None else Refused(JobState(doc["state"]))

    @translated
    def requeue(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        self._d._ensure()
        now = self._d._now()
        try:
            doc = self._jobs.find_one_and_update(
                {"_id": seq, "state": d.states_in(states)}, _requeue_update(now, now),
                return_document=ReturnDocument.AFTER,
            )
        except pe.DuplicateKeyError as exc:
            if not d.key_clash(exc.details or {}):
                raise
            return self._clash(seq)  # the partial unique index: a live job holds the key
        return d.to_job(doc) if doc is not None else self._found(seq)

    def _clash(self, seq: int) -> Refused | None:
        mine = self._jobs.find_one({"_id": seq}, {"state": 1, "name": 1, "key": 1})
        if mine is None:
            return None
        holder = self._jobs.find_one({"name": mine.get("name"), "live_key": mine.get("key")}, {"_id": 1})
        return Refused(
            JobState(mine["state"]), mine.get("key"), None if holder is None else str(holder["_id"]), clash=True,
        )

    @translated
    def remove(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        doc = self._jobs.find_one_and_delete({"_id": seq, "state": d.states_in(states)})
        if doc is not None and doc.get("has_children"):
            self._d._family.removed([doc], self._d._now())
        return d.to_job(doc) if doc is not None else self._found(seq)

    @translated
    def make_due(self, seq: int, states: frozenset[JobState]) -> Job | Refused | None:
        doc = self._jobs.find_one_and_update(
            {"_id": seq, "state": d.states_in(states)},
            # an update pipeline, so the attempt cap reads the row's own fields in the same operation
            [{"$set": {
                "state": JobState.READY.value, "run_at": self._d._now(),
                "attempt": {"$min": ["$attempt", {"$subtract": ["$max_attempts", 1]}]},
            }}],
            return_document=ReturnDocument.AFTER,
        )
        return d.to_job(doc) if doc is not None else self._found(seq)

    # -- bulk verbs: ``flt.state`` is the verb's guard already (O05) --------------------------

    def _pick(self, query: Doc, size: int) -> IdList:
        return [row["_id"] for row in self._jobs.find(query, {"_id": 1}).sort("_id", 1).limit(size)]

    @translated
    def cancel_many(self, flt: JobFilter, limit: int, message: str) -> BulkResult:
        query = _query(flt)
        now = self._d._now()
        update = self._cancel_update(message, now)
        ids = self._pick(query, limit)
        moved = self._jobs.update_many(_and(query, {"_id": {"$in": ids}}), update) if ids else None
        if moved is not None and moved.modified_count:  # rules D: the children of the parents cancelled
            ended = {"_id": {"$in": ids}, "has_children": True, "state": JobState.CANCELLED.value}
            self._d._family.ended(self._jobs.find(ended, {"state": 1, "has_children": 1}).to_list(), now)
        return BulkResult(
            affected=moved.modified_count if moved else 0, remaining=self._jobs.count_documents(query),
        )

    @translated
    def remove_many(self, flt: JobFilter, limit: int) -> BulkResult:
        query = _query(flt)
        ids = self._pick(query, limit)
        shape = {"state": 1, "has_children": 1}
        parents = self._jobs.find({"_id": {"$in": ids}, "has_children": True}, shape).to_list() if ids else []
        gone = self._jobs.delete_many(_and(query, {"_id": {"$in": ids}})) if ids else None
        if parents:  # rules D: settle the children of the parents removed (a row that moved away stays)
            stayed = self._jobs.find({"_id": {"$in": [p["_id"] for p in parents]}}, {"_id": 1}).to_list()
            left = {doc["_id"] for doc in stayed}
            self._d._family.removed([p for p in parents if p["_id"] not in left], self._d._now())
        return BulkResult(affected=gone.deleted_count if gone else 0, remaining=self._jobs.count_documents(query))

    @translated
    def promote_many(self, flt: JobFilter, limit: int) -> BulkResult:
        query = _query(flt)
        ids = self._pick(query, limit)
        update = {"$set": {"state": JobState.READY.value, "run_at": self._d._now()}}
        moved = self._jobs.update_many(_and(query, {"_id": {"$in": ids}}), update) if ids else None
        return BulkResult(
            affected=moved.modified_count if moved else 0, remaining=self._jobs.count_documents(query),
        )

    def _requeueable(self, query: Doc) -> IdList:
        """Finished rows a requeue may move, oldest first (O06).

        A row whose key a live job of its name holds stays; of finished rows sharing a
        name and key only the oldest is listed.
        """
        cursor = self._jobs.find(query, {"_id": 1, "name": 1, "key": 1}).sort("_id", 1)
        rows = list(cursor)
        idents = {(r["name"], r["key"]) for r in rows if r.get("key") is not None}
        live: set[tuple[str, str]] = set()
        if idents:
            either = {"$or": [{"name": n, "live_key": k} for n, k in sorted(idents)]}
            held = self._jobs.find(either, {"name": 1, "live_key": 1})
            live = {(h["name"], h["live_key"]) for h in held}
        out: IdList = []
        for row in rows:
            if row.get("key") is not None:
                ident = (row["name"], row["key"])
                if ident in live:
                    continue
                live.add(ident)
            out.append(row["_id"])
        return out

    @translated
    def requeue_many(self, flt: JobFilter, limit: int, spacing: Spacing) -> BulkResult:
        query = _query(flt)
        self._d._ensure()
        now = self._d._now()
        ids = (self._requeueable(query))[:limit]
        affected = 0
        if ids:
            guard = d.states_in(flt.state or ())
            ops = [
                UpdateOne({"_id": seq, "state": guard}, _requeue_update(now, now + offset))
                for seq, offset in zip(ids, spacing(len(ids)), strict=True)
            ]
            try:
                affected = (self._jobs.bulk_write(ops, ordered=False)).modified_count
            except pe.BulkWriteError as exc:  # a concurrent enqueue took a key: that row stays
                if not all(d.key_clash(e) for e in exc.details.get("writeErrors", [])):
                    raise
                affected = int(exc.details.get("nModified", 0))
        return BulkResult(affected=affected, remaining=len(self._requeueable(query)))

    # -- retention (R01) ---------------------------------------------------------------------

    @translated
    def prune(self, ages: Mapping[JobState, timedelta], limit: int, batch: int, dry_run: bool) -> PruneResult:
        cutoffs = prune_cutoffs(ages, self._d._now())
        removed = dict.fromkeys(cutoffs, 0)
        remaining = dict.fromkeys(cutoffs, 0)
        picked_total = 0
        while not dry_run and picked_total < limit:
            want = min(batch, limit - picked_total)
            # The oldest `want` of each state (each an index range read of jc_finished,
            # backwards), merged here: a hint per state holds on every server, where one
            # $or query would leave the merge to the planner.
            candidates = sorted([
                (row["finished_at"], row["_id"], state)
                for state, cutoff in cutoffs.items()
                for row in self._jobs.find(prune_query(state, cutoff), {"_id": 1, "finished_at": 1})
                .sort(PRUNE_ORDER).hint(FINISHED_INDEX).limit(want)
            ])[:want]
            picked_total += len(candidates)  # counts reads, not deletes: the loop ends even if every row moved away
            for state in {c[2] for c in candidates}:
                ids = [c[1] for c in candidates if c[2] is state]
                # The delete repeats the guard: a row requeued (or finished again) since the read stays.
                guard = {"$and": [prune_query(state, cutoffs[state]), {"_id": {"$in": ids}}]}
                gone = self._jobs.delete_many(guard)
                removed[state] += gone.deleted_count
            if len(candidates) < want:
                break
        # One bounded index count per state: a huge backlog reads as MAX_PRUNE_ROWS ("at
        # least this many"), so answering never costs a scan of the whole history.
        for state, cutoff in cutoffs.items():
            remaining[state] = self._jobs.count_documents(
                prune_query(state, cutoff), limit=MAX_PRUNE_ROWS, hint=FINISHED_INDEX,
            )
        return PruneResult(removed=removed, remaining=remaining)


def _query(flt: JobFilter) -> Doc:
    """The query of a filter the door checked and narrowed (its states never empty)."""
    query = d.filter_query(flt)
    return _NOTHING if query is None else query


FINISHED_INDEX = "jc_finished"
"""``state, finished_at desc, _id desc``: read backwards, one state's rows oldest finished first."""
PRUNE_ORDER = [("finished_at", ASCENDING), ("_id", ASCENDING)]
"""R01: oldest ``finished_at`` first, then enqueue order."""


def prune_query(state: JobState, cutoff: datetime) -> Doc:
    """Jobs of the finished ``state`` that finished at or before ``cutoff`` (R01)."""
    return {"state": state.value, "finished_at": {"$lte": cutoff}}


def _requeue_update(now: datetime, due: datetime) -> list[Doc]:
    """Back to ``ready`` (``scheduled`` when ``due`` is later), attempt 0, the key live again."""
    state = JobState.READY.value if due <= now else JobState.SCHEDULED.value
    return [
        {"$set": {"state": state, "attempt": 0, "run_at": due, "live_key": "$key"}},
        {"$unset": ["finished_at", "result"]},
    ]


def _and(query: Doc, extra: Doc) -> Doc:
    return {"$and": [query, extra]} if query else extra

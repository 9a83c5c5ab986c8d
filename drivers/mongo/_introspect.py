"""Reads and operator verbs of the MongoDB driver (rules O and C10).

Single-job verbs are one conditional write whose filter carries the verb's state guard;
only when it matched nothing does a read decide which refusal to raise. Bulk verbs pick
up to ``limit`` candidate ids (oldest first), then move them with one write whose filter
repeats the guard, so a row that changed state in between is simply not moved.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument, UpdateOne
from pymongo import errors as pe
from pymongo.collection import Collection

from jobcore import validate as v
from jobcore.driver import Duration
from jobcore.errors import (
    JobDuplicate,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
    JobNotResumable,
)
from jobcore.records import (
    FINISHED_STATES,
    LIVE_STATES,
    BulkResult,
    Job,
    JobFilter,
    JobState,
    Page,
    PruneResult,
    RescueResult,
    RetentionPolicy,
    Stats,
)
from jobcore.vocabulary import CANCELLED_ENTRY, LEASE_EXPIRED, LEASE_EXPIRED_TEXT

from . import _docs as d
from ._errors import translated

if TYPE_CHECKING:
    from . import MongoDriver

__all__ = ["MongoIntrospector"]

Doc = dict[str, Any]
# Aliases: inside the class, the name `list` is the decorated listing method.
JobList = list[Job]
DocList = list[Doc]
IdList = list[int]
_CANCELLED_TEXT = "cancelled by an operator"
_NOT_RUNNING = frozenset(JobState) - {JobState.RUNNING}


class MongoIntrospector:
    """The :class:`~jobcore.driver.Introspector` of the MongoDB driver."""

    def __init__(self, driver: MongoDriver, jobs: Collection[Doc]) -> None:
        self._d, self._jobs = driver, jobs
        self._bounds = driver._bounds

    # -- reads -------------------------------------------------------------------------------

    @translated
    def get(self, job_id: str) -> Job | None:
        seq = d.parse_id(v.check_id(job_id))
        doc = None if seq is None else self._jobs.find_one({"_id": seq})
        return None if doc is None else d.to_job(doc)

    @translated
    def list(
        self, filter: JobFilter | None = None, limit: int = v.DEFAULT_PAGE, *,
        after: str | None = None, before: str | None = None,
    ) -> Page:
        flt = v.check_filter(filter)
        size, after_seq, before_seq = v.check_page(limit, after, before)
        query = d.filter_query(flt)
        if query is None:  # an empty set of states matches nothing
            return Page(jobs=())
        if before_seq is not None:
            # The rows just newer than the cursor, read oldest first, shown newest first.
            found = list(self._jobs.find(_and(query, {"_id": {"$gt": before_seq}})).sort("_id", 1).limit(size + 1))
            rows = list(reversed(found[:size]))
            return Page(
                jobs=tuple(d.to_job(r) for r in rows),
                after=v.encode_cursor(rows[-1]["_id"]) if rows else None,
                before=v.encode_cursor(rows[0]["_id"]) if len(found) > size else None,
            )
        bound = query if after_seq is None else _and(query, {"_id": {"$lt": after_seq}})
        rows = list(self._jobs.find(bound).sort("_id", DESCENDING).limit(size))
        return Page(
            jobs=tuple(d.to_job(r) for r in rows),
            after=v.encode_cursor(rows[-1]["_id"]) if len(rows) == size else None,
            before=v.encode_cursor(rows[0]["_id"]) if rows and after_seq is not None else None,
        )

    @translated
    def stats(self) -> Stats:
        now = self._d._now()
        due = {"state": d.states_in((JobState.READY, JobState.SCHEDULED)), "run_at": {"$lte": now}}
        # One round trip for both answers: $facet runs the two groupings over one read.
        found = next(self._jobs.aggregate([{"$facet": {
            "counts": [{"$group": {"_id": {"q": "$queue", "s": "$state"}, "n": {"$sum": 1}}}],
            "oldest": [{"$match": due}, {"$group": {"_id": "$queue", "oldest": {"$min": "$run_at"}}}],
        }}]))
        counts: dict[str, dict[JobState, int]] = {}
        for row in found["counts"]:
            counts.setdefault(row["_id"]["q"], {})[JobState(row["_id"]["s"])] = int(row["n"])
        oldest = {row["_id"]: now - row["oldest"] for row in found["oldest"]}
        return Stats(counts=counts, oldest_due_age=oldest)

    @translated
    def dead_letters(self, queue: str | None = None, limit: int = v.DEFAULT_PAGE) -> JobList:
        name = v.check_name(queue, "queue", optional=True)
        size = v.check_int(limit, "limit", 1, v.MAX_PAGE)
        query: Doc = {"state": JobState.DEAD.value} if name is None else {"state": JobState.DEAD.value, "queue": name}
        rows = self._jobs.find(query).sort([("finished_at", DESCENDING), ("_id", DESCENDING)]).limit(size)
        return [d.to_job(r) for r in rows]

    # -- single-job verbs --------------------------------------------------------------------

    @translated
    def rescue(self) -> RescueResult:
        self._d._ensure()
        now = self._d._now()
        buried = self._d._bury(None, frozenset(), now)
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

    def _cancel_update(self, reason: str | None, now: datetime) -> DocList:
        text = _CANCELLED_TEXT if reason is None else v.error_entry(reason)[1]
        return [d.append_error(CANCELLED_ENTRY, text, now), *d.finish_stages(JobState.CANCELLED.value, now)]

    @translated
    def cancel(self, job_id: str, reason: str | None = None) -> Job | None:
        seq = d.parse_id(v.check_id(job_id))
        update = self._cancel_update(reason, self._d._now())
        if seq is None:
            return None
        doc = self._jobs.find_one_and_update(
            {"_id": seq, "state": d.states_in(LIVE_STATES)}, update, return_document=ReturnDocument.AFTER,
        )
        return None if doc is None else d.to_job(doc)

    def _refusal(self, job_id: str, seq: int | None, refuse: type[Exception], wanted: str) -> Exception:
        doc = None if seq is None else self._jobs.find_one({"_id": seq}, {"state": 1})
        if doc is None:
            return JobNotFound(f"no job has id {job_id!r:.60}")
        return refuse(f"job {job_id} is {doc['state']}, not {wanted}")

    @translated
    def requeue(self, job_id: str) -> Job:
        seq = d.parse_id(v.check_id(job_id))
        self._d._ensure()
        now = self._d._now()
        if seq is not None:
            try:
                doc = self._jobs.find_one_and_update(
                    {"_id": seq, "state": d.states_in(FINISHED_STATES)}, _requeue_update(now, now),
                    return_document=ReturnDocument.AFTER,
                )
            except pe.DuplicateKeyError as exc:
                if not d.key_clash(exc.details or {}):
                    raise
                raise self._duplicate(job_id, seq) from exc  # the partial unique index: a live job holds the key
            if doc is not None:
                return d.to_job(doc)
        raise self._refusal(job_id, seq, JobNotRequeueable, "finished")

    def _duplicate(self, job_id: str, seq: int) -> JobDuplicate:
        mine = self._jobs.find_one({"_id": seq}, {"name": 1, "key": 1}) or {}
        holder = self._jobs.find_one({"name": mine.get("name"), "live_key": mine.get("key")}, {"_id": 1})
        held_by = "another live job" if holder is None else f"live job {holder['_id']}"
        return JobDuplicate(f"job {job_id}'s key {mine.get('key')!r} is held by {held_by}")

    @translated
    def remove(self, job_id: str) -> Job | None:
        seq = d.parse_id(v.check_id(job_id))
        if seq is None:
            return None
        doc = self._jobs.find_one_and_delete({"_id": seq, "state": {"$ne": JobState.RUNNING.value}})
        if doc is not None:
            return d.to_job(doc)
        if self._jobs.find_one({"_id": seq}, {"_id": 1}) is None:
            return None
        raise JobNotRemovable(f"job {job_id} is running")

    def _make_due(self, job_id: str, state: JobState, refuse: type[Exception]) -> Job:
        seq = d.parse_id(v.check_id(job_id))
        if seq is not None:
            doc = self._jobs.find_one_and_update(
                {"_id": seq, "state": state.value},
                # an update pipeline, so the attempt cap reads the row's own fields in the same operation
                [{"$set": {
                    "state": JobState.READY.value, "run_at": self._d._now(),
                    "attempt": {"$min": ["$attempt", {"$subtract": ["$max_attempts", 1]}]},
                }}],
                return_document=ReturnDocument.AFTER,
            )
            if doc is not None:
                return d.to_job(doc)
        raise self._refusal(job_id, seq, refuse, state.value)

    @translated
    def promote(self, job_id: str) -> Job:
        return self._make_due(job_id, JobState.SCHEDULED, JobNotPromotable)

    @translated
    def resume(self, job_id: str) -> Job:
        return self._make_due(job_id, JobState.SUSPENDED, JobNotResumable)

    # -- bulk verbs: each applies its own guard whatever the filter says (O05) ------------

    def _pick(self, query: Doc, size: int) -> IdList:
        return [row["_id"] for row in self._jobs.find(query, {"_id": 1}).sort("_id", 1).limit(size)]

    def _bulk(self, filter: JobFilter | None, limit: int, guard: frozenset[JobState]) -> tuple[Doc | None, int]:
        flt, size = v.check_filter(filter), v.check_bulk_limit(limit)
        return d.filter_query(flt, guard), size

    @translated
    def cancel_many(
        self, filter: JobFilter | None = None, *, reason: str | None = None, limit: int = v.MAX_BULK_ROWS,
    ) -> BulkResult:
        query, size = self._bulk(filter, limit, LIVE_STATES)
        update = self._cancel_update(reason, self._d._now())
        if query is None:
            return BulkResult(affected=0, remaining=0)
        ids = self._pick(query, size)
        moved = self._jobs.update_many(_and(query, {"_id": {"$in": ids}}), update) if ids else None
        return BulkResult(affected=moved.modified_count if moved else 0, remaining=self._jobs.count_documents(query))

    @translated
    def remove_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        query, size = self._bulk(filter, limit, _NOT_RUNNING)
        if query is None:
            return BulkResult(affected=0, remaining=0)
        ids = self._pick(query, size)
        gone = self._jobs.delete_many(_and(query, {"_id": {"$in": ids}})) if ids else None
        return BulkResult(affected=gone.deleted_count if gone else 0, remaining=self._jobs.count_documents(query))

    @translated
    def promote_many(self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS) -> BulkResult:
        query, size = self._bulk(filter, limit, frozenset({JobState.SCHEDULED}))
        if query is None:
            return BulkResult(affected=0, remaining=0)
        ids = self._pick(query, size)
        update = {"$set": {"state": JobState.READY.value, "run_at": self._d._now()}}
        moved = self._jobs.update_many(_and(query, {"_id": {"$in": ids}}), update) if ids else None
        return BulkResult(affected=moved.modified_count if moved else 0, remaining=self._jobs.count_documents(query))

    def _requeueable(self, query: Doc) -> IdList:
        """Finished rows a requeue may move, oldest first (O06).

        A row whose key a live job of its name holds stays; of finished rows sharing a
        name and key only the oldest is listed.
        """
        rows = list(self._jobs.find(query, {"_id": 1, "name": 1, "key": 1}).sort("_id", 1))
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
    def requeue_many(
        self, filter: JobFilter | None = None, *, limit: int = v.MAX_BULK_ROWS, spread: Duration | None = None,
    ) -> BulkResult:
        query, size = self._bulk(filter, limit, FINISHED_STATES)
        window = None if spread is None else v.check_spread(spread)
        if query is None:
            return BulkResult(affected=0, remaining=0)
        self._d._ensure()
        now = self._d._now()
        ids = self._requeueable(query)[:size]
        window = v.default_spread(len(ids)) if window is None else window
        affected = 0
        if ids:
            guard = d.states_in(FINISHED_STATES)
            ops = [
                UpdateOne({"_id": seq, "state": guard}, _requeue_update(now, v.spread_run_at(now, window, i, len(ids))))
                for i, seq in enumerate(ids)
            ]
            try:
                affected = self._jobs.bulk_write(ops, ordered=False).modified_count
            except pe.BulkWriteError as exc:  # a concurrent enqueue took a key: that row stays
                if not all(d.key_clash(e) for e in exc.details.get("writeErrors", [])):
                    raise
                affected = int(exc.details.get("nModified", 0))
        return BulkResult(affected=affected, remaining=len(self._requeueable(query)))

    # -- retention (R01) ---------------------------------------------------------------------

    @translated
    def prune(
        self, policy: RetentionPolicy | None = None, *, limit: int = v.DEFAULT_PRUNE_ROWS,
        batch: int = v.DEFAULT_PRUNE_BATCH, dry_run: bool = False,
    ) -> PruneResult:
        rules, size, step = v.check_prune(policy, limit, batch, dry_run=dry_run)
        cutoffs = v.prune_cutoffs(rules, self._d._now())
        removed = dict.fromkeys(sorted(FINISHED_STATES), 0)
        remaining = dict.fromkeys(sorted(FINISHED_STATES), 0)
        picked_total = 0
        while cutoffs and not dry_run and picked_total < size:
            want = min(step, size - picked_total)
            # The oldest `want` of each state (each an index range read of jc_finished,
            # backwards), merged here: a hint per state holds on every server, where one
            # $or query would leave the merge to the planner.
            candidates = sorted(
                (row["finished_at"], row["_id"], state)
                for state, cutoff in cutoffs.items()
                for row in self._jobs.find(prune_query(state, cutoff), {"_id": 1, "finished_at": 1})
                .sort(PRUNE_ORDER).hint(FINISHED_INDEX).limit(want)
            )[:want]
            picked_total += len(candidates)  # counts reads, not deletes: the loop ends even if every row moved away
            for state in {c[2] for c in candidates}:
                ids = [c[1] for c in candidates if c[2] is state]
                # The delete repeats the guard: a row requeued (or finished again) since the read stays.
                gone = self._jobs.delete_many({"$and": [prune_query(state, cutoffs[state]), {"_id": {"$in": ids}}]})
                removed[state] += gone.deleted_count
            if len(candidates) < want:
                break
        # One bounded index count per state: a huge backlog reads as MAX_PRUNE_ROWS ("at
        # least this many"), so answering never costs a scan of the whole history.
        for state, cutoff in cutoffs.items():
            remaining[state] = self._jobs.count_documents(
                prune_query(state, cutoff), limit=v.MAX_PRUNE_ROWS, hint=FINISHED_INDEX,
            )
        return PruneResult(removed=removed, remaining=remaining)


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

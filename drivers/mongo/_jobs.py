# Generated from _jobs_async.py by tools/unasync.py: edit that file, then run the tool.
"""The MongoDB driver's :class:`~jobcore.door.JobsBackend`: enqueue, claim and settle.

Every argument arrives checked by the front door (:class:`~jobcore.door.FrontDoor`);
the driver object holds the client, the collections and the schema check. Claims are
``find_one_and_update`` pipelines, settles fenced updates; every time is the store's
(F01, the driver's clock).
"""

from __future__ import annotations

import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs
from pymongo import ReturnDocument, UpdateOne
from pymongo import errors as pe
from pymongo.client_session import ClientSession

from jobcore import validate as v
from jobcore.clock import Clock, to_millis
from jobcore.errors import DependencyInvalid, DependencyNotFound, NotSupported
from jobcore.records import Claimed, ClaimResult, ClaimToken, Job, JobState, Migration
from jobcore.vocabulary import LEASE_EXPIRED, LEASE_EXPIRED_TEXT, LEASE_LAPSED_FINAL, LEASE_LAPSED_FINAL_TEMPLATE

from . import _docs as d
from ._errors import translated
from ._family import ENDED_OTHERWISE, Family
from ._watch import Hub, Silent, Subscription

if TYPE_CHECKING:
    from ._store import MongoStore

__all__ = ["MongoJobs"]

Doc = dict[str, Any]
RUNNING, SCHEDULED = JobState.RUNNING.value, JobState.SCHEDULED.value
SUSPENDED, FAILED, DEAD = JobState.SUSPENDED.value, JobState.FAILED.value, JobState.DEAD.value
_SETTLED: Doc = {"state": 1, "has_children": 1}
"""What a settle that reads no job back still reads: whether it ended a parent (rules D)."""


class MongoJobs:
    """Jobs in a MongoDB collection (:class:`~jobcore.door.JobsBackend`), for the MongoDB driver."""

    connection_type = ClientSession

    def __init__(self, driver: MongoStore) -> None:
        self._d = driver
        self._jobs = driver._jobs
        self._bounds = driver._bounds  # the call bound ``translated`` applies
        self.family = Family(driver, driver._jobs)

    @property
    def clock(self) -> Clock:
        return self._d.clock

    @property
    def capabilities(self) -> frozenset[str]:
        return self._d._server_capabilities()

    # -- enqueue -------------------------------------------------------------------------

    def insert(self, jobs: Sequence[v.StoreTimedJob], connection: ClientSession | None) -> list[Job]:
        return self._insert_jobs(jobs, session=connection)

    @translated
    def _insert_jobs(self, jobs: Sequence[v.StoreTimedJob], *, session: ClientSession | None) -> list[Job]:
        """The store's clock decides each due time (F01): resolved on its now, then inserted."""
        now = self._d._now()
        news = []
        for job in jobs:
            run_at, state = job.due(now)
            news.append(v.NewJob(
                name=job.name, queue=job.queue, payload=job.payload, priority=job.priority, run_at=run_at,
                max_attempts=job.max_attempts, key=job.key, state=state, trace_context=job.trace_context,
            ))
        return self._store(news, now, session)

    def _holders(
        self, idents: set[tuple[str, str]], session: ClientSession | None,
    ) -> dict[tuple[str, str], Doc]:
        if not idents:
            return {}
        query = {"$or": [{"name": n, "live_key": k} for n, k in sorted(idents)]}
        return {(doc["name"], doc["live_key"]): doc for doc in self._jobs.find(query, session=session)}

    def _store(
        self, news: Sequence[v.NewJob], now: datetime, session: ClientSession | None,
        decorate: Callable[[list[int], list[tuple[int, Doc]]], None] | None = None,
    ) -> list[Job]:
        """Insert what no live holder's key blocks; answer holders as duplicates (E02, E05).

        ``decorate(ids, fresh)`` (rules D) may change the documents about to be inserted,
        given every item's ``_id`` (its own, or its key holder's) and ``(item, document)``
        of the fresh ones."""
        self._d._ensure()
        holders = self._holders({(n.name, n.key) for n in news if n.key is not None}, session)
        answers: list[Job | None] = [None] * len(news)
        first_in_batch: dict[tuple[str, str], int] = {}
        repeats: list[tuple[int, int]] = []
        fresh: list[int] = []
        for index, new in enumerate(news):
            if new.key is not None:
                ident = (new.name, new.key)
                if ident in holders:
                    answers[index] = d.to_job(holders[ident], duplicate=True)
                    continue
                if ident in first_in_batch:
                    repeats.append((index, first_in_batch[ident]))
                    continue
                first_in_batch[ident] = index
            fresh.append(index)
        if fresh:
            first = self._d._next_seqs(len(fresh))
            docs = [d.new_document(first + n, news[i], now) for n, i in enumerate(fresh)]
            if decorate is not None:
                ids = [0] * len(news)
                for index, job in enumerate(answers):
                    if job is not None:
                        ids[index] = int(job.id)
                for i, doc in zip(fresh, docs, strict=True):
                    ids[i] = doc["_id"]
                for index, earlier in repeats:
                    ids[index] = ids[earlier]
                decorate(ids, list(zip(fresh, docs, strict=True)))
            for i, doc in zip(fresh, docs, strict=True):
                answers[i] = d.to_job(doc)
            for position in self._insert(docs, session):
                doc = docs[position]
                answers[fresh[position]] = self._lost_race(doc, session)
        for index, earlier in repeats:
            first_job = answers[earlier]
            assert first_job is not None  # filled above: inserted, or answered as a duplicate
            answers[index] = attrs.evolve(first_job, duplicate=True)
        return [job for job in answers if job is not None]

    def _insert(self, docs: list[Doc], session: ClientSession | None) -> list[int]:
        """Insert ``docs`` (one round trip); answer positions whose key a concurrent enqueue took.

        A clash on ``_id`` is this very insert's earlier try: PyMongo retries a write whose
        answer was lost, and a server that does not recognise the retry (the test stand-in;
        a standalone server never retries) finds the document there. It is taken as landed
        once the stored document is seen to be ours, never on the clash alone."""
        try:
            if len(docs) == 1:
                self._jobs.insert_one(docs[0], session=session)
            else:
                self._jobs.insert_many(docs, ordered=False, session=session)
        except pe.DuplicateKeyError as exc:
            error = exc.details or {}
            if self._landed_before(docs, [error], session):
                return []
            if session is not None or not d.key_clash(error):
                raise
            return [0]
        except pe.BulkWriteError as exc:
            written = exc.details.get("writeErrors", [])
            clashes = [e for e in written if d.id_clash(e)]
            errors = [e for e in written if not d.id_clash(e)]
            if not written or (clashes and not self._landed_before(docs, clashes, session)):
                raise
            if errors and (session is not None or not all(d.key_clash(e) for e in errors)):
                raise
            return [e["index"] for e in errors]
        return []

    def _landed_before(
        self, docs: list[Doc], errors: Sequence[Mapping[str, Any]], session: ClientSession | None,
    ) -> bool:
        """Whether every error of ``errors`` is an ``_id`` clash with a stored document equal to ours
        (one read, made only when some insert clashed on ``_id``)."""
        clashed = [docs[int(e.get("index", 0))] for e in errors if d.id_clash(e)]
        if not clashed or len(clashed) != len(errors):
            return False
        stored = {
            doc["_id"]: doc for doc in self._jobs.find(
                {"_id": {"$in": [doc["_id"] for doc in clashed]}}, dict.fromkeys(d.SAME_JOB, 1), session=session,
            )
        }
        return all(d.same_job(stored.get(doc["_id"]), doc) for doc in clashed)

    def _lost_race(self, doc: Doc, session: ClientSession | None) -> Job:
        """A key another enqueue took between our check and our insert: answer its holder."""
        for _ in range(5):
            holder = self._jobs.find_one({"name": doc["name"], "live_key": doc["live_key"]}, session=session)
            if holder is not None:
                return d.to_job(holder, duplicate=True)
            try:  # the holder finished in between: the key is free again
                self._jobs.insert_one(doc, session=session)
                return d.to_job(doc)
            except pe.DuplicateKeyError:
                continue
        raise pe.OperationFailure(f"key {doc['live_key']!r} kept changing hands during enqueue")

    @translated
    def insert_linked(
        self, jobs: Sequence[v.StoreTimedJob], links: Sequence[v.Links | None], connection: ClientSession | None,
    ) -> list[Job]:
        """Insert jobs some of which have parents (rules D): parents read and checked before
        anything is written (D04); the batch stored waiting children included, in one insert
        (D03); its parents marked; every waiting child re-checked once stored, so a parent
        that ended meanwhile is never missed (D01)."""
        session = connection
        self._d._ensure()
        stored: dict[str, int] = {}
        for link in links:
            for job_id in () if link is None else link.ids:
                ident = d.parse_id(job_id)
                if ident is None:
                    raise DependencyNotFound(f"depends on job {job_id!s:.60}, which the store does not hold")
                stored[job_id] = ident
        states = self.family.states(sorted(set(stored.values())), session)
        for link in links:
            for job_id in () if link is None else link.ids:
                state = states.get(stored[job_id])
                if state is None:
                    raise DependencyNotFound(f"depends on job {job_id!s:.60}, which the store does not hold")
                if state in ENDED_OTHERWISE and not link.run_anyway:  # type: ignore[union-attr]
                    raise DependencyInvalid(
                        f"job {job_id!s:.60} already ended {state}: it will never be done",
                        'requeue the parent first, or pass on_parent_failure="run"',
                    )
        self.family.mark(sorted(set(stored.values())), session)
        waiting: list[int] = []
        holders: set[int] = set()
        linked: list[int] = []  # each item's _id as the children were linked to it

        def decorate(ids: list[int], fresh: list[tuple[int, Doc]]) -> None:
            linked.extend(ids)
            batch_parents = {ids[e] for link in links if link is not None for e in link.earlier}
            for index, doc in fresh:
                if doc["_id"] in batch_parents:
                    doc["has_children"] = True
                link = links[index]
                if link is None:
                    continue
                parents = [p for p in dict.fromkeys(
                    [stored[i] for i in link.ids] + [ids[e] for e in link.earlier]) if p != doc["_id"]]
                doc["parents"] = parents
                if link.run_anyway:
                    doc["run_anyway"] = True
                in_batch = {ids[e] for e in link.earlier}
                if any(p in in_batch or states[p] not in (JobState.DONE.value, *ENDED_OTHERWISE)
                       or (states[p] in ENDED_OTHERWISE and not link.run_anyway) for p in parents):
                    doc["state"], doc["waiting"] = SUSPENDED, True
                    waiting.append(doc["_id"])
            fresh_ids = {doc["_id"] for _, doc in fresh}
            holders.update(p for p in batch_parents if p not in fresh_ids)

        now = self._d._now()
        news = []
        for job in jobs:
            run_at, state = job.due(now)
            news.append(v.NewJob(
                name=job.name, queue=job.queue, payload=job.payload, priority=job.priority, run_at=run_at,
                max_attempts=job.max_attempts, key=job.key, state=state,
            ))
        answers = self._store(news, now, session, decorate)
        # An in-batch parent whose key a concurrent enqueue took at the same instant was
        # answered by that key's holder, not stored: point its children at the holder.
        for index in sorted({e for link in links if link is not None for e in link.earlier}):
            if linked and int(answers[index].id) != linked[index]:
                holder = int(answers[index].id)
                self._jobs.update_many(
                    {"parents": linked[index]}, {"$set": {"parents.$": holder}}, session=session,
                )
                holders.add(holder)
        self.family.mark(sorted(holders), session)
        if waiting and session is None:  # in the caller's transaction, nothing else sees the children yet
            self.family.recheck(waiting, now)
            current = {doc["_id"]: doc["state"] for doc in self._jobs.find({"_id": {"$in": waiting}}, {"state": 1})}
            answers = [
                attrs.evolve(job, state=JobState(current[int(job.id)]))
                if not job.duplicate and int(job.id) in current else job
                for job in answers
            ]
        return answers

    # -- claim -----------------------------------------------------------------------------

    @translated
    def claim(
        self, queues: tuple[str, ...], worker_id: str, limit: int, lease: timedelta, *, drop: frozenset[str],
        start: bool,
    ) -> ClaimResult:
        """See :meth:`jobcore.driver.JobDriver.claim`; ``start=False`` holds the jobs (F04)."""
        names, worker, size, span, begin = queues, worker_id, limit, lease, start
        self._d._ensure()
        now = self._d._now()
        expires = to_millis(now + span)
        claimed: list[Claimed] = []
        buried: list[Job] = []
        # Steps 1 and 2 in one pass over lapsed leases, in claim order: each write buries
        # or reclaims the job it matched, deciding from that job's own attempt count.
        settle = _lapsed_stages(worker, now, expires, drop, begin)
        lapsed = d.lapsed_query(names, now, final=None)
        while len(claimed) < size:
            doc = self._jobs.find_one_and_update(
                lapsed, settle, sort=d.CLAIM_ORDER, return_document=ReturnDocument.AFTER,
            )
            if doc is None:
                break
            if doc["state"] == RUNNING:
                claimed.append(_claimed(doc, now))
            else:
                buried.append(d.to_job(doc))
                if doc.get("has_children"):
                    self.family.ended([doc], now)
        if len(claimed) == size:  # full: bury what is left on its final attempt, reclaim nothing more
            buried += self._bury(names, drop, now)
        due, take = d.due_query(names, now), _take_stages(worker, now, expires, begin)
        while len(claimed) < size:
            doc = self._jobs.find_one_and_update(
                due, take, sort=d.CLAIM_ORDER, hint=d.CLAIM_INDEX, return_document=ReturnDocument.AFTER,
            )
            if doc is None:
                break
            claimed.append(_claimed(doc, now))
        return ClaimResult(claimed=tuple(claimed), buried=tuple(buried))

    def _bury(self, queues: Sequence[str] | None, drop: frozenset[str], now: datetime) -> list[Job]:
        """Settle every lapsed final-attempt job in ``queues`` (all when None), one fenced write each (C08)."""
        query = d.lapsed_query(queues, now, final=True)
        update = [d.append_error(LEASE_LAPSED_FINAL, _BURIAL_TEXT, now), *d.finish_stages(_burial_state(drop), now)]
        buried: list[Job] = []
        while True:
            doc = self._jobs.find_one_and_update(
                query, update, sort=[("lease_expires_at", 1), ("_id", 1)], return_document=ReturnDocument.AFTER,
            )
            if doc is None:
                return buried
            buried.append(d.to_job(doc))
            if doc.get("has_children"):
                self.family.ended([doc], now)

    # -- start, heartbeat and settle ------------------------------------------------------

    @translated
    def start(self, tokens: list[ClaimToken]) -> list[bool]:
        """See :meth:`jobcore.driver.DeferredStart.start`: :meth:`_each_fenced`."""
        if not tokens:
            return []
        return self._each_fenced(tokens, [_started(self._d._now())])

    @translated
    def heartbeat(self, token: ClaimToken, lease: timedelta) -> bool:
        fence = _fence(token)
        if fence is None:
            return False
        expires = to_millis(self._d._now() + lease)
        found = self._jobs.update_one(fence, {"$set": {"lease_expires_at": expires}})
        return found.matched_count == 1

    @translated
    def heartbeat_many(self, tokens: list[ClaimToken], lease: timedelta) -> list[bool]:
        """See :meth:`jobcore.driver.BatchHeartbeats.heartbeat_many`: :meth:`_each_fenced`."""
        expires = to_millis(self._d._now() + lease)
        return self._each_fenced(tokens, {"$set": {"lease_expires_at": expires}})

    def _each_fenced(self, tokens: list[ClaimToken], update: Doc | list[Doc]) -> list[bool]:
        """``update`` on each current token's job: ``True`` per token it matched, in input order.

        One fenced update per token, sent as one bulk write. Its matched count answers
        the batch outright when every token or none matched; otherwise one read of the
        fence fields tells which tokens are current. A token current at that read was
        current when its update ran (a token never becomes current again), so its
        update landed; one superseded in between answers ``False``, as it would a
        moment later anyway.
        """
        fences = [_fence(token) for token in tokens]
        ops = [UpdateOne(fence, update) for fence in fences if fence is not None]
        if not ops:
            return [False] * len(fences)
        if len(fences) == 1:
            return [fences[0] is not None and (self._jobs.update_one(fences[0], update)).matched_count == 1]
        matched = (self._jobs.bulk_write(ops, ordered=False)).matched_count
        if matched in (0, len(ops)):
            return [fence is not None and matched > 0 for fence in fences]
        ids = sorted({fence["_id"] for fence in fences if fence is not None})
        current = {
            (doc["_id"], doc.get("worker_id"), doc.get("claim_no"))
            for doc in self._jobs.find({"_id": {"$in": ids}, "state": RUNNING}, {"worker_id": 1, "claim_no": 1})
        }
        return [f is not None and (f["_id"], f["worker_id"], f["claim_no"]) in current for f in fences]

    @translated
    def progress(self, token: ClaimToken, value: float | None, message: str | None) -> bool:
        fence = _fence(token)
        if fence is None:
            return False
        now = self._d._now()
        # A plain (not pipeline) update: the message is stored as given, never read as an operator.
        entry = {"value": value, "message": message, "at": now}
        found = self._jobs.update_one(fence, {"$set": {"progress": entry}})
        return found.matched_count == 1

    @translated
    def ack_many(self, items: list[tuple[ClaimToken, str | None]], landed_only: bool) -> list[Any]:
        if not items:
            return []
        now = self._d._now()
        if len(items) == 1:
            token, text = items[0]
            fence = _fence(token)
            if landed_only:  # the job is not read back: only what settling its children needs (D01)
                doc = None if fence is None else self._jobs.find_one_and_update(
                    fence, _ack_stages(text, now), _SETTLED, return_document=ReturnDocument.AFTER,
                )
                if doc is not None and doc.get("has_children"):
                    self.family.ended([doc], now)
                return [doc is not None]
            doc = None if fence is None else self._jobs.find_one_and_update(
                fence, _ack_stages(text, now), return_document=ReturnDocument.AFTER
            )
            if doc is not None and doc.get("has_children"):
                self.family.ended([doc], now)
            return [None if doc is None else d.to_job(doc)]
        # A batch: one bulk write, each update fenced on its own token and stamped with its
        # own mark, then one read of the marks tells which landed (two round trips in all).
        # The read shows each job as it stands after the batch; only a job removed in the
        # instant between the two would answer None although its ack landed.
        batch = uuid.uuid4().hex
        ops: list[UpdateOne] = []
        marks: list[str | None] = []
        for index, (token, text) in enumerate(items):
            fence = _fence(token)
            if fence is None:
                marks.append(None)
                continue
            mark = f"{batch}:{index}"
            ops.append(UpdateOne(fence, _ack_stages(text, now, mark)))
            marks.append(mark)
        landed: dict[str, Doc] = {}
        if ops:
            self._jobs.bulk_write(ops, ordered=False)
            wanted = [m for m in marks if m is not None]
            shape = {"settle_mark": 1, **_SETTLED} if landed_only else None  # landed_only: the marks alone, no job
            landed = {doc["settle_mark"]: doc for doc in self._jobs.find({"settle_mark": {"$in": wanted}}, shape)}
            self.family.ended(landed.values(), now)
        if landed_only:
            return [m is not None and m in landed for m in marks]
        return [None if m is None or m not in landed else d.to_job(landed[m]) for m in marks]

    @translated
    def nack(
        self, token: ClaimToken, type_name: str, message: str, retry_at: datetime | None, *,
        dead_letter: bool, fail: bool, counts_as_attempt: bool, park: bool,
    ) -> Job | None:
        fence = _fence(token)
        if fence is None:
            return None
        now = self._d._now()
        # A held attempt starts first (F04), so the error is recorded against it and a
        # give-back (counts_as_attempt=False) leaves the attempt where it was.
        stages: list[Doc] = [_started(now), d.append_error(type_name, message, now)]
        if not counts_as_attempt:
            stages.append({"$set": {"attempt": {"$subtract": ["$attempt", 1]}}})
        if fail:
            stages += d.finish_stages(FAILED, now)
        elif park:
            stages += [{"$set": {"state": SUSPENDED}}, {"$unset": ["lease_expires_at", "worker_id"]}]
        else:
            # The only decision that depends on the document: out of attempts or not.
            final = {"$gte": ["$attempt", "$max_attempts"]}
            stages += [
                {"$set": {
                    "state": {"$cond": [final, DEAD if dead_letter else FAILED, SCHEDULED]},
                    "run_at": {"$cond": [final, "$run_at", now if retry_at is None else retry_at]},
                    "finished_at": {"$cond": [final, now, "$$REMOVE"]},
                    "live_key": {"$cond": [final, "$$REMOVE", "$live_key"]},
                }},
                {"$unset": ["lease_expires_at", "worker_id"]},
            ]
        doc = self._jobs.find_one_and_update(fence, stages, return_document=ReturnDocument.AFTER)
        if doc is not None and doc.get("has_children") and doc["state"] in ENDED_OTHERWISE:
            self.family.ended([doc], now)
        return None if doc is None else d.to_job(doc)

    # -- wake-ups, lifecycle ----------------------------------------------------------------

    @translated
    def subscribe(self, queues: frozenset[str], callback: Callable[[str], None]) -> Subscription | Silent:
        if "notify" not in self._d.capabilities:
            return Silent()
        with self._d._lock:  # one shared stream per driver (see _watch)
            if self._d._hub is None:
                hub = Hub(self._d)
                hub.start()
                self._d._hub = hub
            return self._d._hub.add((queues, callback))

    @translated
    def watch(self, seq: int, wake: Callable[[], None]) -> Subscription:
        """``wait``'s wake-ups for job ``seq`` (A02): the driver's change stream (the one its
        subscriptions share) calls ``wake()`` when an update leaves the job finished. Nothing
        is written: the stream sees every job's updates anyway. Without change streams (a
        standalone server): ``JC_NOT_SUPPORTED``, and ``wait`` polls."""
        if "notify" not in self._d.capabilities:
            raise NotSupported("this server has no change streams", "let wait poll, or run a replica set")

        def heard(_: str) -> None:
            wake()

        with self._d._lock:  # one shared stream per driver (see _watch)
            if self._d._hub is None:
                hub = Hub(self._d)
                hub.start()
                self._d._hub = hub
            return self._d._hub.add((frozenset({d.waiting_key(seq)}), heard))

    def migrate(self, dry_run: bool) -> Migration:
        return self._d._migrate(dry_run=dry_run)

    def close(self) -> None:
        with self._d._lock:
            hub, self._d._hub = self._d._hub, None
        if hub is not None:
            hub.close()
        if self._d._owns_client:
            self._d._client.close()

    def __repr__(self) -> str:
        return f"collection={self._jobs.full_name!r}, clock={self._d.clock!r}"


def _burial_text() -> Doc:
    """The burial entry's message (C08) as a ``$concat`` of the vocabulary's template and the
    document's ``attempt`` and ``max_attempts``."""
    pieces: list[Any] = []
    for literal, field, _, _ in string.Formatter().parse(LEASE_LAPSED_FINAL_TEMPLATE):
        if literal:
            pieces.append({"$literal": literal})
        if field is not None:
            pieces.append({"$toString": f"${field}"})
    return {"$concat": pieces}


_BURIAL_TEXT = _burial_text()
_HELD = {"$eq": ["$held", True]}
"""True while the job is held: claimed with ``start=False``, its attempt not started (F04)."""


def _burial_state(drop: frozenset[str]) -> Doc:
    """``failed`` for job names in ``drop_exhausted``, else ``dead`` (C08)."""
    return {"$cond": [{"$in": ["$name", {"$literal": sorted(drop)}]}, FAILED, DEAD]}


def _lapsed_stages(worker: str, now: datetime, expires: datetime, drop: frozenset[str], start: bool) -> list[Doc]:
    """Pipeline settling one lapsed job: buried on its final started attempt (C08), else reclaimed (C07).

    ``_held`` and ``_final`` are computed from the document as the server writes it, so
    the choice never rests on an earlier read; every field then takes one branch or the
    other. A held job (F04) lost nothing: no error is recorded, it is never buried, and
    its attempt moves only if this claim starts it.
    """
    final = "$_final"

    def pick(buried: Any, reclaimed: Any) -> Doc:
        return {"$cond": [final, buried, reclaimed]}

    lost = d.errors_appended(
        pick(LEASE_LAPSED_FINAL, LEASE_EXPIRED), pick(_BURIAL_TEXT, {"$literal": LEASE_EXPIRED_TEXT}), now,
    )
    return [
        {"$set": {"_held": _HELD}},
        {"$set": {"_final": {"$and": [{"$not": ["$_held"]}, {"$gte": ["$attempt", "$max_attempts"]}]}}},
        {"$set": {"errors": {"$cond": ["$_held", "$errors", lost]}}},
        {"$set": {
            "state": pick(_burial_state(drop), RUNNING),
            "finished_at": pick(now, "$$REMOVE"),
            "worker_id": pick("$$REMOVE", {"$literal": worker}),
            "lease_expires_at": pick("$$REMOVE", expires),
            "live_key": pick("$$REMOVE", "$live_key"),
            "claim_no": pick("$claim_no", {"$add": ["$claim_no", 1]}),
            "attempt": pick("$attempt", {"$add": ["$attempt", 1]} if start else "$attempt"),
            "attempted_at": pick("$attempted_at", now if start else "$attempted_at"),
            "held": pick("$$REMOVE", "$$REMOVE" if start else {"$literal": True}),
            "progress": pick("$progress", "$$REMOVE"),
        }},
        {"$unset": ["_final", "_held"]},
    ]


def _take_stages(worker: str, now: datetime, expires: datetime, start: bool) -> list[Doc]:
    """Pipeline making a claimable job ``running`` for ``worker`` (C06), its attempt started or held (F04)."""
    took: Doc = {
        "state": RUNNING, "worker_id": {"$literal": worker}, "claim_no": {"$add": ["$claim_no", 1]},
        "lease_expires_at": expires, "progress": "$$REMOVE",
    }
    if start:
        took |= {"attempt": {"$add": ["$attempt", 1]}, "attempted_at": now, "held": "$$REMOVE"}
    else:
        took["held"] = {"$literal": True}
    return [{"$set": took}]


def _started(now: datetime) -> Doc:
    """Pipeline stage starting a held attempt (F04): ``attempt + 1``, ``attempted_at`` now.

    A started attempt is left as it is, so starting twice, or settling a started job,
    changes nothing here.
    """
    return {"$set": {
        "attempt": {"$cond": [_HELD, {"$add": ["$attempt", 1]}, "$attempt"]},
        "attempted_at": {"$cond": [_HELD, now, "$attempted_at"]},
        "held": "$$REMOVE",
    }}


def _claimed(doc: Doc, now: datetime) -> Claimed:
    """The claim's answer; a held job as its attempt will stand once started (F04)."""
    if doc.get("held"):
        doc = {**doc, "attempt": doc["attempt"] + 1, "attempted_at": now}
    job = d.to_job(doc)
    return Claimed(job=job, token=ClaimToken(job_id=job.id, worker_id=doc["worker_id"], claim_no=job.claim_no))


def _fence(token: ClaimToken) -> Doc | None:
    """The filter matching the job only while ``token`` is current (L01-L03)."""
    seq = d.parse_id(token.job_id)
    claim_no = v.token_claim_no(token)  # beyond 64 bits BSON cannot even encode it: no job has it
    if seq is None or claim_no is None or not isinstance(token.worker_id, str):
        return None
    return {"_id": seq, "state": RUNNING, "worker_id": token.worker_id, "claim_no": claim_no}


def _ack_stages(text: str | None, now: datetime, mark: str | None = None) -> list[Doc]:
    """Pipeline settling a job ``done`` with ``text`` as its result, a held attempt started first."""
    done: Doc = {
        "state": JobState.DONE.value, "finished_at": now, "result": "$$REMOVE" if text is None else {"$literal": text},
    }
    if mark is not None:
        done["settle_mark"] = {"$literal": mark}
    return [_started(now), {"$set": done}, {"$unset": ["lease_expires_at", "worker_id", "live_key"]}]

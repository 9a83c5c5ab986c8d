# Generated from _jobs_async.py by tools/unasync.py: edit that file, then run the tool.
"""The PostgreSQL driver's :class:`~jobcore.door.JobsBackend`: enqueue, claim and settle, one statement each.

Every argument arrives checked by the front door (:class:`~jobcore.door.FrontDoor`).
Every statement is declared once in :mod:`._sql`; the driver object holds the plumbing
(pool, schema check, :meth:`~jobcore.drivers.postgres.PostgresDriver._fetch`), and every
time decision is the statement's, on the store's clock (F01).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs
import psycopg

from jobcore import validate as v
from jobcore.errors import (
    BackendLocked,
    BackendUnavailable,
    DependencyInvalid,
    DependencyNotFound,
    NotSupported,
    OptionInvalid,
)
from jobcore.records import Claimed, ClaimResult, ClaimToken, Job, JobState, Migration

from ._notify import FinishHub, Listener, Waiting
from ._pool import check_conninfo, writable_only
from ._rows import EPOCH, decode_stored, job_from_row, parse_id
from ._sql.jobs import SETTLE_LOCK_WAIT

if TYPE_CHECKING:
    from . import PostgresDriver

__all__ = ["PostgresJobs"]

Row = tuple[Any, ...]
_MAX_HOLDER_RETRIES = 5
_MS = timedelta(milliseconds=1)
ACK_BATCH_BYTES = 32 * 1024 * 1024
"""Most result text (characters of JSON) one ack statement carries; a batch with more is sent
as several statements. PostgreSQL refuses a ``jsonb`` array above 256 MiB (SQLSTATE 54000):
an ack batch of 300 results of 1 MiB each (results may be up to ``MAX_PAYLOAD_BYTES``) failed
whole on every try, and the worker's retries of it too, until it gave up and every job of it
ran again."""
_CAPABILITIES = frozenset({
    "shared_store", "transactional_enqueue", "ack_landed_only", "deferred_start", "dependencies", "heartbeat_many",
})
_ENDED_OTHERWISE = frozenset({"failed", "dead", "cancelled"})


def _token_row(token: ClaimToken) -> tuple[int, str, int] | None:
    """``(id, worker_id, claim_no)`` as the row holds them, or None for a token no row can match."""
    job_id, worker, claim_no = token.job_id, token.worker_id, v.token_claim_no(token)
    if claim_no is None:
        return None
    ident = parse_id(job_id) if isinstance(job_id, str) else None
    if ident is None or not isinstance(worker, str):
        return None
    return ident, worker, claim_no


def _fenced(tokens: Sequence[ClaimToken]) -> tuple[list[tuple[int, str, int]], list[list[int]]]:
    """The distinct tokens a row can match, as ``(id, worker_id, claim_no)`` items, and for
    each item the input positions holding that token (a token given twice answers twice)."""
    items: list[tuple[int, str, int]] = []
    where: list[list[int]] = []
    position: dict[tuple[int, str, int], int] = {}
    for index, token in enumerate(tokens):
        ident = _token_row(token)
        if ident is None:
            continue
        at = position.get(ident)
        if at is None:
            position[ident] = at = len(items)
            items.append(ident)
            where.append([])
        where[at].append(index)
    return items, where


def _inserted(id_: int, new: v.StoreTimedJob, due: tuple[datetime, JobState], now: datetime) -> Job:
    """The job a keyless insert stored: what was sent (checked, UTC, to the millisecond),
    its due time and state as the statement decided them on ``now`` (the store's), and its
    id, with no row to read back."""
    return Job.positional(
        str(id_), new.name, new.queue, decode_stored(new.payload), due[1], new.priority, 0, new.max_attempts,
        due[0], now, None, None, None, 0, None, None, None, None, (), None, None, False,
    )


def _built(rows: Sequence[Row], news: Sequence[v.StoreTimedJob], now: datetime) -> list[Job]:
    """The jobs of a keyless insert, from the ids it answered (in input order) and the store's ``now``."""
    jobs = []
    shape: tuple[datetime | None, timedelta] | None = None
    due: tuple[datetime, JobState] = (now, JobState.READY)
    for row, new in zip(rows, news, strict=True):
        if shape is None or new.run_at is not shape[0] or new.delay != shape[1]:  # a batch mostly shares one
            shape, due = (new.run_at, new.delay), new.due(now)
        jobs.append(_inserted(row[0], new, due, now))
    return jobs


def _store_now(epoch_ms: int) -> datetime:
    """The store's now as a statement answered it (epoch milliseconds)."""
    return EPOCH + timedelta(milliseconds=epoch_ms)


def _enqueue_items(news: Sequence[v.StoreTimedJob]) -> str:
    """The ``items`` parameter of the enqueue statements: one JSON array of rows (see ``_sql.ENQUEUE``)."""
    rows = []
    stamp: datetime | None = None
    text: str | None = None
    for n in news:
        if n.run_at is not stamp:  # a batch mostly shares one due time: write it once
            stamp, text = n.run_at, None if n.run_at is None else n.run_at.isoformat()
        row: list[Any] = [n.name, n.queue, n.payload, n.delay // _MS, n.priority, text, n.max_attempts, n.key]
        if n.trace_context is not None:
            row.append(n.trace_context)
        rows.append(row)
    return json.dumps(rows)


class PostgresJobs:
    """Jobs in PostgreSQL (:class:`~jobcore.door.JobsBackend`), over the driver's pool."""

    connection_type = psycopg.Connection

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver
        self._hub: FinishHub | None = None
        self._hub_guard = threading.Lock()
        self._hub_open = threading.Lock()
        """Held while the hub opens: concurrent first waits share one LISTEN connection."""

    @property
    def clock(self) -> Any:
        return self._d.clock

    @property
    def capabilities(self) -> frozenset[str]:
        """What this driver offers; ``notify`` and ``finish_notify`` (LISTEN) unless a transaction
        pooler is in the way and no ``listen_url`` was given (finding that out may take a connection)."""
        d = self._d
        if d.listen_url is not None or not d._behind_pooler():
            return _CAPABILITIES | {"notify", "finish_notify"}
        return _CAPABILITIES

    # -- enqueue -----------------------------------------------------------------------

    def insert(self, jobs: Sequence[v.StoreTimedJob], connection: psycopg.Connection[Any] | None) -> list[Job]:
        """Insert checked jobs; the store decides their times (F01) and answers its now, from
        which the keyless forms build each job as the statement stored it."""
        d, news = self._d, jobs
        now = d._now()
        if len(news) == 1 and news[0].key is None and news[0].trace_context is None:  # the common case: scalars
            new = news[0]
            rows = d._fetch(d.q.ENQUEUE_ONE, {
                "name": new.name, "queue": new.queue, "payload": new.payload, "priority": new.priority,
                "run_at": new.run_at, "delay_ms": new.delay // _MS, "max_attempts": new.max_attempts, "now": now,
                "channel": d.channel,
            }, conn=connection)
            stamp = _store_now(rows[0][2])
            return [_inserted(rows[0][0], new, new.due(stamp), stamp)]
        # No key, no conflict: the plain batch insert. A traced job (its context stored too) takes ENQUEUE.
        if all(n.key is None and n.trace_context is None for n in news):
            first = news[0]
            shared = (first.name, first.queue, first.priority, first.run_at, first.delay, first.max_attempts)
            if all((n.name, n.queue, n.priority, n.run_at, n.delay, n.max_attempts) == shared for n in news):
                # Every item's text is canonical JSON, so joining them makes the JSON array.
                rows = d._fetch(d.q.ENQUEUE_UNIFORM, {
                    "payloads": f"[{','.join([n.payload for n in news])}]", "name": first.name,
                    "queue": first.queue, "priority": first.priority, "run_at": first.run_at,
                    "delay_ms": first.delay // _MS, "max_attempts": first.max_attempts, "now": now,
                    "channel": d.channel,
                }, conn=connection)
            else:
                rows = d._fetch(d.q.ENQUEUE_MANY, {
                    "items": _enqueue_items(news), "now": now, "channel": d.channel,
                }, conn=connection)
            return _built(rows, news, _store_now(rows[0][1]))
        answers: dict[int, Job] = {}
        pending = list(range(len(news)))
        for _ in range(_MAX_HOLDER_RETRIES):
            batch = [news[i] for i in pending]
            rows = d._fetch(
                d.q.ENQUEUE, {"items": _enqueue_items(batch), "now": now, "channel": d.channel}, conn=connection
            )
            for row in rows:
                index = pending[row[0] - 1]
                answers.setdefault(index, job_from_row(row[2:], duplicate=row[1]))
            missing = [i for i in pending if i not in answers]
            # A key held by a row another transaction committed after this statement's
            # snapshot: look the holder up with a fresh snapshot; if it already finished,
            # the key is free and the next round inserts.
            for index in missing:
                found = d._fetch(d.q.KEY_HOLDER, {"name": news[index].name, "key": news[index].key}, conn=connection)
                if found:
                    answers[index] = job_from_row(found[0], duplicate=True)
            pending = [i for i in missing if i not in answers]
            if not pending:
                return [answers[i] for i in range(len(news))]
        raise BackendUnavailable(
            "an idempotency key kept changing hands while enqueueing", "retry the enqueue"
        )

    def insert_linked(
        self, jobs: Sequence[v.StoreTimedJob], links: Sequence[v.Links | None],
        connection: psycopg.Connection[Any] | None,
    ) -> list[Job]:
        """Insert jobs some of which have parents (rules D), in one transaction (the caller's
        when given): lock and mark the stored parents, insert, lock and mark the batch's
        parents, link the children. Refusals roll everything back (D03, D04)."""
        if connection is not None:
            return self._linked(jobs, links, connection)
        with self._d._transaction() as conn:
            return self._linked(jobs, links, conn)

    def _linked(
        self, jobs: Sequence[v.StoreTimedJob], links: Sequence[v.Links | None], conn: psycopg.Connection[Any],
    ) -> list[Job]:
        d = self._d
        stored: dict[str, int] = {}  # a parent id as the caller spelled it -> the row's id
        for link in links:
            for job_id in () if link is None else link.ids:
                ident = parse_id(job_id)
                if ident is None:
                    raise DependencyNotFound(f"depends on job {job_id!s:.60}, which the store does not hold")
                stored[job_id] = ident
        states: dict[int, str] = {}
        if stored:
            rows = d._fetch(d.q.MARK_PARENTS, {"ids": sorted(set(stored.values()))}, conn=conn)
            states.update((row[0], row[1]) for row in rows)
        for link in links:
            for job_id in () if link is None else link.ids:
                state = states.get(stored[job_id])
                if state is None:
                    raise DependencyNotFound(f"depends on job {job_id!s:.60}, which the store does not hold")
                if state in _ENDED_OTHERWISE and not link.run_anyway:  # type: ignore[union-attr]
                    raise DependencyInvalid(
                        f"job {job_id!s:.60} already ended {state}: it will never be done",
                        'requeue the parent first, or pass on_parent_failure="run"',
                    )
        answers = self.insert(jobs, conn)
        batch = sorted({int(answers[i].id) for link in links if link is not None for i in link.earlier} - set(states))
        if batch:
            rows = d._fetch(d.q.MARK_PARENTS, {"ids": batch}, conn=conn)
            states.update((row[0], row[1]) for row in rows)
        items = []
        for index, (job, link) in enumerate(zip(answers, links, strict=True)):
            if link is None or job.duplicate:
                continue
            own = int(job.id)
            named = [stored[i] for i in link.ids] + [int(answers[e].id) for e in link.earlier]
            parents = [p for p in dict.fromkeys(named) if p != own]
            wait = any(
                states[p] != "done" and (states[p] not in _ENDED_OTHERWISE or not link.run_anyway) for p in parents
            )
            items.append([own, parents, link.run_anyway, wait])
            if wait:
                answers[index] = attrs.evolve(job, state=JobState.SUSPENDED)
        if items:
            d._fetch(d.q.LINK_CHILDREN, {"items": json.dumps(items)}, conn=conn)
        return answers

    # -- claim and settle ----------------------------------------------------------------

    def claim(
        self, queues: tuple[str, ...], worker_id: str, limit: int, lease: timedelta, *, drop: frozenset[str],
        start: bool,
    ) -> ClaimResult:
        d = self._d
        rows = d._fetch(d.q.CLAIM, {
            "queues": list(queues), "worker": worker_id, "limit": limit, "now": d._now(), "lease_ms": lease // _MS,
            "drop": sorted(drop), "start": start, "finished": d.finish_channel,
        }, retry=True)
        claimed: list[Claimed] = []
        buried: list[Job] = []
        for row in rows:
            job = job_from_row(row[2:])
            if row[0] == 0:
                claimed.append(Claimed.positional(job, ClaimToken.positional(job.id, worker_id, job.claim_no)))
            else:
                buried.append(job)
        return ClaimResult(claimed=tuple(claimed), buried=tuple(buried))

    def heartbeat(self, token: ClaimToken, lease: timedelta) -> bool:
        fence = _fence(token)
        if fence is None:
            return False
        d = self._d
        try:
            rows = d._fetch(d.q.HEARTBEAT, {**fence, "now": d._now(), "lease_ms": lease // _MS}, retry=True)
        except BackendLocked as exc:
            raise _one_locked(exc, token, "its lease was not renewed") from exc.__cause__
        return bool(rows)

    def progress(self, token: ClaimToken, value: float | None, message: str | None) -> bool:
        fence = _fence(token)
        if fence is None:
            return False
        d = self._d
        # Retried like heartbeat: writing the same progress twice is harmless.
        shown = None if value is None else repr(value)  # exact as text: see PROGRESS
        try:
            rows = d._fetch(
                d.q.PROGRESS, {**fence, "now": d._now(), "value": shown, "message": message}, retry=True,
            )
        except BackendLocked as exc:
            raise _one_locked(exc, token, "its progress was not stored") from exc.__cause__
        return bool(rows)

    def heartbeat_many(self, tokens: list[ClaimToken], lease: timedelta) -> list[bool]:
        """Renew a batch of leases in one statement: see :class:`~jobcore.driver.BatchHeartbeats`."""
        d = self._d
        # Retried like heartbeat: renewing twice is harmless, and a lost reply's retry answers again.
        return self._each_fenced(
            tokens, d.q.HEARTBEAT_MANY, d.q.HEARTBEAT_MANY_FREE, {"lease_ms": lease // _MS}, "not renewed",
        )

    def start(self, tokens: list[ClaimToken]) -> list[bool]:
        """Start held attempts (F04): see :class:`~jobcore.driver.DeferredStart`."""
        d = self._d
        # Retried like heartbeat: starting twice is harmless, and a lost reply's retry answers again.
        return self._each_fenced(tokens, d.q.START, d.q.START_FREE, {}, "not started")

    def _each_fenced(
        self, tokens: list[ClaimToken], query: bytes, free: bytes, extra: dict[str, Any], outcome: str,
    ) -> list[bool]:
        """Run ``query`` (its ``free`` twin past a locked row) on each current token of the batch,
        retried: ``True`` per token whose row it changed, a token given twice answering twice."""
        d = self._d
        answers = [False] * len(tokens)
        items, where = _fenced(tokens)
        if not items:
            return answers
        params = {"items": json.dumps(items), "now": d._now(), **extra}
        locked: list[int] = []
        try:
            rows = d._fetch(query, params, retry=True)
        except BackendLocked:
            rows, locked = self._past_locks(free, params, len(items))
        for (ordinal, *_) in rows:
            for index in where[ordinal - 1]:
                answers[index] = True
        if locked:
            at = tuple(index for ordinal in locked for index in where[ordinal - 1])
            raise _batch_locked([items[o - 1][0] for o in locked], outcome, answers, at)
        return answers

    def ack_many(self, items: list[tuple[ClaimToken, str | None]], landed_only: bool) -> list[Any]:
        answers: list[Any] = [False if landed_only else None] * len(items)
        rows: list[list[Any]] = []  # [id, worker_id, claim_no, result] per distinct live token
        where: list[int] = []
        seen: set[tuple[int, str, int]] = set()
        size = 0
        for index, (token, text) in enumerate(items):
            ident = _token_row(token)
            if ident is None:
                continue
            if ident in seen:  # the same token twice: the first lands, the second finds it settled
                continue
            seen.add(ident)
            rows.append([ident[0], ident[1], ident[2], text])
            where.append(index)
            if text is not None:
                size += len(text)
        if not rows:
            return answers
        if size <= ACK_BATCH_BYTES:
            locked = self._ack_rows(rows, where, landed_only, answers)
        else:  # results too large for one statement: in parts, each of at most ACK_BATCH_BYTES
            locked = []
            for part in _by_size(rows):
                locked += self._ack_rows(rows[part], where[part], landed_only, answers)
        if locked:
            raise _batch_locked([job_id for job_id, _ in locked], "not settled", answers, tuple(at for _, at in locked))
        return answers

    def _ack_rows(
        self, rows: list[list[Any]], where: list[int], landed_only: bool, answers: list[Any],
    ) -> list[tuple[int, int]]:
        """Ack ``rows`` (distinct tokens, at input positions ``where``) in one statement, filling
        ``answers``; answers ``(job id, input position)`` of the items whose rows another
        session held (:meth:`_past_locks`)."""
        d = self._d
        params = {"items": json.dumps(rows), "now": d._now(), "finished": d.finish_channel}
        locked: list[int] = []
        if landed_only:
            try:
                landed = d._fetch(d.q.ACK_MANY_LANDED, params)
            except BackendLocked:
                landed, locked = self._past_locks(d.q.ACK_MANY_LANDED_FREE, params, len(rows))
            for ordinal, _ in landed:
                answers[where[ordinal - 1]] = True
        else:
            try:
                acked = d._fetch(d.q.ACK_MANY, params)
            except BackendLocked:
                acked, locked = self._past_locks(d.q.ACK_MANY_FREE, params, len(rows))
            for row in acked:  # (ord, notified a waiter, job...)
                answers[where[row[0] - 1]] = job_from_row(row[2:])
        return [(rows[o - 1][0], where[o - 1]) for o in locked]

    def _past_locks(self, query: bytes, params: dict[str, Any], count: int) -> tuple[list[Row], list[int]]:
        """A batch whose first try waited :data:`~._sql.jobs.SETTLE_LOCK_WAIT` on a row another
        session holds, and so changed nothing: its items whose rows are free are carried out
        now (``query``, the statement passing over locked rows). Answers that statement's rows
        and the item numbers (from 1) still current but not carried out: the locked ones (none
        when the session holding them changed them meanwhile: their tokens are no longer current)."""
        d = self._d
        done = d._fetch(query, params, retry=True)
        if len(done) == count:
            return done, []
        live = {ordinal for (ordinal,) in d._fetch(d.q.LIVE, {"items": params["items"]})}
        return done, sorted(live - {row[0] for row in done})

    def nack(
        self, token: ClaimToken, type_name: str, message: str, retry_at: datetime | None, *,
        dead_letter: bool, fail: bool, counts_as_attempt: bool, park: bool,
    ) -> Job | None:
        fence = _fence(token)
        if fence is None:
            return None
        d = self._d
        try:
            rows = d._fetch(d.q.NACK, {
                **fence, "fail": fail, "park": park, "give_back": 0 if counts_as_attempt else 1,
                "dead_letter": dead_letter, "type": type_name, "message": message, "now": d._now(),
                "retry_at": retry_at, "channel": d.channel, "finished": d.finish_channel,
            })
        except BackendLocked as exc:
            raise _one_locked(exc, token, "not settled") from exc.__cause__
        return job_from_row(rows[0][1:]) if rows else None  # (notified a waiter, job...)

    # -- wake-ups, schema, lifecycle -------------------------------------------------------

    def _listen_target(self) -> tuple[str, dict[str, Any], Any]:
        """Where a LISTEN connects: ``(conninfo, connect kwargs, call_timeout)``; ``JC_NOT_SUPPORTED``
        when only a transaction pooler is at hand."""
        d = self._d
        pool_kwargs = d._pool.kwargs if isinstance(d._pool.kwargs, dict) else {}
        conninfo = d._pool.conninfo if isinstance(d._pool.conninfo, str) else ""
        kwargs = {k: val for k, val in pool_kwargs.items() if k not in ("autocommit", "call_timeout", "session")}
        if d.listen_url is not None:
            conninfo = d.listen_url
            kwargs.update(writable_only(check_conninfo(conninfo)))  # LISTEN is refused on a standby
        elif d._behind_pooler():
            raise NotSupported(
                "wake-ups (LISTEN) cannot go through a transaction pooler, and no listen_url was given",
                "pass listen_url=postgresql://... (the server itself) for wake-ups, or let workers poll",
            )
        return conninfo, kwargs, pool_kwargs.get("call_timeout", d.call_timeout)

    def subscribe(self, queues: frozenset[str], callback: Callable[[str], None]) -> Listener:
        d = self._d
        conninfo, kwargs, bound = self._listen_target()
        listener = Listener(conninfo, kwargs, d.channel, tuple(queues), callback, call_timeout=bound)
        if listener.refused is not None:
            listener.close()
            raise OptionInvalid(
                listener.refused, "give listen_url the PostgreSQL server itself (not the pooler), or let workers poll",
            )
        d._listeners.append(listener)
        return listener

    def watch(self, seq: int, wake: Callable[[], None]) -> Waiting:
        """``wait``'s wake-ups for job ``seq`` (A02): registered with the driver's finish hub (its
        one LISTEN on the finish channel), then the row is marked waited on (``WAIT_MARK``),
        so the statement that finishes it NOTIFYs its id.

        The mark commits after the LISTEN is in place, and a finish either committed before
        it (the door's next read sees it) or sees the mark (it waited on the row lock) and
        notifies. Through a transaction pooler without ``listen_url``: ``JC_NOT_SUPPORTED``,
        and ``wait`` polls.
        """
        hub = self._finish_hub()
        waiting = hub.add(str(seq), wake)
        try:
            self._d._fetch(self._d.q.WAIT_MARK, {"id": seq})
        except BaseException:
            waiting.close()
            raise
        return waiting

    def _finish_hub(self) -> FinishHub:
        """The driver's finish hub, opened by the first ``wait`` and closed with the driver."""
        d = self._d
        hub = self._hub
        if hub is None:
            # One opener: waits that start together used to open a LISTEN connection each and
            # close all but one (seen as three LISTEN connections at once on a loaded machine).
            with self._hub_open:
                hub = self._hub
                if hub is None:
                    conninfo, kwargs, bound = self._listen_target()
                    made = FinishHub(conninfo, kwargs, d.finish_channel, call_timeout=bound)
                    with self._hub_guard:
                        self._hub = hub = made
                        d._listeners.append(made)
        assert hub is not None
        if hub.refused is not None:
            raise NotSupported(hub.refused, "give listen_url the PostgreSQL server itself, or let wait poll")
        return hub

    def migrate(self, dry_run: bool) -> Migration:
        """Install or upgrade jobcore's schema; idempotent, safe to run from several processes.

        ``dry_run=True`` only reads: the answer's ``statements`` are the SQL a real run
        would execute, complete, for a DBA to apply (``jobcore migrate --sql``).
        """
        d = self._d
        done = d._migrate(dry_run=dry_run)
        if done.applied:  # a newer store was left alone: the first call checks it can be used
            d._schema_ok = True
        return done

    def close(self) -> None:
        d = self._d
        listeners, d._listeners = d._listeners, []
        for listener in listeners:
            listener.close()
        if d._owns_pool and not d._closed:
            d._pool.close()
        d._closed = True

    def __repr__(self) -> str:
        return f"schema={self._d.schema!r}, clock={self._d.clock!r}"


def _by_size(rows: list[list[Any]]) -> list[slice]:
    """``rows`` (ack items, the result text last) cut into runs of at most
    :data:`ACK_BATCH_BYTES` of result text each (a single larger result alone)."""
    parts: list[slice] = []
    start, size = 0, 0
    for index, row in enumerate(rows):
        text = row[3]
        n = 0 if text is None else len(text)
        if index > start and size + n > ACK_BATCH_BYTES:
            parts.append(slice(start, index))
            start, size = index, 0
        size += n
    parts.append(slice(start, len(rows)))
    return parts


def _one_held(job_id: object, outcome: str) -> str:
    """The cause of ``JC_DB_LOCKED`` for one job whose row another session held past the bound."""
    return (
        f"another session holds job {job_id}'s row locked (an open transaction), and the call waited "
        f"{SETTLE_LOCK_WAIT}: {outcome}, nothing of the job changed"
    )


def _one_locked(exc: BackendLocked, token: ClaimToken, outcome: str) -> BackendLocked:
    """``exc`` for a call on one job whose row another session held past the settle bound."""
    return BackendLocked(f"{_one_held(token.job_id, outcome)} ({exc.cause})", answers=None, locked=(0,))


def _batch_locked(ids: list[int], outcome: str, answers: list[Any], at: tuple[int, ...]) -> BackendLocked:
    """The error of a batch whose items ``at`` (input positions; job ``ids``) were locked by
    another session: the others were carried out, as ``answers`` says."""
    if len(answers) == 1:
        return BackendLocked(_one_held(ids[0], outcome), answers=answers, locked=at)
    shown = ", ".join(str(i) for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return BackendLocked(
        f"another session holds the rows of {len(ids)} of the batch's jobs locked (an open transaction): "
        f"job {shown} {outcome}, nothing of them changed; the batch's other items were carried out",
        answers=answers, locked=at,
    )


def _fence(token: ClaimToken) -> dict[str, Any] | None:
    ident = _token_row(token)
    return None if ident is None else {"id": ident[0], "worker": ident[1], "claim_no": ident[2]}

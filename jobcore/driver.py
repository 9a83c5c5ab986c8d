"""The contract users call: the ``JobDriver`` protocol and its sub-protocols.

This module is the one place the semantics are written down. Users, the worker
runtime and the CLI use nothing but this interface; ``parity_tests/`` proves each rule
of ``docs/rules.md`` against every driver. Rule ids (E01, C08, ...) refer to
``docs/rules.md``.

Who implements what: every driver object (memory, PostgreSQL, MongoDB, third-party) is
a :class:`jobcore.door.FrontDoor`, which implements the job verbs below once: it runs
every argument check, applies the defaults, refuses what the store's capabilities do
not offer, and then calls the driver's backend (:class:`jobcore.door.JobsBackend`, a
narrow interface taking already-checked values). A driver writes backends, not these
verbs.

Conventions for every method:

* Durations are ``timedelta`` or seconds as a number; times are aware datetimes. Times
  a driver answers are UTC, truncated to the millisecond.
* "Now" is the store's clock (F01): every due time, lease, reclaim, rescue, slot and
  schedule is decided on it, never on the client's wall clock. A driver built with an
  injected ``clock`` (tests) decides on that clock instead, which then stands in for
  the store's; ``driver.clock.now()`` answers the store's time as this process sees it.
* A refusal raises a coded :class:`~jobcore.errors.InvalidInput` (or the
  :class:`~jobcore.errors.JobStateConflict` named) and writes nothing.
* A database failure raises a :class:`~jobcore.errors.BackendError` subclass with the
  original exception on ``__cause__``. When the call went out and its answer never came
  (a timeout, a connection lost meanwhile), its fix says the call may have been carried
  out all the same (:data:`~jobcore.errors.MAY_HAVE_LANDED`): a write is then not known
  not to have happened, and an enqueue retried without a key can store its job twice.
* A token that no longer matches is an answer (``False`` or ``None``), never an error.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, overload, runtime_checkable

from jobcore.clock import Clock
from jobcore.records import (
    BulkResult,
    ClaimResult,
    ClaimToken,
    FinishedCount,
    Job,
    JobFilter,
    JobSpec,
    LeaseSlot,
    Migration,
    Page,
    PruneResult,
    RescueResult,
    RetentionPolicy,
    Schedule,
    ScheduleOutcome,
    Stats,
)

__all__ = [
    "CAPABILITIES",
    "AsyncJobDriver",
    "BatchHeartbeats",
    "DeferredStart",
    "Duration",
    "Introspector",
    "JobDriver",
    "LandedAcks",
    "LeaseStore",
    "ScheduleStore",
    "Subscription",
]

Duration = timedelta | float | int

CAPABILITIES = {
    "notify": "subscribe() delivers wake-ups when jobs become due (no polling needed)",
    "shared_store": "several processes can share the store (not the in-memory driver)",
    "transactional_enqueue": "enqueue can join the caller's own database transaction",
    "ack_landed_only": "ack_many(items, landed_only=True) answers True/False per item, reading no job back",
    "deferred_start": "claim(..., start=False) holds jobs unstarted and start(tokens) starts them (F04)",
    "finish_notify": "wait() is woken by the store when the job finishes (A02); without it wait() polls",
    "dependencies": "enqueue(..., depends_on=[...]) holds a job until its parents are done (rules D)",
    "heartbeat_many": "heartbeat_many(tokens, lease) renews a batch of leases in one round trip",
}
"""Capabilities a driver may declare in ``capabilities``; scenarios skip by these.

Callers (the worker) decide by these names alone, never by a method's signature. The
front door offers ``ack_many(..., landed_only=True)`` on every driver (answered from
full acks where the store lacks ``ack_landed_only``, so it is no faster there) and
``heartbeat_many`` (one ``heartbeat`` per token where the store lacks ``heartbeat_many``), and
refuses with ``JC_NOT_SUPPORTED``, writing nothing: ``claim(start=False)`` and ``start``
without ``deferred_start``, a transaction handle (``connection=``, ``session=``) without
``transactional_enqueue``, ``depends_on=`` without ``dependencies``."""


class Subscription(Protocol):
    """A live wake-up subscription; ``close()`` ends it (idempotent)."""

    def close(self) -> None:
        """Stop delivering wake-ups."""
        ...


@runtime_checkable
class LeaseStore(Protocol):
    """Fleet-wide counted slots with expiry, for job concurrency limits (rules K).

    A slot is ``(key, holder)`` with an expiry time; ``limit`` slots may be live per key.
    ``driver.leases`` is a :class:`jobcore.door.LeasesDoor`, which checks the arguments
    and calls the driver's :class:`jobcore.door.LeasesBackend`.
    """

    def acquire(self, key: str, limit: int, holder: str, ttl: Duration) -> bool:
        """Take a slot of ``key`` for ``holder`` until ``now + ttl`` (K01).

        Succeeds while fewer than ``limit`` unexpired slots of ``key`` exist; expired
        slots do not count (and may be deleted). If ``holder`` already holds an
        unexpired slot of ``key``, its expiry moves to ``now + ttl`` and the answer is
        ``True`` (idempotent). ``limit`` is an int from 1 to ``MAX_LEASE_SLOTS`` and ``ttl``
        a duration from ``MIN_LEASE`` to ``MAX_LEASE``, else refused (``JC_OPTION_INVALID``).
        """
        ...

    def renew(self, key: str, holder: str, ttl: Duration) -> bool:
        """Move ``holder``'s slot of ``key`` to ``now + ttl`` (K02).

        ``False`` once the slot expired (even if nobody took it) or was never held;
        a holder never renews a slot it lost.
        """
        ...

    def release(self, key: str, holder: str) -> bool:
        """Free ``holder``'s own slot of ``key`` (K03); ``False`` when it held none."""
        ...

    def holders(self, key: str | None = None, limit: int = 100) -> list[LeaseSlot]:
        """Who holds what: the unexpired slots of ``key`` (or of every key), K04.

        Each :class:`~jobcore.records.LeaseSlot` is ``(key, holder, expires_at)``; a slot
        is unexpired while ``expires_at > now`` on the store's clock, so a lapsed slot
        never appears even before anyone purged it. Sorted by key, then holder (code-point
        order); at most ``limit`` slots, the first ones in that order. ``limit`` is an int
        from 1 to ``MAX_PAGE`` and ``key`` a name, else refused (``JC_OPTION_INVALID``).
        A read: it changes nothing.
        """
        ...


@runtime_checkable
class Introspector(Protocol):
    """Reads and operator verbs over all jobs (rules O and C10)."""

    def get(self, job_id: str) -> Job | None:
        """The job, or ``None`` (O09). A malformed id is ``None``, never a database error."""
        ...

    def list(
        self,
        filter: JobFilter | None = None,
        limit: int = 100,
        *,
        after: str | None = None,
        before: str | None = None,
    ) -> Page:
        """One page of jobs, newest (latest enqueued) first (O07).

        ``filter`` narrows by queue, name, state(s), id prefix and created range
        (``created_from`` inclusive, ``created_to`` exclusive). ``after`` is a previous
        page's ``Page.after`` (older rows), ``before`` a previous page's ``Page.before``
        (newer rows, the ones nearest the cursor, still newest first). Refused with
        ``JC_PAGE_INVALID`` (naming the argument): both cursors, a cursor no page
        produced, a limit outside 1..200. A page shorter than its limit is the last in
        its direction. Rows inserted while paging appear only on the newer side, so
        paging older never repeats or skips a row that existed when paging began.
        """
        ...

    def stats(self) -> Stats:
        """Counts per (queue, state) and, per queue, the age of the oldest due job (O08)."""
        ...

    def dead_letters(self, queue: str | None = None, limit: int = 100) -> builtins.list[Job]:
        """``dead`` jobs, most recently finished first (O08); ``limit`` 1..200."""
        ...

    def finished_per_minute(self, minutes: int = 60) -> builtins.list[FinishedCount]:
        """Jobs finished per minute and finished state over the last ``minutes`` minutes (O10).

        The window is ``minutes`` whole minutes on the store's clock (F01), the last being
        the current one: from the start of now's minute less ``minutes - 1`` minutes, up to
        now. Each :class:`FinishedCount` counts the jobs whose ``finished_at`` falls in one
        minute (``minute``: its UTC start) and that are in one finished state; minutes and
        states with no job are absent. Sorted by minute, then state. Exact, whatever the
        store's size: a job enqueued long ago counts by when it finished. ``minutes``
        outside 1..1440 (``MAX_CHART_MINUTES``) is refused with ``JC_OPTION_INVALID``.
        """
        ...

    def parents(self, job_id: str) -> builtins.list[Job]:
        """The jobs ``job_id`` depends on (rules D), oldest first; a removed parent is left out.

        ``JC_JOB_NOT_FOUND`` for an unknown id; ``[]`` for a job without parents, and on a
        store without the ``dependencies`` capability.
        """
        ...

    def children(self, job_id: str) -> builtins.list[Job]:
        """The jobs that depend on ``job_id`` (rules D), oldest first; ``JC_JOB_NOT_FOUND`` for an unknown id."""
        ...

    def rescue(self) -> RescueResult:
        """Sweep lapsed leases in every queue (C10).

        A lapsed ``running`` job with attempts left goes back to ``ready`` (due now),
        with a ``LeaseExpired`` entry in its error history and its holder's token
        dead; a lapsed job on its final attempt is buried ``dead`` as in C08. Answers
        how many were requeued and which were buried. Running it again right away
        changes nothing more.
        """
        ...

    def cancel(self, job_id: str, reason: str | None = None) -> Job | None:
        """Stop a live job: ``cancelled``, ``finished_at`` set, lease cleared (O01).

        A running holder's token stops matching at once. ``reason`` is recorded in the
        error history as type ``Cancelled``. A finished or unknown job is left as it is
        and the answer is ``None`` (:func:`jobcore.cancel_job` turns that into
        ``JC_JOB_NOT_CANCELLABLE``).
        """
        ...

    def requeue(self, job_id: str) -> Job:
        """Move one finished job back to ``ready``, due now, ``attempt = 0`` (O02).

        Keeps the error history; clears ``finished_at`` and ``result``. Refused:
        a live job ``JC_JOB_NOT_REQUEUEABLE``; a job whose key a live job of the same
        name holds ``JC_JOB_DUPLICATE``; an unknown id ``JC_JOB_NOT_FOUND``.
        """
        ...

    def remove(self, job_id: str) -> Job | None:
        """Delete a job in any state but ``running`` (O03) and answer it as it was.

        ``None`` for an unknown id; a running job is refused ``JC_JOB_NOT_REMOVABLE``.
        """
        ...

    def promote(self, job_id: str) -> Job:
        """Make a ``scheduled`` job ``ready`` and due now (O04).

        Anything else is refused ``JC_JOB_NOT_PROMOTABLE``; an unknown id ``JC_JOB_NOT_FOUND``.
        """
        ...

    def resume(self, job_id: str) -> Job:
        """Move a ``suspended`` (parked, S05) job back to ``ready``, due now.

        A job parked on its last attempt gets one more: ``attempt`` becomes at most
        ``max_attempts - 1``, so the next claim runs attempt ``max_attempts`` and an
        attempt never exceeds its maximum.

        Anything else is refused ``JC_JOB_NOT_RESUMABLE``; an unknown id ``JC_JOB_NOT_FOUND``.
        """
        ...

    def cancel_many(
        self, filter: JobFilter | None = None, *, reason: str | None = None, limit: int = ...
    ) -> BulkResult:
        """Cancel up to ``limit`` (<= MAX_BULK_ROWS) live jobs matching ``filter`` (O05).

        The verb's own guard (live states) applies whatever ``filter.state`` says; a
        filter naming only finished states answers zero. ``remaining`` is how many a
        second call could still move. Oldest first.
        """
        ...

    def requeue_many(
        self, filter: JobFilter | None = None, *, limit: int = ..., spread: Duration | None = None
    ) -> BulkResult:
        """Requeue up to ``limit`` finished jobs matching ``filter`` (O05, O06).

        Guard: finished states. A row whose key a live job of its name holds stays;
        of several finished rows sharing a name and key only the oldest is requeued.
        New due times are spread evenly over ``spread`` (default 10 ms a row, at most
        30 s) so a large requeue does not wake every worker at one instant; a row due
        later than now is ``scheduled``. Oldest first.
        """
        ...

    def remove_many(self, filter: JobFilter | None = None, *, limit: int = ...) -> BulkResult:
        """Delete up to ``limit`` jobs matching ``filter`` in any state but ``running`` (O05), oldest first."""
        ...

    def promote_many(self, filter: JobFilter | None = None, *, limit: int = ...) -> BulkResult:
        """Make up to ``limit`` ``scheduled`` jobs matching ``filter`` due now (O05), oldest first."""
        ...

    def prune(
        self,
        policy: RetentionPolicy | None = None,
        *,
        limit: int = ...,
        batch: int = ...,
        dry_run: bool = False,
    ) -> PruneResult:
        """Delete finished jobs older than ``policy`` allows for their state (R01).

        A job is eligible when it is ``done``, ``failed``, ``cancelled`` or ``dead`` and
        its ``finished_at`` is at or before ``now - policy.age(state)``; a state whose
        age is ``None`` is kept forever. Live jobs are never touched. ``policy=None``
        means :class:`RetentionPolicy`'s defaults.

        Deletes at most ``limit`` rows (1..MAX_PRUNE_ROWS), oldest ``finished_at``
        first, in batches of at most ``batch`` rows (1..MAX_BULK_ROWS), each its own
        short atomic step, so pruning never holds long locks on the claim path.
        Rows finished in the same millisecond go in enqueue order. ``dry_run=True``
        deletes nothing and answers what is eligible as ``remaining`` (capped as below).
        Answers rows removed and rows still eligible, per finished state (every one
        present, zeros included); ``remaining`` counts at most MAX_PRUNE_ROWS per state
        (a larger backlog reads as that many). A second call with nothing eligible
        removes nothing.

        Pruning never revives anything (R02): a finished job holds no idempotency key
        (E02), so deleting it frees nothing; schedule watermarks live apart from jobs,
        so no occurrence fires again. Refused: a policy that is not a
        :class:`RetentionPolicy` or has a negative age, ``limit``/``batch`` out of range
        (``JC_OPTION_INVALID``).
        """
        ...


@runtime_checkable
class ScheduleStore(Protocol):
    """The durable state of periodic schedules (rules P): declarations and watermarks.

    The store does not parse cron expressions or compute occurrences; that is
    :mod:`jobcore.schedules`' work, the same on every driver. The store's job is to
    make each occurrence fire at most once however many schedulers race (P01): the
    watermark moves only by compare-and-set, atomically with the job it enqueues.
    ``driver.schedules`` is a :class:`jobcore.door.SchedulesDoor`, which checks the
    arguments and calls the driver's :class:`jobcore.door.SchedulesBackend`.
    """

    def declare(self, name: str, definition: Any, *, start: datetime | None = None) -> Schedule:
        """Create schedule ``name`` or replace its definition; answers it as stored.

        A new schedule starts with ``watermark = start`` (default now), so nothing
        before its declaration fires. An existing one keeps its watermark, pause flag
        and ``last_*`` fields; only ``definition`` (and ``updated_at`` when it changed)
        moves. Idempotent, and racing declarers of one name end with one schedule.
        Refused: an empty or over-long name, a definition that is not a JSON object
        (``JC_SCHEDULE_INVALID``).
        """
        ...

    def get(self, name: str) -> Schedule | None:
        """The schedule, or ``None``."""
        ...

    def list(self) -> builtins.list[Schedule]:
        """Every schedule, by name."""
        ...

    def fire(
        self,
        name: str,
        *,
        expected: datetime,
        occurrence: datetime,
        job: JobSpec | None,
        outcome: ScheduleOutcome | str = ScheduleOutcome.FIRED,
        overlap: bool = True,
    ) -> Schedule | None:
        """Handle one occurrence: move the watermark from ``expected`` to ``occurrence`` (P01).

        In one atomic step, and only while the schedule exists, is not paused and its
        watermark equals ``expected``:

        * the watermark becomes ``occurrence``, ``last_fired_at`` now and
          ``last_outcome`` ``outcome``;
        * with ``overlap=False`` and ``last_job_id`` naming a live job (P03), nothing is
          enqueued and ``last_outcome`` is ``skipped_overlap``;
        * otherwise ``job`` (when given) is enqueued as ``enqueue_many([job])`` would,
          and ``last_job_id`` names it.

        Answers the schedule as it now stands, or ``None`` when the compare-and-set
        lost (another scheduler moved the watermark first, the schedule is paused or
        unknown); then nothing is enqueued. A job of a handled occurrence is never
        enqueued again, even after it finished and was pruned (R02). Refused:
        ``occurrence`` not after ``expected``, naive datetimes, an invalid ``job``
        (``JC_OPTION_INVALID`` / ``JC_PAYLOAD_INVALID``).
        """
        ...

    def pause(self, name: str) -> Schedule | None:
        """Stop the schedule firing; ``None`` for an unknown name. Idempotent."""
        ...

    def resume(self, name: str) -> Schedule | None:
        """Let a paused schedule fire again; ``None`` for an unknown name.

        The watermark moves to ``max(watermark, now)``: occurrences that fell during
        the pause never fire. Resuming a running schedule changes nothing.
        """
        ...

    def remove(self, name: str) -> bool:
        """Delete the schedule and its watermark; ``False`` when there was none."""
        ...


class LandedAcks(Protocol):
    """``ack_many`` with ``landed_only``: every front door takes it; a driver declaring the
    ``ack_landed_only`` capability answers it without reading jobs back.

    With ``landed_only=True`` the batch is settled exactly as without it (S07: each item
    fenced on its own token, a repeated token landing once, a bad item refusing the whole
    batch) but the answer is ``True`` or ``False`` per item, in input order, and no job is
    read back. The worker acks this way when nothing needs the settled job (no
    ``on_settled``): reading and decoding each job was most of a batch's cost.
    """

    @overload
    def ack_many(
        self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[False] = ...
    ) -> list[Job | None]: ...

    @overload
    def ack_many(self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[True]) -> list[bool]: ...


class BatchHeartbeats(Protocol):
    """``heartbeat_many``: every front door takes it; a driver declaring the ``heartbeat_many``
    capability renews the whole batch in one round trip (a few on MongoDB), where one call
    per token would take a worker holding hundreds of jobs on a far-away store a round trip
    each, every ``heartbeat_interval``.
    """

    def heartbeat_many(self, tokens: Iterable[ClaimToken], lease: Duration) -> list[bool]:
        """:meth:`JobDriver.heartbeat` for each token, answered in input order (L01-L04).

        Each token is fenced on its own, exactly as ``heartbeat`` fences it: a current one
        moves its job's lease to ``now + lease`` and answers ``True``, any other answers
        ``False`` and changes nothing; a token given twice answers twice. A ``lease`` that
        is not a positive finite duration, or an item that is not a :class:`ClaimToken`,
        refuses the whole batch (``JC_OPTION_INVALID``) and nothing is written. On
        PostgreSQL, rows another session holds locked past the settle bound raise
        :class:`~jobcore.errors.BackendLocked` once the batch's other items were renewed
        (its ``answers`` and ``locked`` say which), as ``start`` and ``ack_many`` do.
        """
        ...


class DeferredStart(Protocol):
    """Held claims, as a driver declaring the ``deferred_start`` capability offers them (F04).

    ``claim(..., start=False)`` hands jobs out *held*: each is ``running`` under a fresh
    token and lease exactly as C06 says, except that its attempt has not started: the
    store moves neither ``attempt`` nor ``attempted_at`` until :meth:`start` or a settle
    does. The claim answers each job as it will stand once started (``attempt`` counting
    this one, ``attempted_at`` the claim's time): a worker hands it to its handler as is.
    A held job whose lease lapses costs nothing: it is claimable again with ``attempt``
    unchanged, no error recorded, never buried (C07, C08, C10 apply to started attempts
    only). A worker holds jobs this way while they
    wait for a free slot, and starts each with :meth:`start` immediately before its
    handler runs, so a worker that dies, stalls or loses a claim's reply never spends an
    attempt of a job it did not run.
    """

    def claim(
        self,
        queues: Sequence[str],
        *,
        worker_id: str,
        limit: int = 1,
        lease: Duration,
        drop_exhausted: Iterable[str] = (),
        start: bool = True,
    ) -> ClaimResult:
        """:meth:`JobDriver.claim`; with ``start=False`` the claimed jobs are held (see above).

        ``start`` that is not a real bool is refused (``JC_OPTION_INVALID``).
        """
        ...

    def start(self, tokens: Iterable[ClaimToken]) -> list[bool]:
        """Start held attempts, one round trip for the batch (F04).

        For each token that is current (the job ``running``, same ``worker_id`` and
        ``claim_no``; a lapsed lease not yet reclaimed still counts, as for L01): a held
        job's ``attempt`` moves by one and ``attempted_at`` becomes now, and the answer
        is ``True``. A token whose attempt already started answers ``True`` and changes
        nothing, so a retry after a lost reply is safe. A token that is not current
        answers ``False``. The lease is not moved. Answers in input order; an item that
        is not a :class:`ClaimToken` refuses the whole batch (``JC_OPTION_INVALID``).

        ``ack``, ``ack_many`` and ``nack`` of a held token first start it, so a held job
        given back with ``nack(..., counts_as_attempt=False)`` keeps its ``attempt``.
        """
        ...


@runtime_checkable
class JobDriver(Protocol):
    """One backend's whole job store. Every implementation keeps every rule of docs/rules.md.

    A job's row locked by another session (an open transaction: PostgreSQL's, the one store
    here that lets a caller hold one) makes the worker verbs (``start``, ``heartbeat``,
    ``progress``, ``ack``, ``ack_many``, ``nack``) raise
    :class:`~jobcore.errors.BackendLocked` (``JC_DB_LOCKED``) rather than wait: nothing of
    that job changed. A batch (``start``, ``ack_many``) first carries out its other items and
    says so on the error: ``answers`` (in input order, as the call would have answered, a
    locked item as one that did not land) and ``locked`` (the locked items' positions).

    Attributes:
        clock: The only source of "now" for this driver.
        capabilities: Names from :data:`CAPABILITIES` this driver offers.
        leases: Fleet-wide counted slots (rules K).
        introspect: Reads and operator verbs (rules O, C10, R).
        schedules: Periodic schedules' declarations and watermarks (rules P).
    """

    clock: Clock
    capabilities: frozenset[str]
    leases: LeaseStore
    introspect: Introspector
    schedules: ScheduleStore

    def enqueue(
        self,
        name: str,
        payload: Any = None,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: datetime | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        key: str | None = None,
        depends_on: Iterable[str | Job] | None = None,
        on_parent_failure: str = "cancel",
    ) -> Job:
        """Store one job and answer it as stored (E01).

        The job gets a fresh id, ``attempt = 0``, state ``ready`` when due now or
        ``scheduled`` when ``run_at`` (or ``now + delay``) is in the future. Only one of
        ``run_at`` and ``delay`` may be given. ``max_attempts=None`` takes the
        driver's default (20).

        Idempotency (E02): when a live job of the same ``name`` holds ``key``, nothing is
        inserted and the answer is that job with ``duplicate=True``. A finished holder
        frees its key.

        Refused before anything is written: a payload that is not JSON data every
        driver returns identically (``JC_PAYLOAD_INVALID``, E03); a numeric option that
        is not a finite number in range, a bool posing as an int, a naive datetime,
        an empty or over-long name (``JC_OPTION_INVALID``, E04).

        Dependencies (rules D, ``dependencies`` capability; ``JC_NOT_SUPPORTED`` without):
        with ``depends_on`` (job ids or Jobs) the job is stored ``suspended``, waiting,
        until every parent is ``done`` (D01); it becomes due in the step that makes the last
        one ``done``, or at once when all already are. When a parent ends ``failed``,
        ``dead`` or ``cancelled``, or is removed before it was done, the job is cancelled
        with a ``Cancelled`` entry naming the parent (D02), unless
        ``on_parent_failure="run"``: then it runs once every parent finished, however.
        An unknown parent id is ``JC_DEPENDENCY_NOT_FOUND``; a parent already ended other
        than ``done`` (without ``"run"``), or more than 1000 parents,
        ``JC_DEPENDENCY_INVALID``; nothing is written (D04).
        """
        ...

    def enqueue_many(self, specs: Iterable[JobSpec | Any]) -> list[Job]:
        """Store a batch in one round trip; answer the jobs in input order (E05).

        ``specs`` are :class:`JobSpec` records or mappings with ``enqueue``'s keyword
        names. Duplicates (E02) are answered as ``enqueue`` would, including a key
        repeated inside the batch (the later item answers the earlier one). One
        refused item refuses the whole batch and nothing is written. A batch holds at
        most ``MAX_ENQUEUE_BATCH`` specs and ``MAX_ENQUEUE_BATCH_BYTES`` of payload (UTF-8
        JSON text, all items together); past either it is refused (``JC_OPTION_INVALID``)
        before anything is written.

        A spec's ``depends_on`` may also hold ``int`` positions of earlier specs of the
        same batch, so a whole fan-out/fan-in group is stored atomically (D03); a position
        at or after the spec's own would allow a cycle and is refused
        (``JC_DEPENDENCY_INVALID``), as is an unknown parent id
        (``JC_DEPENDENCY_NOT_FOUND``), writing nothing (D04).
        """
        ...

    def claim(
        self,
        queues: Sequence[str],
        *,
        worker_id: str,
        limit: int = 1,
        lease: Duration,
        drop_exhausted: Iterable[str] = (),
    ) -> ClaimResult:
        """Hand out up to ``limit`` due jobs of the named queues to ``worker_id`` (rules C).

        In one atomic step:

        1. Burial (C08): every lapsed ``running`` job in these queues with
           ``attempt >= max_attempts`` is settled ``dead`` (``failed`` when its name is
           in ``drop_exhausted``), its lease cleared, ``LeaseLapsedFinalAttempt``
           recorded as its last error, and reported in ``ClaimResult.buried`` of this
           claim only. It is never handed out again.
        2. Reclaim (C07): lapsed ``running`` jobs with attempts left are claimable, before
           any ``ready``/``scheduled`` job; the lost attempt is recorded as
           ``LeaseExpired``, and the old token stops matching.
        3. Order (C02): lapsed jobs of every named queue first (among themselves in
           the order that follows), then higher ``priority``, earlier ``run_at``,
           earlier enqueue. Only due jobs (``run_at <= now``) in ``ready``/``scheduled``
           are claimable (C01). Concurrent claimers never receive the same job while
           its lease is live (C03).

        Each claimed job (C06) becomes ``running`` with ``worker_id``, ``lease_expires_at
        = now + lease``, ``claim_no + 1`` and ``attempt + 1``; the answer pairs it with
        its :class:`ClaimToken`.

        Refused: no queues (``JC_CLAIM_QUEUES_EMPTY``, never "all queues", C04); ``limit``
        not an int in 1..MAX_CLAIM_BATCH (C05); ``lease`` not a positive finite
        duration (C09).

        A driver declaring ``deferred_start`` also takes ``start=False``, handing the jobs
        out held (see :class:`DeferredStart`); without it ``start=False`` is refused
        (``JC_NOT_SUPPORTED``) and nothing is written. Steps 1 and 2 above concern started
        attempts; a lapsed held job is claimable again as it was, at no cost (F04).
        """
        ...

    def heartbeat(self, token: ClaimToken, lease: Duration) -> bool:
        """Extend the lease to ``now + lease`` while ``token`` is current (L01).

        Current means: the job is ``running``, held by ``token.worker_id``, with
        ``claim_no == token.claim_no``. A heartbeat after the lease lapsed but before
        any reclaim still lands. A superseded, cancelled, removed or finished token
        answers ``False`` and changes nothing (L02, L03). ``lease`` not a positive
        finite duration is refused (L04).
        """
        ...

    def progress(self, token: ClaimToken, value: float | None = None, message: str | None = None) -> bool:
        """Store the attempt's progress on its job while ``token`` is current (G01).

        Writes ``Job.progress = Progress(value, message, updated_at=now)`` (the store's
        clock), replacing the previous one, and answers ``True``. Fenced like ``heartbeat``:
        a token that is not current answers ``False`` and changes nothing (G02). It moves
        nothing else (not the lease: that is ``heartbeat``'s). ``value`` must be ``None`` or
        a finite number from 0 to 1, ``message`` ``None`` or text of at most
        ``MAX_PROGRESS_MESSAGE`` (500) characters; anything else is refused
        (``JC_OPTION_INVALID``) and nothing is written (G03). The next claim of the job
        clears its progress; a settle (ack, nack, burial) keeps it (G04). Workers call this
        for ``ctx.progress``, throttled (``Worker(progress_interval=...)``).
        """
        ...

    def ack(self, token: ClaimToken, result: Any = None) -> Job | None:
        """Finish the job ``done`` with its JSON ``result`` (S01).

        Clears the lease, sets ``finished_at``, answers the updated job. Fenced on the
        token: a token that is not current answers ``None`` and changes nothing (L02,
        S06). A result that is not storable JSON is refused (``JC_PAYLOAD_INVALID``).
        """
        ...

    def ack_many(self, items: Iterable[tuple[ClaimToken, Any]]) -> list[Job | None]:
        """``ack`` a batch of ``(token, result)`` pairs in one round trip (S07).

        Each item is fenced on its own token; answers come back in input order. A
        result that is not storable refuses the whole batch before anything is written.

        ``landed_only=True`` answers ``True``/``False`` per item instead of jobs (see
        :class:`LandedAcks`); only a driver declaring ``ack_landed_only`` saves the reads.
        """
        ...

    def nack(
        self,
        token: ClaimToken,
        error: BaseException | str,
        *,
        retry_at: datetime | None = None,
        dead_letter: bool = True,
        fail: bool = False,
        counts_as_attempt: bool = True,
        park: bool = False,
    ) -> Job | None:
        """Settle a failed attempt (S02-S05). Fenced on the token like ``ack``.

        The error (an exception or a message) is recorded with its type name, time and
        attempt, appended to the history and set as ``last_error``; the lease is
        cleared. ``counts_as_attempt=False`` then gives the attempt back (``attempt - 1``)
        whatever else is asked, ``fail`` and ``park`` included (S04, S05). The target
        state, first match wins:

        * ``fail=True``: ``failed`` whatever attempts remain (S04).
        * ``park=True``: ``suspended``, waiting for ``introspect.resume`` (S05).
        * ``attempt >= max_attempts``: ``dead`` (the dead-letter queue), or ``failed``
          when ``dead_letter=False`` (S03). A given-back attempt never gets here.
        * otherwise ``scheduled`` at ``retry_at`` (``now`` when not given) (S02).

        ``fail`` and ``park`` together are refused. Answers the job as it now stands,
        or ``None`` when the token was not current (S06).
        """
        ...

    def wait(self, job_id: str, *, timeout: Duration, poll: Duration = 1.0) -> Job:
        """Answer the job once it is finished: ``done`` with its ``result``, ``dead``/``failed``
        with its ``last_error``, or ``cancelled`` (A01).

        A job already finished answers at once. A driver declaring ``finish_notify`` is
        woken by the store when the job finishes (LISTEN/NOTIFY, a change stream, the
        memory store's own settle), and then ``poll`` (seconds or a timedelta, default 1 s)
        is only the safety net between two reads; the others read the job again after
        50 ms, doubling the pause up to ``poll`` (A02). Each wake-up is followed by a
        read of the job: a notification's content is never trusted alone. Nothing is
        written for a job nobody waits on.

        ``timeout`` (seconds or a timedelta; real time, not the store's clock) passing with
        the job still live raises ``JC_WAIT_TIMEOUT`` (:class:`~jobcore.errors.WaitTimeout`,
        also a ``TimeoutError``, carrying the job as last read on ``.job``) and leaves the job
        as it is: waiting never cancels (A03). An id no job has, or a job removed while
        waited on, raises ``JC_JOB_NOT_FOUND``. Refused before anything is read or written:
        a ``timeout`` or ``poll`` that is not a positive finite duration up to 7 days
        (``JC_OPTION_INVALID``, A04), an id that is not a str.
        """
        ...

    def subscribe(self, queues: Sequence[str], callback: Callable[[str], None]) -> Subscription:
        """Call ``callback(queue)`` when a job may have become due in one of ``queues``.

        Drivers declaring the ``notify`` capability deliver these promptly (from a
        background thread); the others answer a subscription that never fires, and
        callers poll. Callbacks must be quick and must not call back into the driver
        while holding their own locks. Wake-ups are hints: a claim may still find nothing.
        """
        ...

    def migrate(self, *, dry_run: bool = False) -> Migration:
        """Install or upgrade the store's schema and indexes; idempotent, safe to race.

        Answers what was done (:class:`~jobcore.records.Migration`: the version before
        and after, the statements run). ``dry_run=True`` writes nothing and answers the
        statements a real run would execute. Nothing else in jobcore runs these
        statements unless told to (``auto_migrate``, ``--migrate``): every other call
        on a store whose schema is missing or older raises ``JC_SCHEMA_OUTDATED``, and
        on one a newer jobcore migrated, works when that newer schema declares itself
        compatible with this one (rolling deploys), else raises ``JC_SCHEMA_OUTDATED``.
        """
        ...

    def close(self) -> None:
        """Release connections and threads; idempotent."""
        ...



@runtime_checkable
class AsyncJobDriver(Protocol):
    """The async flavour of :class:`JobDriver`: the same verbs, names, arguments, rules and
    refusals, each store verb a coroutine (``await driver.enqueue(...)``).

    ``AsyncMemoryDriver``, ``AsyncPostgresDriver`` and ``AsyncMongoDriver`` are
    :class:`jobcore.door.AsyncFrontDoor` subclasses; their ``introspect``, ``leases`` and
    ``schedules`` are the async doors (``await driver.introspect.stats()``). The sync
    driver and its door are generated from the async source (``tools/unasync.py``), so
    a check or refusal is the same on both. ``close`` is awaited; ``async with driver:``
    closes it on the way out. A cancelled ``await`` leaves the whole write or none of it.
    """

    clock: Clock
    capabilities: frozenset[str]
    leases: Any
    introspect: Any
    schedules: Any

    async def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, depends_on: Iterable[str | Job] | None = None, on_parent_failure: str = "cancel",
    ) -> Job:
        """See :meth:`JobDriver.enqueue`."""
        ...

    async def enqueue_many(self, specs: Iterable[JobSpec | Any]) -> list[Job]:
        """See :meth:`JobDriver.enqueue_many`."""
        ...

    async def claim(
        self, queues: Sequence[str], *, worker_id: str, limit: int = 1, lease: Duration,
        drop_exhausted: Iterable[str] = (),
    ) -> ClaimResult:
        """See :meth:`JobDriver.claim`."""
        ...

    async def heartbeat(self, token: ClaimToken, lease: Duration) -> bool:
        """See :meth:`JobDriver.heartbeat`."""
        ...

    async def progress(self, token: ClaimToken, value: float | None = None, message: str | None = None) -> bool:
        """See :meth:`JobDriver.progress`."""
        ...

    async def ack(self, token: ClaimToken, result: Any = None) -> Job | None:
        """See :meth:`JobDriver.ack`."""
        ...

    async def ack_many(self, items: Iterable[tuple[ClaimToken, Any]]) -> list[Job | None]:
        """See :meth:`JobDriver.ack_many`."""
        ...

    async def nack(
        self, token: ClaimToken, error: BaseException | str, *, retry_at: datetime | None = None,
        dead_letter: bool = True, fail: bool = False, counts_as_attempt: bool = True, park: bool = False,
    ) -> Job | None:
        """See :meth:`JobDriver.nack`."""
        ...

    async def wait(self, job_id: str, *, timeout: Duration, poll: Duration = 1.0) -> Job:
        """See :meth:`JobDriver.wait`; it sleeps without blocking the event loop."""
        ...

    async def subscribe(self, queues: Sequence[str], callback: Callable[[str], None]) -> Subscription:
        """See :meth:`JobDriver.subscribe`; ``callback`` is called on the driver's event loop."""
        ...

    async def migrate(self, *, dry_run: bool = False) -> Migration:
        """See :meth:`JobDriver.migrate`."""
        ...

    async def close(self) -> None:
        """See :meth:`JobDriver.close`."""
        ...

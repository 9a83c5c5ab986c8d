"""Document shapes of the MongoDB driver: the job document, its indexes, queries and update pipelines.

A job is one document in ``<prefix>jobs``::

    _id            int64, the store's enqueue sequence (job id = str(_id))
    name, queue    str
    payload        str, the canonical JSON text from validate.encode_json
    state          str (JobState value)
    priority, attempt, max_attempts, claim_no      int
    run_at, created_at                             BSON date (ms)
    attempted_at, finished_at, lease_expires_at    BSON date, absent when None
    worker_id, key, result                         absent when None
    held           true while the job is held: claimed with start=False, its attempt
                   not started (F04); absent otherwise
    live_key       the key, present only while the job is live (partial unique index)
    errors         [{type, message, at, attempt}], oldest first
    progress       {value (double or null), message (str or null), at (BSON date)}: the
                   running or last attempt's progress (rules G); absent when none
    settle_mark    set by a batched ack_many: which item of which batch settled it
    parents        rules D: the ``_id`` values of the jobs this one depends on; absent without
    run_anyway     true when ``on_parent_failure="run"``; absent otherwise
    waiting        true while suspended until its parents are done; absent otherwise
    has_children   true once some job depends on this one; absent otherwise

Payloads and results are stored as JSON text, never as BSON documents, so keys that
begin with ``$`` or hold a ``.``, integers beyond int64, and every other value
:func:`jobcore.validate.encode_json` accepts come back byte-for-byte. Every user string
placed in an update pipeline is wrapped in ``$literal`` so it can never be read as a
field path or an operator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel

from jobcore import validate as v
from jobcore.clock import to_millis
from jobcore.records import Job, JobError, JobFilter, JobState, Progress

__all__ = [
    "CLAIM_INDEX",
    "CLAIM_ORDER",
    "COMPATIBLE_FROM",
    "INDEXES",
    "LEASE_INDEX",
    "SCHEMA_VERSION",
    "WAITING_INDEX",
    "append_error",
    "due_query",
    "errors_appended",
    "filter_query",
    "key_clash",
    "lapsed_query",
    "parse_id",
    "to_job",
    "waiting_key",
]

SCHEMA_VERSION = 2
"""Bumped whenever the document shape or the index set changes (2: rules D's indexes)."""

COMPATIBLE_FROM = 1
"""The oldest schema whose code runs against a store at :data:`SCHEMA_VERSION` (recorded
next to it; a change that only adds says ``SCHEMA_VERSION - 1``: docs/deploy.md, "Upgrades")."""

CLAIM_INDEX = "jc_claim"
WAITING_INDEX = "jc_waiting"
LEASE_INDEX = "jc_lease"
CLAIM_ORDER = [("priority", DESCENDING), ("run_at", ASCENDING), ("_id", ASCENDING)]
"""C02: higher priority first, then earlier run_at, then enqueue order."""

INDEXES = [
    # C01/C02: equality on queue and state, then the claim order, so a claim reads the
    # first index entry of each (queue, state) run and never scans or sorts the collection.
    IndexModel([("queue", ASCENDING), ("state", ASCENDING), *CLAIM_ORDER], name=CLAIM_INDEX),
    # C07/C08/C10: lapsed leases, per queue (claim) or across queues (rescue).
    IndexModel([("state", ASCENDING), ("queue", ASCENDING), ("lease_expires_at", ASCENDING)], name=LEASE_INDEX),
    # E02: one live holder per (name, key). A partial index on $exists rather than on
    # state $in [...], because partialFilterExpression accepts $in only on newer servers.
    IndexModel(
        [("name", ASCENDING), ("live_key", ASCENDING)], name="jc_live_key", unique=True,
        partialFilterExpression={"live_key": {"$exists": True}},
    ),
    # O07 listing and O05 bulk verbs narrowed by state or queue, newest (highest _id) first.
    IndexModel([("state", ASCENDING), ("_id", DESCENDING)], name="jc_list_state"),
    IndexModel([("queue", ASCENDING), ("_id", DESCENDING)], name="jc_list_queue"),
    # O08 dead letters (and retention by finished_at), most recently finished first.
    IndexModel([("state", ASCENDING), ("finished_at", DESCENDING), ("_id", DESCENDING)], name="jc_finished"),
    # D01/D02/D05: a parent's children (multikey over ``parents``), only jobs that have parents.
    IndexModel([("parents", ASCENDING)], name="jc_parents", partialFilterExpression={"parents": {"$exists": True}}),
    # D: the children still waiting, which rescue re-checks (a crash between a parent's settle
    # and its children's step); only those documents are in it.
    IndexModel([("waiting", ASCENDING)], name=WAITING_INDEX, partialFilterExpression={"waiting": {"$exists": True}}),
]

_MAX_ID = 2**63 - 1
_STATES = {state.value: state for state in JobState}


def parse_id(job_id: object) -> int | None:
    """The ``_id`` of an id this driver handed out, or ``None`` for a malformed one (O09)."""
    if not isinstance(job_id, str) or not job_id.isascii() or not job_id.isdigit() or len(job_id) > 19:
        return None
    if job_id != str(int(job_id)):  # leading zeros: not an id this driver made
        return None
    value = int(job_id)
    return value if 0 < value <= _MAX_ID else None


def _when(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def to_job(doc: Mapping[str, Any], *, duplicate: bool = False) -> Job:
    """The :class:`Job` record of a stored document."""
    errors = tuple(
        JobError(type=e["type"], message=e["message"], at=e["at"], attempt=e.get("attempt", 0))
        for e in doc.get("errors") or ()
    )
    return Job(
        id=str(doc["_id"]), name=doc["name"], queue=doc["queue"], payload=v.decode_json(doc["payload"]),
        state=_STATES[doc["state"]], priority=doc["priority"], attempt=doc["attempt"], max_attempts=doc["max_attempts"],
        run_at=doc["run_at"], created_at=doc["created_at"], attempted_at=_when(doc.get("attempted_at")),
        finished_at=_when(doc.get("finished_at")), worker_id=doc.get("worker_id"), claim_no=doc.get("claim_no", 0),
        lease_expires_at=_when(doc.get("lease_expires_at")), key=doc.get("key"),
        result=v.decode_json(doc.get("result")), last_error=errors[-1] if errors else None, errors=errors,
        progress=_progress(doc.get("progress")), trace_context=_trace(doc.get("trace")),
        duplicate=duplicate,
    )


def _progress(entry: Any) -> Progress | None:
    if not isinstance(entry, Mapping):
        return None
    value = entry.get("value")
    return Progress(
        value=None if value is None else float(value), message=entry.get("message"), updated_at=entry["at"],
    )


def new_document(seq: int, new: v.NewJob, now: datetime) -> dict[str, Any]:
    """The document inserted for a checked :class:`~jobcore.validate.NewJob`."""
    doc: dict[str, Any] = {
        "_id": seq, "name": new.name, "queue": new.queue, "payload": new.payload, "state": new.state.value,
        "priority": new.priority, "attempt": 0, "max_attempts": new.max_attempts, "run_at": new.run_at,
        "created_at": now, "claim_no": 0, "errors": [],
    }
    if new.key is not None:
        doc["key"] = new.key
        doc["live_key"] = new.key
    if new.trace_context is not None:  # an untraced job's document has no trace field at all
        doc["trace"] = [[k, val] for k, val in new.trace_context.items()]
    return doc


def _trace(pairs: Any) -> dict[str, str] | None:
    """A stored trace context (``[[name, value], ...]``: field names are the propagator's,
    never document keys, so no name can clash with MongoDB's rules for keys)."""
    if not pairs:
        return None
    return {str(k): str(val) for k, val in pairs}


def key_clash(error: Mapping[str, Any]) -> bool:
    """A write error from the live-key index (E02), not from ``_id`` or anything else."""
    return error.get("code") == 11000 and (
        "live_key" in (error.get("keyPattern") or {}) or "jc_live_key" in str(error.get("errmsg", ""))
    )


def id_clash(error: Mapping[str, Any]) -> bool:
    """A write error from the ``_id`` index: a document with that id is already stored."""
    return error.get("code") == 11000 and (
        "_id" in (error.get("keyPattern") or {}) or "index: _id_ " in str(error.get("errmsg", ""))
    )


SAME_JOB = ("name", "queue", "payload", "priority", "max_attempts", "created_at", "run_at")
"""The fields that tell a stored document to be the very job an insert wrote."""


def same_job(stored: Mapping[str, Any] | None, doc: Mapping[str, Any]) -> bool:
    """Whether ``stored`` holds what the insert of ``doc`` wrote (dates as BSON keeps them, to the ms)."""
    if stored is None:
        return False
    for field in SAME_JOB:
        ours = doc.get(field)
        if isinstance(ours, datetime):
            ours = ours.replace(microsecond=ours.microsecond // 1000 * 1000)
        if stored.get(field) != ours:
            return False
    return True


def errors_appended(type_name: Any, message: Any, now: datetime) -> dict[str, Any]:
    """The expression of the document's error history with one entry for its current attempt.

    ``type_name`` and ``message`` are each a str (wrapped in ``$literal``) or an
    aggregation expression.
    """
    kind = {"$literal": type_name} if isinstance(type_name, str) else type_name
    text = {"$literal": message} if isinstance(message, str) else message
    entry = {"type": kind, "message": text, "at": now, "attempt": "$attempt"}
    return {"$concatArrays": [{"$ifNull": ["$errors", []]}, [entry]]}


def append_error(type_name: Any, message: Any, now: datetime) -> dict[str, Any]:
    """A pipeline ``$set`` appending one error entry (see :func:`errors_appended`)."""
    return {"$set": {"errors": errors_appended(type_name, message, now)}}


def finish_stages(state: Any, now: datetime) -> list[dict[str, Any]]:
    """Pipeline stages settling a job finished: state, ``finished_at``, no lease, holder, live key or hold."""
    return [
        {"$set": {"state": state, "finished_at": now}},
        {"$unset": ["lease_expires_at", "worker_id", "live_key", "held"]},
    ]


def due_query(queues: Iterable[str], now: datetime) -> dict[str, Any]:
    """Claimable now (C01): ``ready``/``scheduled`` with ``run_at <= now`` in ``queues``."""
    return {"queue": {"$in": list(queues)}, "state": {"$in": ["ready", "scheduled"]}, "run_at": {"$lte": now}}


def lapsed_query(queues: Iterable[str] | None, now: datetime, *, final: bool | None) -> dict[str, Any]:
    """Running jobs whose lease lapsed (``lease_expires_at <= now``), in ``queues`` or all.

    ``final=True`` picks started attempts that were the job's last (burial, C08),
    ``False`` the others: attempts left (reclaim, C07) or held, never started (F04);
    ``None`` both (the update then decides per job).
    """
    query: dict[str, Any] = {"state": "running"}
    if queues is not None:
        query["queue"] = {"$in": list(queues)}
    query["lease_expires_at"] = {"$lte": now}
    if final is True:
        query["held"] = {"$ne": True}
        query["$expr"] = {"$gte": ["$attempt", "$max_attempts"]}
    elif final is False:
        query["$expr"] = {"$or": [{"$eq": ["$held", True]}, {"$lt": ["$attempt", "$max_attempts"]}]}
    return query


def states_in(states: Iterable[JobState]) -> dict[str, Any]:
    """``{"$in": [...]}`` over state values, in a stable order."""
    return {"$in": sorted(s.value for s in states)}


def _prefix_ranges(prefix: str) -> dict[str, Any]:
    """``_id`` ranges whose decimal text starts with ``prefix`` (ids are str(seq), no leading zeros)."""
    if not prefix.isascii() or not prefix.isdigit() or prefix.startswith("0") or len(prefix) > 19:
        return {"_id": {"$in": []}}
    head = int(prefix)
    ranges = []
    for extra in range(20 - len(prefix)):
        lo, hi = head * 10**extra, (head + 1) * 10**extra - 1
        if lo > _MAX_ID:
            break
        ranges.append({"_id": {"$gte": lo, "$lte": min(hi, _MAX_ID)}})
    return {"$or": ranges}


def _ceil_millis(value: datetime) -> datetime:
    """``value`` rounded up to the millisecond: stored times are whole milliseconds, so
    ``t >= value`` and ``t < value`` mean the same with the bound rounded up, and BSON
    would otherwise truncate the bound (and move the edge) on the way to the server."""
    low = to_millis(value)
    return low if low == value else low + timedelta(milliseconds=1)


def filter_query(flt: JobFilter, guard: Iterable[JobState] | None = None) -> dict[str, Any] | None:
    """The query for a checked :class:`JobFilter`, narrowed to ``guard`` states.

    ``None`` when the filter and the guard leave no state at all (O05: such a filter
    moves nothing).
    """
    clauses: list[dict[str, Any]] = []
    if flt.queue is not None:
        clauses.append({"queue": flt.queue})
    if flt.name is not None:
        clauses.append({"name": flt.name})
    states: frozenset[JobState] | None = flt.state
    if guard is not None:
        states = frozenset(guard) if states is None else states & frozenset(guard)
    if states is not None:
        if not states:
            return None
        clauses.append({"state": states_in(states)})
    if flt.id_prefix:
        clauses.append(_prefix_ranges(flt.id_prefix))
    if flt.created_from is not None:
        clauses.append({"created_at": {"$gte": _ceil_millis(flt.created_from)}})
    if flt.created_to is not None:
        clauses.append({"created_at": {"$lt": _ceil_millis(flt.created_to)}})
    if not clauses:
        return {}
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def waiting_key(seq: int) -> str:
    """The name a ``wait`` on job ``seq`` subscribes to the change-stream hub under (A02):
    no queue name holds a NUL, so it never meets a queue's subscribers."""
    return f"\0job:{seq}"

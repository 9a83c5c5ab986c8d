"""The job statements: enqueue, claim and settle, introspection and operator verbs, fleet leases.

Rows come back as :data:`JOB_COLUMNS` in that order; ``_rows.job_from_row`` maps them.
Payloads and results are ``text`` holding the canonical JSON of ``validate.encode_json``
(``jsonb`` would reorder keys and rewrite numbers); the error history is a ``jsonb``
array of ``{type, message, at (epoch ms), attempt}``; progress (rules G) a ``jsonb``
object ``{value, message, at (epoch ms)}`` or NULL.
"""

# ruff: noqa: S608 - templates are built from constants and quoted identifiers only; values are bind parameters
from __future__ import annotations

import string
from typing import Final

from jobcore.records import JobState
from jobcore.vocabulary import (
    CANCELLED_ENTRY,
    CLAIMABLE_STATES,
    LEASE_EXPIRED,
    LEASE_EXPIRED_TEXT,
    LEASE_LAPSED_FINAL,
    LEASE_LAPSED_FINAL_TEMPLATE,
    PARENT_ENDED_TEMPLATE,
)

from .common import FINISHED, LIVE, NOW, NOW_MS, Sql, in_list, lit, ms

__all__ = ["JOB_COLUMNS", "SETTLE_CHILDREN_FUNCTION", "JobStatements"]

JOB_COLUMNS: Final = (
    "id", "name", "queue", "payload", "state", "priority", "attempt", "max_attempts", "run_at",
    "created_at", "attempted_at", "finished_at", "worker_id", "claim_no", "lease_expires_at", "key",
    "result", "errors", "progress", "trace",
)
_COLS: Final = ", ".join(f"j.{c}" for c in JOB_COLUMNS)


def _lit(text: str) -> str:
    """``text`` as a SQL string literal. Only for jobcore's own constants (states, history
    texts from :mod:`jobcore.vocabulary`), built once at import; values are bind parameters."""
    return "'" + text.replace("'", "''") + "'"


_READY, _SCHEDULED, _RUNNING, _SUSPENDED = (_lit(s.value) for s in (
    JobState.READY, JobState.SCHEDULED, JobState.RUNNING, JobState.SUSPENDED))
_DONE, _FAILED, _DEAD, _CANCELLED = (_lit(s.value) for s in (
    JobState.DONE, JobState.FAILED, JobState.DEAD, JobState.CANCELLED))
_CLAIMABLE: Final = ", ".join(_lit(s.value) for s in sorted(CLAIMABLE_STATES))
_BARE: Final = ", ".join(JOB_COLUMNS)


def _lean(prefix: str) -> str:
    """JOB_COLUMNS of ``prefix`` with an empty error history sent as NULL (no JSON to decode)."""
    return ", ".join(
        f"NULLIF({prefix}.errors, '[]'::jsonb)" if c == "errors" else f"{prefix}.{c}" for c in JOB_COLUMNS
    )


def _claimed_view(prefix: str) -> str:
    """:func:`_lean` of a claimed row, a held one shown as its attempt will stand once started
        (F04): ``attempt + 1``, ``attempted_at`` the claim's time. The row itself keeps both."""
    view = {
        "attempt": f"{prefix}.attempt + (CASE WHEN {prefix}.held THEN 1 ELSE 0 END)",
        "attempted_at": f"(CASE WHEN {prefix}.held THEN {NOW} ELSE {prefix}.attempted_at END)",
    }
    return ", ".join(
        view.get(c, f"NULLIF({prefix}.errors, '[]'::jsonb)" if c == "errors" else f"{prefix}.{c}")
        for c in JOB_COLUMNS
    )


_HELD: Final = "(CASE WHEN j.held THEN 1 ELSE 0 END)"
"""1 for a held claim (F04), whose attempt a settle or a start begins now."""
_STARTED_AT: Final = f"(CASE WHEN j.held THEN {NOW} ELSE j.attempted_at END)"
_ATTEMPT_NOW: Final = f"(j.attempt + {_HELD})"
"""The attempt a settle ends: a held claim's starts with the settle."""


def _entry(type_sql: str, message_sql: str, attempt_sql: str = "j.attempt") -> str:
    """An error-history entry appended to ``j.errors`` (``attempt_sql`` is the attempt it ended)."""
    return (
        f"j.errors || jsonb_build_array(jsonb_build_object('type', {type_sql}, 'message', {message_sql}, "
        f"'at', {NOW_MS}, 'attempt', {attempt_sql}))"
    )


_LEASE_EXPIRED: Final = _entry(f"{_lit(LEASE_EXPIRED)}::text", f"{_lit(LEASE_EXPIRED_TEXT)}::text")


def _burial_text() -> str:
    """The burial entry's message (C08): the vocabulary's template, its fields read from the row."""
    pieces = []
    for literal, field, _, _ in string.Formatter().parse(LEASE_LAPSED_FINAL_TEMPLATE):
        if literal:
            pieces.append(_lit(literal))
        if field is not None:
            pieces.append(f"j.{field}")
    return " || ".join(pieces)


_BURIAL_ENTRY: Final = _entry(f"{_lit(LEASE_LAPSED_FINAL)}::text", _burial_text())
_TOLD: Final = "((CASE WHEN j.waited THEN pg_notify(%(finished)s, j.id::text) END) IS NOT NULL)"
"""A finished row's wake-up for its waiters (A02), NOTIFYed at commit on the finish channel with
the job id, only when a ``wait`` marked the row: a job nobody waits on pays no NOTIFY (NOTIFY
takes a lock held to the end of the commit, serialising every notifying commit). Used in the
``RETURNING`` list of every statement that finishes a row (true when it notified)."""
_WOKE = (
    "woke AS (SELECT count(*) AS n FROM (SELECT pg_notify(%(channel)s, q.queue) "
    "FROM (SELECT DISTINCT u.queue FROM {source} AS u WHERE {cond}) AS q) AS w)"
)
"""A CTE that NOTIFYs each queue once; delivered at commit, so a rolled-back write wakes nobody.
A plain SELECT CTE only runs when referenced, so every statement using it cross-joins ``woke``."""

# A filter shared by list and the bulk verbs: NULL parameters match everything, and the
# state set is always given (the verb's guard intersected with the filter's states).
_FILTER: Final = (
    "(%(f_queue)s::text IS NULL OR j.queue = %(f_queue)s::text)"
    " AND (%(f_name)s::text IS NULL OR j.name = %(f_name)s::text)"
    " AND j.state = ANY(%(f_states)s::text[])"
    " AND (%(f_prefix)s::text IS NULL OR starts_with(j.id::text, %(f_prefix)s::text))"
    " AND (%(f_from)s::timestamptz IS NULL OR j.created_at >= %(f_from)s::timestamptz)"
    " AND (%(f_to)s::timestamptz IS NULL OR j.created_at < %(f_to)s::timestamptz)"
)

# --- enqueue --------------------------------------------------------------------------

_STAMP: Final = f"stamp AS MATERIALIZED (SELECT {NOW} AS now, {NOW_MS} AS now_ms)"
"""The store's now, read once for a batch (each row would evaluate :data:`NOW` again)."""

_ITEM_RUN_AT: Final = "coalesce((t.item->>5)::timestamptz, s.now + (t.item->>3)::bigint * interval '1 millisecond')"
"""An enqueue item's due time: its ``run_at``, else the store's now (``stamp`` as ``s``) plus its delay (ms)."""

_RUN_AT: Final = f"coalesce(%(run_at)s::timestamptz, {NOW} + {ms('delay_ms')})"
"""The due time of enqueue's scalar forms: ``run_at`` when given, else the store's now plus ``delay_ms``."""


def _state_for(run_at_sql: str, now_sql: str = NOW) -> str:
    """``scheduled`` when due after the store's now, else ``ready`` (E01)."""
    return f"(CASE WHEN {run_at_sql} > {now_sql} THEN {_SCHEDULED} ELSE {_READY} END)"


class EnqueueStatements:
    """Enqueue (rules E): one statement per call, one job or a batch."""

    ENQUEUE = Sql(f"""
WITH {_STAMP}, input AS (
    SELECT nextval({{seq}}) AS id, t.ord, t.item->>0 AS name, t.item->>1 AS queue, t.item->>2 AS payload,
           (t.item->>4)::int AS priority, {_ITEM_RUN_AT} AS run_at,
           (t.item->>6)::int AS max_attempts, t.item->>7 AS key,
           (CASE WHEN jsonb_typeof(t.item->8) = 'object' THEN t.item->8 END) AS trace
    FROM jsonb_array_elements(%(items)s::jsonb) WITH ORDINALITY AS t(item, ord) CROSS JOIN stamp AS s
), ins AS (
    INSERT INTO {{jobs}} AS j (id, name, queue, payload, state, priority, attempt, max_attempts, run_at,
                             created_at, claim_no, key, errors, trace)
    SELECT i.id, i.name, i.queue, i.payload, {_state_for("i.run_at", "s.now")}, i.priority, 0, i.max_attempts,
           i.run_at, s.now, 0, i.key, '[]'::jsonb, i.trace
    FROM input AS i CROSS JOIN stamp AS s ORDER BY i.name, i.key, i.ord
    ON CONFLICT (name, key) WHERE key IS NOT NULL AND state IN {LIVE} DO NOTHING
    RETURNING {_COLS}
), {_WOKE.format(source="ins", cond=f"u.state = {_READY}")}
SELECT i.ord, false AS duplicate, {", ".join(f"ins.{c}" for c in JOB_COLUMNS)}
FROM input AS i JOIN ins ON ins.id = i.id CROSS JOIN woke
UNION ALL
SELECT i.ord, true, {_COLS}
FROM input AS i JOIN {{jobs}} AS j ON j.name = i.name AND j.key = i.key AND j.state IN {LIVE}
WHERE i.key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ins AS x WHERE x.id = i.id)
UNION ALL
SELECT i.ord, true, {", ".join(f"ins.{c}" for c in JOB_COLUMNS)}
FROM input AS i JOIN ins ON ins.name = i.name AND ins.key = i.key AND ins.id <> i.id
WHERE i.key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ins AS x WHERE x.id = i.id)
""")
    """One round trip for one job or a batch (E01, E02, E05). The batch arrives as one JSON
    array of ``[name, queue, payload, delay_ms, priority, run_at or null, max_attempts, key]``
    rows (plus, for a traced job, its trace context object as a ninth element; the driver
    sends traced jobs here only, so the keyless forms below never carry one), due at
    ``run_at`` when given, else the store's now plus the delay (one C-encoded text parameter
    costs the client far less than eight adapted arrays). Ids come from the sequence in
    input order; rows are inserted in (name, key) order, so batches racing on the same keys
    wait for each other in one order and cannot deadlock. A key conflict inserts nothing;
    the item answers the live holder, either an older row or an earlier item of the batch.
    A holder committed by another transaction after this statement's snapshot is not
    visible here; the driver looks it up with :data:`KEY_HOLDER` (a fresh snapshot) and
    retries the insert if it finished."""

    ENQUEUE_ONE = Sql(f"""
INSERT INTO {{jobs}} AS j (id, name, queue, payload, state, priority, attempt, max_attempts, run_at,
                         created_at, claim_no, key, errors)
VALUES (nextval({{seq}}), %(name)s::text, %(queue)s::text, %(payload)s::text, {_state_for(_RUN_AT)},
        %(priority)s::int, 0, %(max_attempts)s::int, {_RUN_AT}, {NOW}, 0, NULL, '[]'::jsonb)
RETURNING j.id, (CASE WHEN j.state = {_READY} THEN pg_notify(%(channel)s, j.queue) END) IS NOT NULL AS woke,
          {NOW_MS} AS now_ms
""")
    """One job without an idempotency key (E01): no conflict is possible, so the plain
    insert of scalars skips :data:`ENQUEUE`'s arrays and duplicate branches. It answers only
    the new id and the store's now (epoch ms): the driver builds the job from what it sent
    and that now, deciding due time and state as this statement did, as for
    :data:`ENQUEUE_MANY`. It NOTIFYs the queue from ``RETURNING`` when the job is due
    (delivered at commit): without a CTE around the insert, a round trip was 2-7% shorter in
    alternating runs."""

    ENQUEUE_MANY = Sql(f"""
WITH {_STAMP}, ins AS (
    INSERT INTO {{jobs}} AS j (id, name, queue, payload, state, priority, attempt, max_attempts, run_at,
                             created_at, claim_no, key, errors)
    SELECT nextval({{seq}}), t.item->>0, t.item->>1, t.item->>2, {_state_for("r.run_at", "s.now")},
           (t.item->>4)::int, 0, (t.item->>6)::int, r.run_at, s.now, 0, NULL, '[]'::jsonb
    FROM jsonb_array_elements(%(items)s::jsonb) WITH ORDINALITY AS t(item, ord)
    CROSS JOIN stamp AS s CROSS JOIN LATERAL (SELECT {_ITEM_RUN_AT} AS run_at) AS r
    ORDER BY t.ord
    RETURNING j.id, j.queue, j.state
), {_WOKE.format(source="ins", cond=f"u.state = {_READY}")}
SELECT ins.id, s.now_ms FROM ins CROSS JOIN woke CROSS JOIN stamp AS s ORDER BY ins.id
""")
    """A batch without idempotency keys (E05): nothing can conflict, so a plain insert from the
    JSON rows (as :data:`ENQUEUE` takes them); ``nextval`` runs after the sort, so ids follow
    input order. It answers only the ids, in that order, each with the store's now (epoch
    ms): every other column of a new row is what the driver sent or follows from that now,
    so the driver builds the jobs itself (a third less server time and no row decoding)."""

    ENQUEUE_UNIFORM = Sql(f"""
WITH shared AS MATERIALIZED (
    SELECT n.now, n.now_ms, n.run_at, {_state_for("n.run_at", "n.now")} AS state
    FROM (SELECT {NOW} AS now, {NOW_MS} AS now_ms, {_RUN_AT} AS run_at) AS n
), ins AS (
    INSERT INTO {{jobs}} AS j (id, name, queue, payload, state, priority, attempt, max_attempts, run_at,
                             created_at, claim_no, key, errors)
    SELECT nextval({{seq}}), %(name)s::text, %(queue)s::text, t.payload::text, s.state,
           %(priority)s::int, 0, %(max_attempts)s::int, s.run_at, s.now, 0, NULL, '[]'::jsonb
    FROM json_array_elements(%(payloads)s::json) WITH ORDINALITY AS t(payload, ord) CROSS JOIN shared AS s
    ORDER BY t.ord
    RETURNING j.id, j.queue, j.state
), {_WOKE.format(source="ins", cond=f"u.state = {_READY}")}
SELECT ins.id, s.now_ms FROM ins CROSS JOIN woke CROSS JOIN shared AS s ORDER BY ins.id
""")
    """:data:`ENQUEUE_MANY` for the usual batch, whose items share every option but the payload
    (one handle's ``enqueue_many``): the options are sent once (and the due time, state and
    now they share are computed once, in ``shared``), and the payloads as one JSON
    array joined from their canonical texts. ``json`` (not ``jsonb``) keeps each element's
    text as written, so ``t.payload::text`` stores exactly what the driver encoded, key order
    included; and the server parses the array once, with no per-item field extraction."""

    KEY_HOLDER = Sql(f"""
SELECT {_COLS} FROM {{jobs}} AS j
WHERE j.name = %(name)s AND j.key = %(key)s AND j.state IN {LIVE}
""")


# --- claim and settle -----------------------------------------------------------------

SETTLE_LOCK_WAIT: Final = "100ms"
"""How long a worker's call on a job's row (heartbeat, heartbeat_many, progress, start, ack,
nack) waits for a row lock another session holds: an open transaction that locked the row (an
operator's ``SELECT ... FOR UPDATE`` in psql, a bulk ``UPDATE`` of the table) would otherwise
hold the call, and a worker's every other settle or heartbeat behind it, for up to the statement
timeout. Past it the server answers ``LockNotAvailable`` (``JC_DB_LOCKED``); a batch then lands
its other items (:data:`_FREE_IDS`). Our own fleet holds a row for a statement's length only.
The bound covers every row lock the statement waits for, the children's rows that the settle
trigger of a parent locks (rules D) included; a batch's second try runs without it."""

_BOUNDED_WAIT: Final = f"(SELECT set_config('lock_timeout', '{SETTLE_LOCK_WAIT}', true)) IS NOT NULL"
"""A condition that sets ``lock_timeout`` to :data:`SETTLE_LOCK_WAIT` for the statement's own
transaction (``is_local``) and is true. Uncorrelated, it is an InitPlan the executor runs
once before the first row is read, so before any lock wait; in autocommit the setting ends
with the statement, and a transaction pooler's next client never sees it."""

_TOKENS: Final = """jsonb_array_elements(%(items)s::jsonb) WITH ORDINALITY AS t(item, ord)"""
_IDS: Final = "ARRAY(SELECT (e->>0)::bigint FROM jsonb_array_elements(%(items)s::jsonb) AS e)"
_FREE_IDS: Final = f"ARRAY(SELECT f.id FROM {{jobs}} AS f WHERE f.id = ANY({_IDS}) FOR NO KEY UPDATE SKIP LOCKED)"
"""The items' ids whose rows no other session holds, locked for the statement: the batch's
second try after one of its rows was locked past :data:`SETTLE_LOCK_WAIT`. Not the first
try: the extra row lock costs the server about 5% of an ack batch (measured)."""


def _fenced(ids: str) -> str:
    """Each row of ``ids`` fenced on its own token, read by primary key alone. Joined on the
    tokens, the planner hashed every running row (a held backlog is hundreds per worker: a
    millisecond per small batch); given the ids it still ANDed the partial index of running
    rows in, reading all of it. ``IS TRUE`` keeps the state check out of index matching (it
    is the same test)."""
    return f"""j.id = ANY({ids})
  AND j.id = (t.item->>0)::bigint AND (j.state = {_RUNNING}) IS TRUE AND j.worker_id = t.item->>1
  AND j.claim_no = (t.item->>2)::bigint"""


_FENCED: Final = f"{_BOUNDED_WAIT} AND {_fenced(_IDS)}"
_FENCED_FREE: Final = _fenced(_FREE_IDS)

_ACK_SET: Final = f"""
UPDATE {{jobs}} AS j SET
    state = {_DONE}, result = t.item->>3, finished_at = {NOW}, lease_expires_at = NULL, worker_id = NULL,
    attempt = {_ATTEMPT_NOW}, attempted_at = {_STARTED_AT}, held = false
FROM {_TOKENS}
"""
_ACK: Final = f"{_ACK_SET}WHERE {_FENCED}\n"
"""An ack batch's update (S01, S07): :data:`ACK_MANY` and :data:`ACK_MANY_LANDED` are it with
two ``RETURNING`` lists."""
_ACK_FREE: Final = f"{_ACK_SET}WHERE {_FENCED_FREE}\n"


class SettleStatements:
    """Claim, heartbeat, start and settle (rules C, L, S; F04)."""

    CLAIM = Sql(f"""
WITH spent AS (
    SELECT j.id FROM {{jobs}} AS j
    WHERE j.state = {_RUNNING} AND j.queue = ANY(%(queues)s::text[]) AND j.lease_expires_at <= {NOW}
      AND j.attempt >= j.max_attempts AND NOT j.held
    FOR UPDATE SKIP LOCKED
), lapsed AS (
    SELECT j.id, j.priority, j.run_at FROM {{jobs}} AS j
    WHERE j.state = {_RUNNING} AND j.queue = ANY(%(queues)s::text[]) AND j.lease_expires_at <= {NOW}
      AND (j.attempt < j.max_attempts OR j.held)
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT d.id, d.priority, d.run_at
    FROM unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM {{jobs}} AS j
        WHERE j.state IN ({_CLAIMABLE}) AND j.queue = q.name AND j.run_at <= {NOW}
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS d
), picked AS (
    SELECT p.id, p.grp FROM (
        SELECT l.id, 0 AS grp, l.priority, l.run_at FROM lapsed AS l
        UNION ALL
        SELECT d.id, 1 AS grp, d.priority, d.run_at FROM due AS d
    ) AS p
    ORDER BY p.grp, p.priority DESC, p.run_at, p.id
    LIMIT %(limit)s
), buried AS (
    UPDATE {{jobs}} AS j SET
        state = CASE WHEN j.name = ANY(%(drop)s::text[]) THEN {_FAILED} ELSE {_DEAD} END,
        finished_at = {NOW}, lease_expires_at = NULL, worker_id = NULL,
        errors = {_BURIAL_ENTRY}
    WHERE j.id = ANY(ARRAY(SELECT f.id FROM spent AS f))
    RETURNING 1 AS kind, {_COLS}, {_TOLD} AS told
), taken AS (
    UPDATE {{jobs}} AS j SET
        state = {_RUNNING}, worker_id = %(worker)s, claim_no = j.claim_no + 1,
        attempt = j.attempt + (CASE WHEN %(start)s::boolean THEN 1 ELSE 0 END),
        attempted_at = CASE WHEN %(start)s::boolean THEN {NOW} ELSE j.attempted_at END,
        held = NOT %(start)s::boolean, lease_expires_at = {NOW} + {ms("lease_ms")}, progress = NULL,
        errors = CASE WHEN j.state = {_RUNNING} AND NOT j.held THEN {_LEASE_EXPIRED} ELSE j.errors END
    WHERE j.id = ANY(ARRAY(SELECT p.id FROM picked AS p))
    RETURNING 0 AS kind, {_COLS}, j.held
)
SELECT t.kind, p.grp, {_claimed_view("t")} FROM taken AS t JOIN picked AS p ON p.id = t.id
UNION ALL
SELECT kind, 0, {_BARE} FROM buried
ORDER BY 1, 2, priority DESC, run_at, id
""")
    """One statement per claim batch (C01-C08): burial of lapsed final attempts, reclaim of
    lapsed rows with attempts left (first, recording ``LeaseExpired``; a lapsed held claim,
    F04, is taken as it was, nothing recorded, never buried), then due rows per
    queue in (priority desc, run_at, id) order, each queue read through the partial index
    ``jobs_due`` (LATERAL, so every queue's scan stops after ``limit`` rows). SKIP LOCKED
    lets concurrent claimers pass each other; a row another claim moved is re-checked
    against the WHERE clause (READ COMMITTED re-evaluation) before it is taken. With
    ``start`` false the taken rows are held: ``attempt`` and ``attempted_at`` stay."""

    HEARTBEAT = Sql(f"""
UPDATE {{jobs}} AS j SET lease_expires_at = {NOW} + {ms("lease_ms")}
WHERE {_BOUNDED_WAIT}
  AND j.id = %(id)s AND j.state = {_RUNNING} AND j.worker_id = %(worker)s AND j.claim_no = %(claim_no)s
RETURNING j.id
""")

    HEARTBEAT_MANY = Sql(f"""
UPDATE {{jobs}} AS j SET lease_expires_at = {NOW} + {ms("lease_ms")}
FROM {_TOKENS}
WHERE {_FENCED}
RETURNING t.ord
""")
    """:data:`HEARTBEAT` for a batch of tokens in one statement (items as :data:`START` takes
    them): a worker holding hundreds of jobs renews them in one round trip. It sets
    ``lease_expires_at``, which the partial index of running rows orders by, so it is no HOT
    update, as the one-token statement is not."""

    HEARTBEAT_MANY_FREE = Sql(f"""
UPDATE {{jobs}} AS j SET lease_expires_at = {NOW} + {ms("lease_ms")}
FROM {_TOKENS}
WHERE {_FENCED_FREE}
RETURNING t.ord
""")
    """:data:`HEARTBEAT_MANY` passing over the rows another session holds (:data:`_FREE_IDS`)."""

    PROGRESS = Sql(f"""
UPDATE {{jobs}} AS j SET progress = jsonb_build_object(
    'value', %(value)s::numeric, 'message', %(message)s::text, 'at', {NOW_MS})
WHERE {_BOUNDED_WAIT}
  AND j.id = %(id)s AND j.claim_no = %(claim_no)s AND j.worker_id = %(worker)s AND j.state = {_RUNNING}
RETURNING j.id
""")
    """Store a current token's progress (G01, G02), fenced as :data:`HEARTBEAT` is; it sets no
    indexed column, so the update can be HOT. ``value`` comes as the float's shortest text
    (``repr``), read as ``numeric``: a ``float8`` would reach the JSON through the session's
    ``extra_float_digits`` (at -15, 0.25 was stored as 0.2)."""

    START = Sql(f"""
UPDATE {{jobs}} AS j SET attempt = {_ATTEMPT_NOW}, attempted_at = {_STARTED_AT}, held = false
FROM {_TOKENS}
WHERE {_FENCED}
RETURNING t.ord
""")
    """Start held attempts (F04), one statement per batch, each row fenced on its own token
    (items as :data:`ACK_MANY` takes them, without the result). A started row is written
    unchanged, so a repeated start answers its item again. It sets no indexed column (nor
    ``state``, which the partial indexes' predicates read), so the update can be HOT. Waits at
    most :data:`SETTLE_LOCK_WAIT` for a row another session holds (so do heartbeat, progress,
    the acks and nack)."""

    START_FREE = Sql(f"""
UPDATE {{jobs}} AS j SET attempt = {_ATTEMPT_NOW}, attempted_at = {_STARTED_AT}, held = false
FROM {_TOKENS}
WHERE {_FENCED_FREE}
RETURNING t.ord
""")
    """:data:`START` passing over the rows another session holds (:data:`_FREE_IDS`)."""

    LIVE = Sql(f"""
SELECT t.ord FROM {_TOKENS} JOIN {{jobs}} AS j ON {_fenced(_IDS)}
""")
    """Which items' tokens are still current, read without a lock: after a try that passed
    over locked rows, the items that did not land but are current are the locked ones (the
    session holding them has not changed them, or they would not be current)."""

    ACK_MANY = Sql(f"{_ACK}RETURNING t.ord, {_TOLD}, {_lean('j')}\n")
    """One round trip for a batch of acks (S01, S07); each row fenced on its own token. The
    items are one JSON array of ``[id, worker_id, claim_no, result text or null]``: one
    parameter the client writes in C, where four arrays took a Python loop per element. Claim
    and ack, the statements every job passes through, send an empty error history as NULL.
    A held claim is started first (F04): its attempt counts."""

    ACK_MANY_LANDED = Sql(f"{_ACK}RETURNING t.ord, {_TOLD}\n")
    """:data:`ACK_MANY` answering only the item numbers that landed (``ack_many(...,
    landed_only=True)``): no row goes back to the client to be decoded."""

    ACK_MANY_FREE = Sql(f"{_ACK_FREE}RETURNING t.ord, {_TOLD}, {_lean('j')}\n")
    """:data:`ACK_MANY` passing over the rows another session holds (:data:`_FREE_IDS`)."""

    ACK_MANY_LANDED_FREE = Sql(f"{_ACK_FREE}RETURNING t.ord, {_TOLD}\n")
    """:data:`ACK_MANY_LANDED` passing over the rows another session holds (:data:`_FREE_IDS`)."""

    NACK = Sql(f"""
WITH cur AS (
    SELECT j.id, CASE
        WHEN %(fail)s::boolean THEN {_FAILED}
        WHEN %(park)s::boolean THEN {_SUSPENDED}
        WHEN {_ATTEMPT_NOW} - %(give_back)s::int >= j.max_attempts
            THEN CASE WHEN %(dead_letter)s::boolean THEN {_DEAD} ELSE {_FAILED} END
        ELSE {_SCHEDULED} END AS target
    FROM {{jobs}} AS j
    WHERE {_BOUNDED_WAIT}
      AND j.id = %(id)s AND j.state = {_RUNNING} AND j.worker_id = %(worker)s AND j.claim_no = %(claim_no)s
    FOR UPDATE
), upd AS (
    UPDATE {{jobs}} AS j SET
        state = c.target, attempt = {_ATTEMPT_NOW} - %(give_back)s::int,
        attempted_at = {_STARTED_AT}, held = false,
        errors = {_entry("%(type)s::text", "%(message)s::text", _ATTEMPT_NOW)},
        lease_expires_at = NULL, worker_id = NULL,
        finished_at = CASE WHEN c.target IN ({_FAILED}, {_DEAD}) THEN {NOW} ELSE j.finished_at END,
        run_at = CASE WHEN c.target = {_SCHEDULED} THEN coalesce(%(retry_at)s::timestamptz, {NOW}) ELSE j.run_at END
    FROM cur AS c WHERE j.id = c.id
    RETURNING {_COLS}, (CASE WHEN j.state IN ({_FAILED}, {_DEAD}) THEN {_TOLD} END) AS told
), {_WOKE.format(source="upd", cond=f"u.state = {_SCHEDULED} AND u.run_at <= {NOW}")}
SELECT upd.told, {", ".join(f"upd.{c}" for c in JOB_COLUMNS)} FROM upd CROSS JOIN woke
""")
    """The nack target (S02-S05), first match wins: fail, park, out of attempts, retry (at
    ``retry_at`` when given, else the store's now). A held claim is started first (F04), so
    giving it back uncounted leaves its attempt as it was."""


# --- dependencies (rules D) -------------------------------------------------------------

def _parent_ended_text() -> str:
    """The ``Cancelled`` entry's message of a parent's child (D02), from the vocabulary's template."""
    fields = {"parent": "parent_id::text", "state": "ended"}
    pieces = []
    for literal, field, _, _ in string.Formatter().parse(PARENT_ENDED_TEMPLATE):
        if literal:
            pieces.append(_lit(literal))
        if field is not None:
            pieces.append(fields[field])
    return " || ".join(pieces)


_ENDED_OTHERWISE: Final = in_list((JobState.FAILED, JobState.DEAD, JobState.CANCELLED))
_WAITING: Final = f"c.parents @> ARRAY[parent_id] AND c.waiting AND c.state = {_SUSPENDED} AND c.claim_no = 0"
"""A child of ``parent_id`` still waiting on its parents: suspended, never claimed (a parked
job was claimed, and a resumed or requeued one is no longer suspended without a claim)."""

SETTLE_CHILDREN_FUNCTION: Final = f"""CREATE OR REPLACE FUNCTION {{schema}}.jobs_settle_children() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    parent_id bigint;
    ended text;
    stamp timestamptz;
    woke bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        parent_id := OLD.id;
        ended := CASE WHEN OLD.state IN {FINISHED} THEN OLD.state ELSE 'removed' END;
        stamp := date_trunc('milliseconds', now());
    ELSE
        parent_id := NEW.id;
        ended := NEW.state;
        stamp := NEW.finished_at;
    END IF;
    -- Lock the waiting children first, in id order: the acks of two parents of one child,
    -- racing, then decide one after the other, the later one with a snapshot taken after the
    -- earlier committed (each statement here takes its own), so neither misses the other.
    PERFORM 1 FROM {{jobs}} AS c WHERE {_WAITING} ORDER BY c.id FOR UPDATE;
    IF ended <> {_DONE} THEN
        UPDATE {{jobs}} AS c SET state = {_CANCELLED}, waiting = false, finished_at = stamp,
            errors = c.errors || jsonb_build_array(jsonb_build_object('type', {_lit(CANCELLED_ENTRY)}::text,
                'message', {_parent_ended_text()}, 'at', (date_part('epoch', stamp) * 1000)::bigint,
                'attempt', c.attempt))
        WHERE {_WAITING} AND NOT c.run_anyway;
    END IF;
    WITH released AS (
        UPDATE {{jobs}} AS c SET waiting = false,
            state = CASE WHEN c.run_at > stamp THEN {_SCHEDULED} ELSE {_READY} END
        WHERE {_WAITING} AND NOT EXISTS (
            SELECT 1 FROM {{jobs}} AS p WHERE p.id = ANY(c.parents)
              AND (p.state IN {LIVE} OR (p.state IN {_ENDED_OTHERWISE} AND NOT c.run_anyway)))
        RETURNING c.queue, c.state
    )
    SELECT count(*) INTO woke FROM (
        SELECT pg_notify({{notify_channel}}, q.queue)
        FROM (SELECT DISTINCT r.queue FROM released AS r WHERE r.state = {_READY}) AS q
    ) AS w;
    RETURN NULL;
END
$fn$"""
"""The trigger function of a parent that finished or was removed (D01, D02, D05): it locks its
waiting children (so two parents ending at once decide in turn, the later one seeing the
earlier one's state: no write skew leaves a child waiting on parents all done); its waiting
children in ``cancel`` mode are cancelled when it ended otherwise than ``done`` (removed
before it finished included), with a ``Cancelled`` entry naming it (their own children
follow by the same trigger); then each waiting child none of whose stored parents is live
(nor, in ``cancel`` mode, ended otherwise) becomes due, ``scheduled`` when its ``run_at`` is
after the parent's ``finished_at``, and NOTIFYs the queues of those made ready (at commit, as
an enqueue does). A removed parent is no longer stored: it counts as done.
Times are the parent's ``finished_at`` (the settling statement's now, F01); a removal,
which has none, reads the store's clock."""


# --- introspection and operator verbs ---------------------------------------------------

# State words come from jobcore.vocabulary: a verb's guard travels as a bind parameter
# (``%(states)s``, or for bulk verbs ``f_states``: the guard already intersected with the
# filter by the front door, re-checked by the UPDATE/DELETE); fixed states are literals
# built from JobState at import time.
_READY, _SCHEDULED, _RUNNING = lit(JobState.READY), lit(JobState.SCHEDULED), lit(JobState.RUNNING)
_DEAD, _CANCELLED = lit(JobState.DEAD), lit(JobState.CANCELLED)
_CANCELLED_ENTRY: Final = "'" + CANCELLED_ENTRY.replace("'", "''") + "'::text"
_GUARD: Final = "j.state = ANY(%(states)s::text[])"
_F_GUARD: Final = "j.state = ANY(%(f_states)s::text[])"

# Bulk verbs (O05): ``remaining`` = eligible before - moved now.
_TARGET: Final = f"target AS (SELECT j.id FROM {{jobs}} AS j WHERE {_FILTER} ORDER BY j.id LIMIT %(limit)s FOR UPDATE)"
_ELIGIBLE: Final = f"(SELECT count(*) FROM {{jobs}} AS j WHERE {_FILTER})"

_REQUEUEABLE: Final = f"""
SELECT c.id FROM (
    SELECT j.id, j.key, row_number() OVER (PARTITION BY j.name, j.key ORDER BY j.id) AS rn
    FROM {{jobs}} AS j
    WHERE {_FILTER} AND (j.key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {{jobs}} AS h WHERE h.name = j.name AND h.key = j.key AND h.state IN {LIVE}))
) AS c WHERE c.key IS NULL OR c.rn = 1
"""
"""Finished rows requeue_many may move (O06): no live holder of the key, and only the
oldest of several finished rows sharing a name and key."""


class OperatorStatements:
    """Introspection and the operator verbs (rules O), on one job and many."""

    GET = Sql(f"SELECT {_COLS} FROM {{jobs}} AS j WHERE j.id = %(id)s")

    JOB_STATE = Sql("SELECT j.state, j.name, j.key FROM {jobs} AS j WHERE j.id = %(id)s")

    LIST_OLDER = Sql(f"""
SELECT {_COLS} FROM {{jobs}} AS j
WHERE {_FILTER} AND (%(cursor)s::bigint IS NULL OR j.id < %(cursor)s::bigint)
ORDER BY j.id DESC LIMIT %(limit)s
""")

    LIST_NEWER = Sql(f"""
SELECT {_COLS} FROM {{jobs}} AS j
WHERE {_FILTER} AND j.id > %(cursor)s::bigint
ORDER BY j.id ASC LIMIT %(limit)s
""")

    STATS = Sql(f"""
SELECT j.queue, j.state, count(*), NULL::interval FROM {{jobs}} AS j GROUP BY j.queue, j.state
UNION ALL
SELECT j.queue, NULL, NULL, {NOW} - min(j.run_at) FROM {{jobs}} AS j
WHERE j.state IN {in_list(CLAIMABLE_STATES)} AND j.run_at <= {NOW} GROUP BY j.queue
""")
    """Counts per (queue, state), then per queue the age of its oldest due job on the store's clock (O08)."""

    FINISHED_COUNTS = Sql(f"""
SELECT date_trunc('minute', f.finished_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', s.state, count(*)
FROM unnest(%(states)s::text[]) AS s(state)
CROSS JOIN LATERAL (
    SELECT j.finished_at FROM {{jobs}} AS j
    WHERE j.state IN {FINISHED} AND j.state = s.state
      AND j.finished_at >= date_trunc('minute', {NOW} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
          - (%(minutes)s::int - 1) * interval '1 minute'
    ORDER BY j.finished_at
) AS f
GROUP BY 1, 2
""")
    """Jobs finished per (UTC minute, state) since the start of the window on the store's clock
    (O10): per finished state one range of ``jobs_finished`` (state, finished_at, id), from the
    window's start. The literal ``IN`` list proves the partial index's predicate in a generic
    plan too; ``j.state = s.state`` (per state, not implied by that predicate, so the planner
    keeps it) makes the state an index condition, and the ``ORDER BY`` (the index's order)
    keeps the subquery a per-state index scan rather than a join over every finished row."""

    DEAD_LETTERS = Sql(f"""
SELECT {_COLS} FROM {{jobs}} AS j
WHERE j.state = {_DEAD} AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
ORDER BY j.finished_at DESC, j.id DESC LIMIT %(limit)s
""")

    RESCUE = Sql(f"""
WITH lapsed AS (
    SELECT j.id, j.attempt >= j.max_attempts AND NOT j.held AS spent FROM {{jobs}} AS j
    WHERE j.state = {_RUNNING} AND j.lease_expires_at <= {NOW}
    FOR UPDATE SKIP LOCKED
), buried AS (
    UPDATE {{jobs}} AS j SET
        state = {_DEAD}, finished_at = {NOW}, lease_expires_at = NULL, worker_id = NULL,
        errors = {_BURIAL_ENTRY}
    FROM lapsed AS l WHERE j.id = l.id AND l.spent
    RETURNING 1 AS kind, {_COLS}, {_TOLD} AS told
), back AS (
    UPDATE {{jobs}} AS j SET
        state = {_READY}, worker_id = NULL, lease_expires_at = NULL, run_at = {NOW}, held = false,
        errors = CASE WHEN j.held THEN j.errors ELSE {_LEASE_EXPIRED} END
    FROM lapsed AS l WHERE j.id = l.id AND NOT l.spent
    RETURNING 0 AS kind, {_COLS}
), {_WOKE.format(source="back", cond="true")}
SELECT kind, {_BARE} FROM buried
UNION ALL
SELECT back.kind, {", ".join(f"back.{c}" for c in JOB_COLUMNS)} FROM back CROSS JOIN woke
ORDER BY kind, id
""")
    """C10: every queue. Requeued rows keep their claim_no; their old token dies with ``running``.
    A lapsed held claim (F04) goes back as it was: nothing recorded, never buried."""

    CANCEL = Sql(f"""
UPDATE {{jobs}} AS j SET
    state = {_CANCELLED}, finished_at = {NOW}, lease_expires_at = NULL, worker_id = NULL, held = false,
    errors = {_entry(_CANCELLED_ENTRY, "%(message)s::text")}
WHERE j.id = %(id)s AND {_GUARD}
RETURNING {_TOLD}, {_COLS}
""")

    REQUEUE = Sql(f"""
WITH upd AS (
    UPDATE {{jobs}} AS j SET state = {_READY}, attempt = 0, run_at = {NOW}, finished_at = NULL, result = NULL
    WHERE j.id = %(id)s AND {_GUARD}
      AND (j.key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {{jobs}} AS h WHERE h.name = j.name AND h.key = j.key AND h.state IN {LIVE}))
    RETURNING {_COLS}
), {_WOKE.format(source="upd", cond="true")}
SELECT {", ".join(f"upd.{c}" for c in JOB_COLUMNS)} FROM upd CROSS JOIN woke
""")

    REMOVE = Sql(f"DELETE FROM {{jobs}} AS j WHERE j.id = %(id)s AND {_GUARD} RETURNING {_COLS}")

    RELATIVES = Sql(f"""
SELECT 0 AS side, {_COLS} FROM {{jobs}} AS j WHERE j.id = %(id)s
UNION ALL
SELECT 1, {_COLS} FROM {{jobs}} AS j
WHERE j.id = ANY((SELECT x.parents FROM {{jobs}} AS x WHERE x.id = %(id)s)::bigint[])
UNION ALL
SELECT 2, {_COLS} FROM {{jobs}} AS j WHERE j.parents @> ARRAY[%(id)s::bigint]
ORDER BY 1, 2
""")
    """A job (side 0), its stored parents (1) and children (2), oldest first (D05). The
    children are found through the partial GIN index ``jobs_parents``."""

    MARK_PARENTS = Sql("""
WITH p AS (SELECT j.id FROM {jobs} AS j WHERE j.id = ANY(%(ids)s::bigint[]) ORDER BY j.id FOR NO KEY UPDATE)
UPDATE {jobs} AS j SET has_children = true FROM p WHERE j.id = p.id RETURNING j.id, j.state
""")
    """Lock the parents an enqueue names (in id order, so enqueues sharing parents cannot
    deadlock) and mark them as having children (D01, D04): answers the stored ones and
    their state, which a concurrent settle can no longer change until this transaction
    ends. A settle waiting on the lock then sees ``has_children`` and fires the trigger."""

    LINK_CHILDREN = Sql(f"""
UPDATE {{jobs}} AS c SET parents = l.parents, run_anyway = l.anyway, waiting = l.wait,
    state = CASE WHEN l.wait THEN {_SUSPENDED} ELSE c.state END
FROM (
    SELECT (t.item->>0)::bigint AS id, ARRAY(SELECT jsonb_array_elements_text(t.item->1)::bigint) AS parents,
           (t.item->>2)::boolean AS anyway, (t.item->>3)::boolean AS wait
    FROM jsonb_array_elements(%(items)s::jsonb) AS t(item)
) AS l
WHERE c.id = l.id
""")
    """Store new children's parents (items ``[id, [parent ids], run_anyway, wait]``); a child
    with a parent not yet done waits, suspended (D01)."""

    MAKE_DUE = Sql(f"""
WITH upd AS (
    UPDATE {{jobs}} AS j SET state = {_READY}, run_at = {NOW}, attempt = LEAST(j.attempt, j.max_attempts - 1)
    WHERE j.id = %(id)s AND {_GUARD}
    RETURNING {_COLS}
), {_WOKE.format(source="upd", cond="true")}
SELECT {", ".join(f"upd.{c}" for c in JOB_COLUMNS)} FROM upd CROSS JOIN woke
""")
    """promote (``states``: scheduled) and resume (suspended): ready, due now, an attempt left (O04, S05)."""

    CANCEL_MANY = Sql(f"""
WITH {_TARGET}, upd AS (
    UPDATE {{jobs}} AS j SET
        state = {_CANCELLED}, finished_at = {NOW}, lease_expires_at = NULL, worker_id = NULL, held = false,
        errors = {_entry(_CANCELLED_ENTRY, "%(message)s::text")}
    FROM target AS t WHERE j.id = t.id AND {_F_GUARD}
    RETURNING j.id, {_TOLD} AS told
)
SELECT (SELECT count(*) FROM upd), {_ELIGIBLE}
""")

    REMOVE_MANY = Sql(f"""
WITH {_TARGET}, del AS (
    DELETE FROM {{jobs}} AS j USING target AS t WHERE j.id = t.id AND {_F_GUARD} RETURNING j.id
)
SELECT (SELECT count(*) FROM del), {_ELIGIBLE}
""")

    PROMOTE_MANY = Sql(f"""
WITH {_TARGET}, upd AS (
    UPDATE {{jobs}} AS j SET state = {_READY}, run_at = {NOW}
    FROM target AS t WHERE j.id = t.id AND {_F_GUARD}
    RETURNING j.id, j.queue
), {_WOKE.format(source="upd", cond="true")}
SELECT (SELECT count(*) FROM upd), {_ELIGIBLE}, (SELECT n FROM woke)
""")

    REQUEUE_MANY_PICK = Sql(f"{_REQUEUEABLE} ORDER BY c.id LIMIT %(limit)s")
    REQUEUE_MANY_COUNT = Sql(f"SELECT count(*) FROM ({_REQUEUEABLE}) AS r")
    REQUEUE_MANY_APPLY = Sql(f"""
WITH upd AS (
    UPDATE {{jobs}} AS j SET
        state = CASE WHEN t.offset_ms > 0 THEN {_SCHEDULED} ELSE {_READY} END, attempt = 0,
        run_at = {NOW} + t.offset_ms * interval '1 millisecond', finished_at = NULL, result = NULL
    FROM unnest(%(ids)s::bigint[], %(offsets_ms)s::bigint[]) AS t(id, offset_ms)
    WHERE j.id = t.id AND {_F_GUARD}
    RETURNING j.id, j.queue
), {_WOKE.format(source="upd", cond="true")}
SELECT (SELECT count(*) FROM upd), (SELECT n FROM woke)
""")
    """Requeue the picked rows, each due its offset (ms) after the store's now (O06's spread)."""


class LeaseStatements:
    """Fleet leases (rules K)."""

    LEASE_LOCK = Sql("SELECT pg_advisory_xact_lock(%(space)s::int, hashtext(%(key)s::text))")
    """Serialises acquirers of one key, so two cannot both see a free slot."""

    LEASE_PURGE = Sql(f"DELETE FROM {{leases}} AS l WHERE l.key = %(key)s AND l.expires_at <= {NOW}")

    LEASE_ACQUIRE = Sql(f"""
INSERT INTO {{leases}} AS l (key, holder, expires_at)
SELECT %(key)s, %(holder)s, {NOW} + {ms("ttl_ms")}
WHERE EXISTS (SELECT 1 FROM {{leases}} AS o WHERE o.key = %(key)s AND o.holder = %(holder)s)
   OR (SELECT count(*) FROM {{leases}} AS o WHERE o.key = %(key)s) < %(limit)s
ON CONFLICT (key, holder) DO UPDATE SET expires_at = excluded.expires_at
RETURNING l.holder
""")

    LEASE_RENEW = Sql(f"""
UPDATE {{leases}} AS l SET expires_at = {NOW} + {ms("ttl_ms")}
WHERE l.key = %(key)s AND l.holder = %(holder)s AND l.expires_at > {NOW}
RETURNING l.holder
""")

    LEASE_RELEASE = Sql("DELETE FROM {leases} AS l WHERE l.key = %(key)s AND l.holder = %(holder)s RETURNING l.holder")

    LEASE_SLOTS = Sql(f"""
SELECT l.key, l.holder, l.expires_at FROM {{leases}} AS l
WHERE (%(key)s::text IS NULL OR l.key = %(key)s::text) AND l.expires_at > {NOW}
ORDER BY l.key COLLATE "C", l.holder COLLATE "C"
LIMIT %(limit)s
""")
    """Who holds what (K04): unexpired slots, first ``limit`` in code-point order of (key, holder)."""


class WaitStatements:
    """Waiting on results (rules A)."""

    WAIT_MARK = Sql(
        f"UPDATE {{jobs}} AS j SET waited = true WHERE j.id = %(id)s AND j.state IN {LIVE} AND NOT j.waited"
    )
    """Mark a live job as waited on (A02), once its waiter LISTENs: from this commit on, the
    statement finishing it NOTIFYs (see ``_TOLD``). A finish that committed first is seen by
    the waiter's next read. The flag stays: a later finish of a requeued row notifies too,
    at worst waking nobody. It sets no indexed column, so the update can be HOT."""


class StoreStatements:
    """The store itself: its schema version and its clock."""

    SCHEMA_VERSION = Sql("SELECT coalesce(max(v.version), 0) FROM {versions} AS v")

    STORE_NOW = Sql("SELECT now()")
    """The store's time, for ``driver.clock`` (a :class:`~jobcore.clock.StoreClock`): what callers
    compute ahead of a call (a worker's retry time, a scheduler's next occurrence)."""


class JobStatements(
    EnqueueStatements, SettleStatements, OperatorStatements, LeaseStatements, WaitStatements, StoreStatements,
):
    """Every statement of jobs, fleet leases and the store."""

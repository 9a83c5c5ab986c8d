"""The MongoDB driver: the whole JobDriver contract on pymongo 4, one atomic operation per transition.

Every state transition is a single server-side ``find_one_and_update`` /
``update_one`` / ``update_many`` whose filter re-checks the precondition (state, and
for settles the token's ``worker_id`` and ``claim_no``), with update pipelines where
the new value depends on the old one (appending an error, ``attempt + 1``, choosing
``dead`` or ``scheduled``). No client-side read decides a transition: a read at most
picks candidates or words a refusal after a conditional write matched nothing.

Why each claim step is safe when many claimers (and rescuers, heartbeats, settles and
operators) interleave. MongoDB applies a single-document write atomically and
evaluates its filter against the document it modifies, under the document's write
lock; a concurrent write that changed the document first makes the filter no longer
match, and the server moves on to the next candidate (or answers ``None``).

1. Lapsed leases, burial and reclaim (C07, C08), in one pass: ``find_one_and_update``
   of one document whose filter is "running, in these queues, ``lease_expires_at <=
   now``", sorted by the claim order. Its update pipeline computes from the document
   being written whether the job is on its final attempt: then it is settled
   ``dead``/``failed`` with ``LeaseLapsedFinalAttempt`` (buried), else it records
   ``LeaseExpired`` and is taken with ``claim_no + 1``, which kills the old token at
   the same instant. Either way the job stops matching the filter (no longer running,
   or its lease live again), so no other claimer (or ``rescue``) buries it a second
   time or takes it too, and only the caller whose write landed gets it back to
   report. A heartbeat that landed first moved the lease past ``now``: the filter no
   longer matches (L01: a late heartbeat still lands). When the claim is full, the
   jobs still lapsed on their final attempt are buried by a filter that adds
   ``attempt >= max_attempts``, so nothing with attempts left is reclaimed beyond
   ``limit``.
2. Due jobs (C01-C03): filter "ready/scheduled, ``run_at <= now``, in these queues",
   sorted by priority desc, run_at asc, ``_id`` asc, hinted to the claim index. The
   first claimer's write makes the document ``running``; the second claimer's filter
   no longer matches it and it takes the next one.

Retried writes never break a rule. On a replica set pymongo retries a single-document
write (``find_one_and_update``, ``update_one``, inserts, unordered bulk writes) once
after a network error, and the server recognises the retry by its session and
transaction number and answers the first outcome without applying it again: a claim
is never applied twice, a retried ack answers the settled job. Multi-document writes
(``update_many`` in ``rescue`` and the bulk verbs) are not retried, and re-running
them is harmless because each document's filter carries the guard. A standalone
server retries nothing: a lost reply surfaces as ``JC_DB_UNAVAILABLE``, and a claim
that landed unseen simply lapses and is reclaimed (C07).

Enqueue order is an int64 sequence per store, kept in a counter document moved by one
``$inc`` of the batch size (one round trip per batch); it is the job id and the list
cursor. Payloads and results are stored as canonical JSON text (see ``_docs``).

Both flavours share every query, fence and decoding: :class:`MongoDriver` and
:class:`AsyncMongoDriver` (PyMongo's native ``AsyncMongoClient``) differ only in their
I/O plumbing (``_unblocking``); the sync modules are generated from the async ones
(``tools/unasync.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pymongo

from jobcore.errors import DriverUnavailable, NotSupported

from ._store import (
    CLOCK_READ_BOUND,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_POOL_MAX,
    MongoStore,
    capabilities_of,
)
from ._watch import Hub

if TYPE_CHECKING:
    from ._adriver import AsyncMongoDriver

PYMONGO_FLOOR = "4.13"
"""The oldest PyMongo either flavour runs on (``Cursor.to_list`` from 4.9, the stable
``AsyncMongoClient`` from 4.13); the ``jobcore-queue[mongo]`` extra asks for it."""

if pymongo.version_tuple < tuple(int(part) for part in PYMONGO_FLOOR.split(".")):
    raise DriverUnavailable(
        f"PyMongo {pymongo.version} is too old for jobcore's MongoDB driver, which needs PyMongo {PYMONGO_FLOOR}",
        f"pip install --upgrade 'pymongo>={PYMONGO_FLOOR}' (the jobcore-queue[mongo] extra asks for it)",
    )

__all__ = [
    "CLOCK_READ_BOUND",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_POOL_MAX",
    "AsyncMongoDriver",
    "MongoDriver",
    "capabilities_of",
]


class MongoDriver(MongoStore):
    """The MongoDB :class:`~jobcore.driver.JobDriver`.

    Args:
        uri_or_client: A ``mongodb://`` URI (the driver owns and closes the client) or a
            ``MongoClient`` the caller owns.
        database: Database holding the collections.
        collection_prefix: Prefix of the ``jobs``, ``meta`` and ``leases`` collections.
        clock: Source of "now". Default: the server's clock (a
            :class:`~jobcore.clock.StoreClock` reading ``hello``'s ``localTime``, rule F01);
            an injected clock (tests) stands in for it.
        default_max_attempts: ``max_attempts`` for jobs enqueued without one.
        call_timeout: Seconds any one driver call may take, all its round trips included
            (F07). A client made from a URI gets it as ``timeoutMS`` unless the URI sets
            ``timeoutMS``, which then rules; for a handed-in client its own ``timeoutMS``
            rules when set. ``timeoutMS=0`` switches the bound off.
        connect_timeout: Seconds to open one connection, for a client made from a URI
            (``connectTimeoutMS``, unless the URI sets it). The wait for a usable server
            is bounded by ``call_timeout``.
        auto_migrate: Create the indexes and record the schema on first use instead of
            raising ``JC_SCHEMA_OUTDATED`` (tests, demos; production runs ``jobcore migrate``).
            ``?auto_migrate=true`` in a URL says the same.
        pool_max: Connections at most per server of a client made from a URI (PyMongo's
            ``maxPoolSize``, whose own default is 100), unless the URI sets ``maxPoolSize``;
            a positive int, default :data:`DEFAULT_POOL_MAX`. ``?pool_max=`` in a URL says the same.
    """


    def _hub_idle(self, hub: Hub) -> None:
        """The last subscription of ``hub`` closed: stop it (a later subscribe starts another)."""
        with self._lock:  # subscribe adds under this lock: nobody joins while we check
            if self._hub is not hub or not hub.empty:
                return
            self._hub = None
        hub.close()


def __getattr__(name: str) -> Any:
    """``AsyncMongoDriver`` on first use: the sync driver imports nothing of asyncio's."""
    if name == "AsyncMongoDriver":
        try:
            from ._adriver import AsyncMongoDriver  # noqa: PLC0415 - on demand
        except ImportError as exc:  # pymongo before 4.13 has no (stable) AsyncMongoClient
            raise NotSupported(
                f"jobcore's AsyncMongoDriver needs PyMongo's native async client ({exc})",
                "pip install --upgrade 'pymongo>=4.13' (or 'jobcore-queue[mongo]')",
            ) from exc
        return AsyncMongoDriver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

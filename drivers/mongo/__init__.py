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
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, overload
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import pymongo
import pymongo.common
from bson.codec_options import CodecOptions
from pymongo import MongoClient, ReturnDocument, UpdateOne
from pymongo import errors as pe
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.uri_parser import parse_uri

from jobcore import validate as v
from jobcore.clock import Clock, StoreClock, to_millis, utc
from jobcore.door import IntrospectDoor
from jobcore.driver import Duration
from jobcore.errors import BackendFailure, NotSupported, OptionInvalid, SchemaOutdated, UrlInvalid, redact
from jobcore.records import Claimed, ClaimResult, ClaimToken, Job, JobState, Migration
from jobcore.vocabulary import LEASE_EXPIRED, LEASE_EXPIRED_TEXT, LEASE_LAPSED_FINAL

from . import _docs as d
from ._errors import Bounds, translated
from ._introspect import MongoIntrospect
from ._leases import MongoLeases
from ._schedules import MongoSchedules
from ._watch import Hub, Silent, Subscription

__all__ = ["DEFAULT_POOL_MAX", "MongoDriver", "capabilities_of"]


Doc = dict[str, Any]
READY, SCHEDULED, RUNNING = JobState.READY.value, JobState.SCHEDULED.value, JobState.RUNNING.value
_CODEC: CodecOptions[Doc] = CodecOptions(tz_aware=True, tzinfo=utc)
DEFAULT_CALL_TIMEOUT = 10.0
"""Seconds one driver call may take by default (F07)."""
DEFAULT_POOL_MAX = 10
"""Connections at most per server of a client the driver makes (PyMongo's own default is 100)."""
DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to open one connection, by default (F07)."""
CLOCK_READ_BOUND = 2.0
"""Seconds one reading of the server's clock may take (F01, F07)."""


class MongoDriver:
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

    def __init__(
        self, uri_or_client: str | MongoClient[Doc], *, database: str = "jobcore",
        collection_prefix: str = "jobcore_", clock: Clock | None = None,
        default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS, call_timeout: Duration = DEFAULT_CALL_TIMEOUT,
        connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT, auto_migrate: bool = False,
        pool_max: int = DEFAULT_POOL_MAX,
    ) -> None:
        self.auto_migrate = bool(auto_migrate)
        most = v.check_int(pool_max, "pool_max", 1, 1000)
        call_bound = _seconds(call_timeout, "call_timeout")
        connect_bound = _seconds(connect_timeout, "connect_timeout")
        if isinstance(uri_or_client, str):
            _refuse_unknown_options(uri_or_client)
            try:
                bounded = _bounded_options(uri_or_client, call_bound, connect_bound, most)
                self._client: MongoClient[Doc] = MongoClient(uri_or_client, tz_aware=True, tzinfo=utc, **bounded)
            except (pe.ConfigurationError, pe.InvalidURI, ValueError, TypeError) as exc:
                raise UrlInvalid(
                    f"{repr(redact(uri_or_client))[:80]} is not a MongoDB URI pymongo accepts ({redact(exc)})"
                ) from exc
            self._owns_client = True
            self._uri: str | None = uri_or_client
        elif isinstance(uri_or_client, MongoClient):
            self._client, self._owns_client, self._uri = uri_or_client, False, None
        else:
            raise OptionInvalid(
                f"MongoDriver wants a mongodb:// URI or a MongoClient, got {type(uri_or_client).__name__}",
                "pass MongoDriver('mongodb://host/db') or MongoDriver(MongoClient(...))",
            )
        v.check_name(database, "database")
        if not isinstance(collection_prefix, str) or "$" in collection_prefix or "\x00" in collection_prefix:
            raise OptionInvalid(f"collection_prefix={collection_prefix!r:.60} is not usable", "pass e.g. 'jobcore_'")
        options = self._client.options
        own = options.timeout  # the client's timeoutMS in seconds; 0 switches the bound off
        bound = call_bound if own is None else (float(own) or None)
        self._bounds = Bounds(
            call=bound, select=bound or float(options.server_selection_timeout),
            connect=float(options.pool_options.connect_timeout or 0),
        )
        self.clock: Clock = clock if clock is not None else StoreClock(self._store_time)
        self._default_max_attempts = v.check_int(default_max_attempts, "default_max_attempts", 1, v.MAX_ATTEMPTS)
        db = self._client.get_database(database, codec_options=_CODEC)
        self._jobs: Collection[Doc] = db[f"{collection_prefix}jobs"]
        self._meta: Collection[Doc] = db[f"{collection_prefix}meta"]
        self._capabilities: frozenset[str] | None = None
        self._ready = False
        self._lock = threading.Lock()
        self._hub: Hub | None = None
        self.leases = MongoLeases(self, db[f"{collection_prefix}leases"])
        self.introspect = IntrospectDoor(MongoIntrospect(self, self._jobs))
        self.schedules = MongoSchedules(self, db[f"{collection_prefix}schedules"])

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MongoDriver:
        """Build from ``mongodb://[user@]host[:port]/database?...``; the path names the database.

        jobcore's own options ``auto_migrate`` and ``pool_max`` are taken out of the query; the rest goes to PyMongo.
        """
        url, own = _own_options(url)
        options = {**own, **options}
        _refuse_unknown_options(url)
        try:
            parsed = parse_uri(url)
        except (pe.ConfigurationError, pe.InvalidURI, ValueError) as exc:
            raise UrlInvalid(f"{repr(redact(url))[:80]} is not a valid mongodb:// URL ({redact(exc)})") from exc
        if parsed.get("database") and "database" not in options:
            options["database"] = parsed["database"]
        return cls(url, **options)

    @property
    def url(self) -> str:
        """A ``mongodb://`` URL reaching this driver's database, for ``jobcore.connect`` in
        another process (the CLI, a worker). Only the default collection prefix travels, and a
        handed-in client's credentials do not."""
        if self._uri is not None:
            base = urlsplit(self._uri)
        else:  # a client handed in: its seed list and the options that decide topology
            seeds = self._client.topology_description.server_descriptions()
            hosts = ",".join(f"{host}:{port}" for host, port in sorted(seeds))
            options = self._client.options
            query = []
            if options.direct_connection is not None:
                query.append(("directConnection", str(options.direct_connection).lower()))
            if options.replica_set_name:
                query.append(("replicaSet", options.replica_set_name))
            base = urlsplit(f"mongodb://{hosts}/?{urlencode(query)}")
        return urlunsplit(base._replace(path="/" + self._jobs.database.name))

    # -- capabilities, schema ------------------------------------------------------------

    @property
    def capabilities(self) -> frozenset[str]:
        """``shared_store``, ``ack_landed_only`` and ``deferred_start``; plus ``notify`` and
        ``transactional_enqueue`` on a replica set or mongos (docs/drivers/mongo.md, "At scale").

        Decided from ``hello`` as real MongoDB would, never by trying: change streams exist
        on replica-set members (``setName``) and mongos (``msg: isdbgrid``) from MongoDB 3.6
        (``maxWireVersion`` 6); multi-document transactions on replica sets from 4.0 (wire 7)
        and through mongos from 4.2 (wire 8); a standalone server has neither, whatever a
        lenient test server allows.
        """
        if self._capabilities is None:
            self._capabilities = capabilities_of(self._hello())
        return self._capabilities

    @capabilities.setter
    def capabilities(self, value: Iterable[str]) -> None:
        self._capabilities = frozenset(value)

    def _check_unsharded(self) -> None:
        """Through mongos, refuse a sharded jobs collection (``JC_NOT_SUPPORTED``): a claim is a
        ``findAndModify`` by queue and state, and the idempotency keys' unique index cannot
        hold across shards unless prefixed by the shard key (docs/drivers/mongo.md, "At scale")."""
        if self._hello().get("msg") != "isdbgrid":
            return
        try:
            stats = self._jobs.database.command("collStats", self._jobs.name)
        except pe.OperationFailure as exc:
            if exc.code == 26:  # NamespaceNotFound: not created yet, so not sharded
                return
            raise
        if stats.get("sharded"):
            raise NotSupported(
                f"{self._jobs.full_name} is sharded; jobcore's claims and idempotency keys need it unsharded",
                "keep jobcore's collections unsharded in a database of their own (move it with movePrimary), "
                "and split queues over several databases to spread the load (docs/drivers/mongo.md)",
            )

    @translated
    def _hello(self) -> Doc:
        return self._client.admin.command("hello", codec_options=_CODEC)

    @translated
    def _store_time(self) -> datetime:
        """The server's wall time (``hello``'s ``localTime``, whole milliseconds): what the
        default :class:`~jobcore.clock.StoreClock` carries forward (F01).

        Bounded tighter than a call: a reading that slow is no use (its error is half
        its round trip), and while the server is away the clock keeps its last reading,
        so a re-read due during an outage should cost little of a call's time.
        """
        with pymongo.timeout(min(self._bounds.call or CLOCK_READ_BOUND, CLOCK_READ_BOUND)):
            found = self._client.admin.command("hello", codec_options=_CODEC).get("localTime")
        if not isinstance(found, datetime):
            raise BackendFailure(
                "the MongoDB server's hello answer has no localTime, so its clock cannot be read",
                "connect to a mongod or mongos (they answer localTime), or pass clock= explicitly",
            )
        return found

    @translated
    def migrate(self, *, dry_run: bool = False) -> Migration:
        """Create and check the indexes and record the schema version; idempotent, safe to race.

        ``dry_run=True`` only reads: the answer's ``statements`` are the ``mongosh``
        commands a real run would send (``jobcore migrate --dry-run``).
        """
        found = self._version()
        before = None if found is None else found[0]
        if before is not None and before > d.SCHEMA_VERSION:
            return Migration(
                before=before, after=before, latest=d.SCHEMA_VERSION, applied=False, language="mongosh"
            )
        missing = self._missing_indexes()
        statements = tuple(
            f"db.getCollection({self._jobs.name!r}).createIndex({_shell(m.document['key'])}, "
            f"{_shell({k: val for k, val in m.document.items() if k != 'key'})})"
            for m in missing
        )
        if before != d.SCHEMA_VERSION:
            record = {"version": d.SCHEMA_VERSION, "compatible_from": d.COMPATIBLE_FROM}
            meta = f"db.getCollection({self._meta.name!r})"
            statements += (
                f"{meta}.updateOne({{_id: 'seq'}}, {{$setOnInsert: {{value: 0}}}}, {{upsert: true}})",
                f"{meta}.updateOne({{_id: 'schema'}}, {{$set: {_shell(record)}}}, {{upsert: true}})",
            )
        after = d.SCHEMA_VERSION if statements else before
        if dry_run:
            return Migration(
                before=before, after=after, latest=d.SCHEMA_VERSION, statements=statements, applied=False,
                language="mongosh",
            )
        self._check_unsharded()
        try:
            self._jobs.create_indexes(d.INDEXES)
        except pe.OperationFailure as exc:
            if exc.code in (85, 86):  # IndexOptionsConflict / IndexKeySpecsConflict
                raise SchemaOutdated(
                    f"an index of {self._jobs.full_name} differs from this jobcore's ({exc.details})",
                    "drop the conflicting jc_* index, then run `jobcore migrate` again",
                ) from exc
            raise
        if self._missing_indexes():
            raise SchemaOutdated(f"an index of {self._jobs.full_name} is missing or differs after creating it")
        # The counter exists before the first enqueue, so enqueues never race to upsert it.
        with contextlib.suppress(pe.DuplicateKeyError):
            self._meta.update_one({"_id": "seq"}, {"$setOnInsert": {"value": 0}}, upsert=True)
        # Only ever moves forward: a store a newer jobcore upgraded keeps its record. A
        # DuplicateKeyError means a concurrent migrate inserted the record first.
        with contextlib.suppress(pe.DuplicateKeyError):
            self._meta.update_one(
                {"_id": "schema", "version": {"$not": {"$gte": d.SCHEMA_VERSION}}},
                {"$set": {"version": d.SCHEMA_VERSION, "compatible_from": d.COMPATIBLE_FROM}}, upsert=True,
            )
        self._ready = True
        return Migration(
            before=before, after=after, latest=d.SCHEMA_VERSION, statements=statements, language="mongosh"
        )

    def _version(self) -> tuple[int, int] | None:
        """The store's schema version and the oldest version whose code runs against it, or
        None when jobcore never set this database up."""
        found = self._meta.find_one({"_id": "schema"})
        if found is None:
            return None
        version = int(found.get("version", 0))
        return version, int(found.get("compatible_from", version))

    def _missing_indexes(self) -> list[pymongo.IndexModel]:
        """This jobcore's indexes the jobs collection lacks (or holds with other keys)."""
        have = self._jobs.index_information()
        out = []
        for model in d.INDEXES:
            spec = model.document
            found = have.get(spec["name"])
            if found is None or [(k, int(o)) for k, o in found["key"]] != list(spec["key"].items()):
                out.append(model)
        return out

    def _ensure(self) -> None:
        """Refuse a store this jobcore cannot use: not set up (unless ``auto_migrate``), older,
        or newer than this jobcore's code can run against."""
        if self._ready:
            return
        found = self._version()
        if found is None or found[0] < d.SCHEMA_VERSION:
            if not self.auto_migrate:
                state = "is not set up" if found is None else f"is at schema {found[0]}"
                raise SchemaOutdated(
                    f"jobcore's collections in {self._jobs.database.name} {state}; this jobcore needs schema"
                    f" {d.SCHEMA_VERSION}"
                )
            self.migrate()
        elif found[1] > d.SCHEMA_VERSION:
            raise SchemaOutdated(
                f"{self._jobs.database.name} was set up by a newer jobcore (schema {found[0]}, which needs"
                f" schema {found[1]} or later; this jobcore has {d.SCHEMA_VERSION})",
                "upgrade jobcore in this process",
            )
        self._check_unsharded()
        self._ready = True

    def _now(self) -> datetime:
        return to_millis(self.clock.now())

    # -- enqueue ---------------------------------------------------------------------------

    def _session(self, session: ClientSession | None) -> ClientSession | None:
        if session is None:
            return None
        if not isinstance(session, ClientSession) or session.client is not self._client:
            raise OptionInvalid(
                "session must be a ClientSession started from this driver's MongoClient",
                "start it with client.start_session() on the client the driver was built with",
            )
        if session.in_transaction and "transactional_enqueue" not in self.capabilities:
            raise NotSupported(
                "this MongoDB server is standalone; it has no multi-document transactions",
                "run MongoDB as a replica set (a single-node one will do) to enqueue inside a transaction",
            )
        return session

    @translated
    def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, session: ClientSession | None = None,
    ) -> Job:
        """See :meth:`jobcore.driver.JobDriver.enqueue`; ``session`` joins the caller's transaction."""
        now = self._now()
        new = v.new_job(
            name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
            max_attempts=max_attempts, key=key, now=now, default_max_attempts=self._default_max_attempts,
        )
        return self._store([new], now, self._session(session))[0]

    @translated
    def enqueue_many(self, specs: Iterable[Any], *, session: ClientSession | None = None) -> list[Job]:
        """See :meth:`jobcore.driver.JobDriver.enqueue_many`; ``session`` joins the caller's transaction."""
        now = self._now()
        news = v.new_jobs(specs, now=now, default_max_attempts=self._default_max_attempts)
        return self._store(news, now, self._session(session)) if news else []

    def _next_seqs(self, count: int) -> int:
        """Reserve ``count`` sequence numbers in one ``$inc``; answers the first.

        Outside any caller transaction on purpose: the counter would otherwise serialize
        every enqueueing transaction. An aborted transaction leaves a gap, which ids and
        cursors tolerate.
        """
        for _ in range(3):
            try:
                found = self._meta.find_one_and_update(
                    {"_id": "seq"}, {"$inc": {"value": count}}, upsert=True, return_document=ReturnDocument.AFTER,
                )
                if found is not None:
                    return int(found["value"]) - count + 1
            except pe.DuplicateKeyError:  # two first-ever upserts raced; the loser retries
                continue
        raise pe.OperationFailure("could not reserve enqueue sequence numbers")

    def _holders(self, idents: set[tuple[str, str]], session: ClientSession | None) -> dict[tuple[str, str], Doc]:
        if not idents:
            return {}
        query = {"$or": [{"name": n, "live_key": k} for n, k in sorted(idents)]}
        return {(doc["name"], doc["live_key"]): doc for doc in self._jobs.find(query, session=session)}

    def _store(self, news: list[v.NewJob], now: datetime, session: ClientSession | None) -> list[Job]:
        """Insert what no live holder's key blocks; answer holders as duplicates (E02, E05)."""
        self._ensure()
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
            first = self._next_seqs(len(fresh))
            docs = [d.new_document(first + n, news[i], now) for n, i in enumerate(fresh)]
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
        """Insert ``docs`` (one round trip); answer positions whose key a concurrent enqueue took."""
        try:
            if len(docs) == 1:
                self._jobs.insert_one(docs[0], session=session)
            else:
                self._jobs.insert_many(docs, ordered=False, session=session)
        except pe.DuplicateKeyError as exc:
            if session is not None or not d.key_clash(exc.details or {}):
                raise
            return [0]
        except pe.BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if session is not None or not all(d.key_clash(e) for e in errors):
                raise
            return [e["index"] for e in errors]
        return []

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

    # -- claim -----------------------------------------------------------------------------

    @translated
    def claim(
        self, queues: Sequence[str], *, worker_id: str, limit: int = 1, lease: Duration,
        drop_exhausted: Iterable[str] = (), start: bool = True,
    ) -> ClaimResult:
        """See :meth:`jobcore.driver.JobDriver.claim`; ``start=False`` holds the jobs (F04)."""
        names, worker, size, span, drop = v.check_claim(queues, worker_id, limit, lease, drop_exhausted)
        begin = v.check_bool(start, "start")
        self._ensure()
        now = self._now()
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

    # -- start, heartbeat and settle ------------------------------------------------------

    @translated
    def start(self, tokens: Iterable[ClaimToken]) -> list[bool]:
        """See :meth:`jobcore.driver.DeferredStart.start`.

        One fenced update per token, sent as one bulk write. Its matched count answers
        the batch outright when every token or none matched; otherwise one read of the
        fence fields tells which tokens are current. A token current at that read was
        current when its update ran (a token never becomes current again), so its
        attempt started; one superseded in between answers ``False``, as it would a
        moment later anyway.
        """
        checked = v.check_tokens(tokens)
        if not checked:
            return []
        update = [_started(self._now())]
        fences = [_fence(token) for token in checked]
        ops = [UpdateOne(fence, update) for fence in fences if fence is not None]
        if not ops:
            return [False] * len(fences)
        if len(fences) == 1:
            return [fences[0] is not None and self._jobs.update_one(fences[0], update).matched_count == 1]
        matched = self._jobs.bulk_write(ops, ordered=False).matched_count
        if matched in (0, len(ops)):
            return [fence is not None and matched > 0 for fence in fences]
        ids = sorted({fence["_id"] for fence in fences if fence is not None})
        current = {
            (doc["_id"], doc.get("worker_id"), doc.get("claim_no"))
            for doc in self._jobs.find({"_id": {"$in": ids}, "state": RUNNING}, {"worker_id": 1, "claim_no": 1})
        }
        return [f is not None and (f["_id"], f["worker_id"], f["claim_no"]) in current for f in fences]

    @translated
    def heartbeat(self, token: ClaimToken, lease: Duration) -> bool:
        v.check_token(token)
        span = v.check_lease(lease)
        fence = _fence(token)
        if fence is None:
            return False
        found = self._jobs.update_one(fence, {"$set": {"lease_expires_at": to_millis(self._now() + span)}})
        return found.matched_count == 1

    def ack(self, token: ClaimToken, result: Any = None) -> Job | None:
        return self.ack_many([(token, result)])[0]

    @overload
    def ack_many(
        self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[False] = ...
    ) -> list[Job | None]: ...

    @overload
    def ack_many(self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: Literal[True]) -> list[bool]: ...

    @translated
    def ack_many(
        self, items: Iterable[tuple[ClaimToken, Any]], *, landed_only: bool = False
    ) -> list[Job | None] | list[bool]:
        lean = v.check_bool(landed_only, "landed_only")
        checked: list[tuple[ClaimToken, str | None]] = []
        for token, result in v.check_pairs(items):
            checked.append((v.check_token(token), None if result is None else v.encode_json(result, "result")))
        if not checked:
            return []
        now = self._now()
        if len(checked) == 1:
            token, text = checked[0]
            fence = _fence(token)
            if lean:
                return [fence is not None and self._jobs.update_one(fence, _ack_stages(text, now)).matched_count == 1]
            doc = None if fence is None else self._jobs.find_one_and_update(
                fence, _ack_stages(text, now), return_document=ReturnDocument.AFTER
            )
            return [None if doc is None else d.to_job(doc)]
        # A batch: one bulk write, each update fenced on its own token and stamped with its
        # own mark, then one read of the marks tells which landed (two round trips in all).
        # The read shows each job as it stands after the batch; only a job removed in the
        # instant between the two would answer None although its ack landed.
        batch = uuid.uuid4().hex
        ops: list[UpdateOne] = []
        marks: list[str | None] = []
        for index, (token, text) in enumerate(checked):
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
            shape = {"settle_mark": 1} if lean else None  # landed_only: the marks alone, no job
            landed = {doc["settle_mark"]: doc for doc in self._jobs.find({"settle_mark": {"$in": wanted}}, shape)}
        if lean:
            return [m is not None and m in landed for m in marks]
        return [None if m is None or m not in landed else d.to_job(landed[m]) for m in marks]

    @translated
    def nack(
        self, token: ClaimToken, error: BaseException | str, *, retry_at: datetime | None = None,
        dead_letter: bool = True, fail: bool = False, counts_as_attempt: bool = True, park: bool = False,
    ) -> Job | None:
        v.check_token(token)
        type_name, message = v.error_entry(error)
        due = None if retry_at is None else v.check_time(retry_at, "retry_at")
        v.check_nack_flags(dead_letter=dead_letter, fail=fail, counts_as_attempt=counts_as_attempt, park=park)
        fence = _fence(token)
        if fence is None:
            return None
        now = self._now()
        # A held attempt starts first (F04), so the error is recorded against it and a
        # give-back (counts_as_attempt=False) leaves the attempt where it was.
        stages: list[Doc] = [_started(now), d.append_error(type_name, message, now)]
        if not counts_as_attempt:
            stages.append({"$set": {"attempt": {"$subtract": ["$attempt", 1]}}})
        if fail:
            stages += d.finish_stages("failed", now)
        elif park:
            stages += [{"$set": {"state": "suspended"}}, {"$unset": ["lease_expires_at", "worker_id"]}]
        else:
            # The only decision that depends on the document: out of attempts or not.
            final = {"$gte": ["$attempt", "$max_attempts"]}
            stages += [
                {"$set": {
                    "state": {"$cond": [final, "dead" if dead_letter else "failed", SCHEDULED]},
                    "run_at": {"$cond": [final, "$run_at", now if due is None else due]},
                    "finished_at": {"$cond": [final, now, "$$REMOVE"]},
                    "live_key": {"$cond": [final, "$$REMOVE", "$live_key"]},
                }},
                {"$unset": ["lease_expires_at", "worker_id"]},
            ]
        doc = self._jobs.find_one_and_update(fence, stages, return_document=ReturnDocument.AFTER)
        return None if doc is None else d.to_job(doc)

    # -- wake-ups, lifecycle ----------------------------------------------------------------

    @translated
    def subscribe(self, queues: Sequence[str], callback: Callable[[str], None]) -> Subscription | Silent:
        names = frozenset(v.check_claim(queues, "subscriber", 1, 1, ())[0])
        if not callable(callback):
            raise OptionInvalid("callback must be callable", "pass a function taking the queue name")
        if "notify" not in self.capabilities:
            return Silent()
        with self._lock:  # one shared stream per driver (see _watch)
            if self._hub is None:
                hub = Hub(self)
                hub.start()
                self._hub = hub
            return self._hub.add((names, callback))

    def _hub_idle(self, hub: Hub) -> None:
        """The last subscription of ``hub`` closed: stop it (a later subscribe starts another)."""
        with self._lock:  # subscribe adds under this lock: nobody joins while we check
            if self._hub is not hub or not hub.empty:
                return
            self._hub = None
        hub.close()

    def close(self) -> None:
        with self._lock:
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()
        if self._owns_client:
            self._client.close()

    def __repr__(self) -> str:
        return f"MongoDriver(collection={self._jobs.full_name!r}, clock={self.clock!r})"


_BURIAL_TEXT = {"$concat": [
    "lease lapsed on the final attempt (", {"$toString": "$attempt"}, " of ",
    {"$toString": "$max_attempts"}, "); the worker likely crashed",
]}
_HELD = {"$eq": ["$held", True]}
"""True while the job is held: claimed with ``start=False``, its attempt not started (F04)."""


def _burial_state(drop: frozenset[str]) -> Doc:
    """``failed`` for job names in ``drop_exhausted``, else ``dead`` (C08)."""
    return {"$cond": [{"$in": ["$name", {"$literal": sorted(drop)}]}, "failed", "dead"]}


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
        }},
        {"$unset": ["_final", "_held"]},
    ]


def _take_stages(worker: str, now: datetime, expires: datetime, start: bool) -> list[Doc]:
    """Pipeline making a claimable job ``running`` for ``worker`` (C06), its attempt started or held (F04)."""
    took: Doc = {
        "state": RUNNING, "worker_id": {"$literal": worker}, "claim_no": {"$add": ["$claim_no", 1]},
        "lease_expires_at": expires,
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


def _seconds(value: object, name: str) -> float:
    """A positive finite number of seconds (or a timedelta), as seconds."""
    return v.check_duration(value, name, positive=True).total_seconds()


def capabilities_of(hello: Doc) -> frozenset[str]:
    """What a server answering ``hello`` offers the driver (see :attr:`MongoDriver.capabilities`)."""
    wire = hello.get("maxWireVersion", 0)
    wire = wire if isinstance(wire, int) and not isinstance(wire, bool) else 0
    mongos = hello.get("msg") == "isdbgrid"
    replica = bool(hello.get("setName")) and not mongos
    extra = set()
    if (replica or mongos) and wire >= 6:
        extra.add("notify")
    if (replica and wire >= 7) or (mongos and wire >= 8):
        extra.add("transactional_enqueue")
    return frozenset({"shared_store", "ack_landed_only", "deferred_start", *extra})


def _bounded_options(uri: str, call: float, connect: float, pool_max: int = DEFAULT_POOL_MAX) -> dict[str, Any]:
    """The time bounds (F07) and the pool bound a client made from ``uri`` gets, leaving any the URI sets itself.

    ``timeoutMS`` bounds each operation and, under it, the wait for a server too.
    Only the URI's own query is read (an SRV record's TXT options cannot set timeouts).
    """
    query = urlsplit(uri).query.replace(";", "&")
    given = {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
    wanted = {"timeoutMS": call, "connectTimeoutMS": connect}
    options: dict[str, Any] = {
        name: max(1, round(seconds * 1000)) for name, seconds in wanted.items() if name.lower() not in given
    }
    if "maxpoolsize" not in given:
        options["maxPoolSize"] = pool_max
    return options


_OWN_URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "auto_migrate": lambda text: text.lower() in ("1", "true", "yes", "on"),
    "pool_max": int,
}


def _refuse_unknown_options(uri: str) -> None:
    """Refuse a URI option PyMongo does not know (it would only warn, on stderr, and ignore it:
    ``?sslmode=require`` from a PostgreSQL habit would silently leave TLS off)."""
    known = getattr(pymongo.common, "VALIDATORS", None)
    if not isinstance(known, Mapping):
        return
    try:
        query = urlsplit(uri).query.replace(";", "&")
    except ValueError:
        return  # the client's own parse refuses it, coded, below
    unknown = [name for name, _ in parse_qsl(query, keep_blank_values=True) if name.lower() not in known]
    if unknown:
        names = ", ".join(repr(redact(name))[:40] for name in unknown[:5])
        raise UrlInvalid(
            f"MongoDB URI option {names} is not one PyMongo knows",
            "use MongoDB connection string options (tls=true, authSource=..., replicaSet=...; see the "
            "PyMongo documentation) and jobcore's own auto_migrate",
        )


def _own_options(url: str) -> tuple[str, dict[str, Any]]:
    """``url`` without jobcore's own query options, and those options parsed."""
    parts = urlsplit(url)
    if not parts.query:
        return url, {}
    own: dict[str, Any] = {}
    rest = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OWN_URL_OPTIONS:
            try:
                own[name] = _OWN_URL_OPTIONS[name](value)
            except ValueError:
                raise UrlInvalid(f"URL option {name}={value!r:.40} is not valid", "pass a whole number") from None
        else:
            rest.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(rest))), own


def _shell(value: Any) -> str:
    """``value`` as mongosh source (keys bare where they can be, strings quoted)."""
    if isinstance(value, dict):
        keys = [str(k) if str(k).isidentifier() else repr(str(k)) for k in value]
        return "{" + ", ".join(f"{k}: {_shell(item)}" for k, item in zip(keys, value.values(), strict=True)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_shell(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)

"""The MongoDB driver's store plumbing: client, capabilities, schema, enqueue sequence, clock readings, sessions.

Written once for both flavours: the async module is the source, and ``tools/unasync.py``
generates the sync one from it, as it does the four backends. Everything the driver
decides or sends outside the backends lives here: the constructor's checks and client
options, capabilities from ``hello``, the schema check and ``migrate``, the enqueue
sequence, the store's clock readings and the transaction handle check. Only the
change-stream hub (and the lock guarding it) differs per flavour.
"""

from __future__ import annotations

import asyncio  # sync: import contextlib
import contextlib  # sync: import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import pymongo
import pymongo.common
from bson.codec_options import CodecOptions
from pymongo import AsyncMongoClient, ReadPreference, ReturnDocument
from pymongo import errors as pe
from pymongo.asynchronous.client_session import (  # sync: from pymongo.client_session import ClientSession
    AsyncClientSession,  # sync: drop
)  # sync: drop
from pymongo.asynchronous.collection import AsyncCollection  # sync: from pymongo.collection import Collection
from pymongo.uri_parser import parse_uri

from jobcore import validate as v
from jobcore.clock import Clock, to_millis, utc  # sync: from jobcore.clock import Clock, StoreClock, to_millis, utc
from jobcore.door import AsyncFrontDoor, AsyncIntrospectDoor, AsyncLeasesDoor, AsyncSchedulesDoor
from jobcore.driver import Duration
from jobcore.errors import BackendFailure, NotSupported, OptionInvalid, SchemaOutdated, UrlInvalid, redact
from jobcore.records import Job, Migration

from . import _docs as d
from ._errors import DATABASE_FIX, Bounds, database_problem, translate, translated_async
from ._introspect_async import AsyncMongoIntrospect
from ._jobs_async import AsyncMongoJobs
from ._leases_async import AsyncMongoLeases
from ._schedules_async import AsyncMongoSchedules
from ._unblocking import AsyncHub, AsyncStoreClock  # sync: from ._watch import Hub

__all__ = [
    "CLOCK_READ_BOUND", "DEFAULT_CALL_TIMEOUT", "DEFAULT_CONNECT_TIMEOUT", "DEFAULT_POOL_MAX", "AsyncMongoStore",
    "capabilities_of",
]


Doc = dict[str, Any]
_CODEC: CodecOptions[Doc] = CodecOptions(tz_aware=True, tzinfo=utc)
DEFAULT_CALL_TIMEOUT = 10.0
"""Seconds one driver call may take by default (F07)."""
DEFAULT_POOL_MAX = 10
"""Connections at most per server of a client the driver makes (PyMongo's own default is 100)."""
DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to open one connection, by default (F07)."""
CLOCK_READ_BOUND = 2.0
"""Seconds one reading of the server's clock may take (F01, F07)."""
_BASE_CAPABILITIES = frozenset({"shared_store", "ack_landed_only", "deferred_start", "heartbeat_many"})
"""What every server offers the driver, before ``hello`` tells more (see :func:`capabilities_of`)."""

_S = TypeVar("_S", bound="AsyncMongoStore")
_A_CLIENT = "an AsyncMongoClient"  # sync: _A_CLIENT = "a MongoClient"
_A_SESSION = "an AsyncClientSession"  # sync: _A_SESSION = "a ClientSession"


class AsyncMongoStore(AsyncFrontDoor):
    """Everything of :class:`~jobcore.drivers.mongo.AsyncMongoDriver` but stopping an idle change-stream hub.

    The constructor does no I/O: the client connects on first use.
    """

    def __init__(
        self, uri_or_client: str | AsyncMongoClient[Doc], *, database: str = "jobcore",
        collection_prefix: str = "jobcore_", clock: Clock | None = None,
        default_max_attempts: int = v.DEFAULT_MAX_ATTEMPTS, call_timeout: Duration = DEFAULT_CALL_TIMEOUT,
        connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT, auto_migrate: bool = False,
        pool_max: int = DEFAULT_POOL_MAX,
    ) -> None:
        self.auto_migrate = bool(auto_migrate)
        most = v.check_int(pool_max, "pool_max", 1, 1000)
        call_bound = _seconds(call_timeout, "call_timeout")
        connect_bound = _seconds(connect_timeout, "connect_timeout")
        # Every argument is checked before a client is made, so a refusal leaves no client behind.
        v.check_name(database, "database")
        problem = database_problem(database)
        if problem:
            raise OptionInvalid(f"database={database!r:.70} is not a MongoDB database name ({problem})", DATABASE_FIX)
        if not isinstance(collection_prefix, str) or "$" in collection_prefix or "\x00" in collection_prefix:
            raise OptionInvalid(f"collection_prefix={collection_prefix!r:.60} is not usable", "pass e.g. 'jobcore_'")
        v.check_int(default_max_attempts, "default_max_attempts", 1, v.MAX_ATTEMPTS)
        v.check_clock(clock)
        if isinstance(uri_or_client, str):
            _refuse_unknown_options(uri_or_client)
            if _unacknowledged(uri_or_client):
                raise UrlInvalid(f"{repr(redact(uri_or_client))[:80]} asks for w=0: {_UNACKNOWLEDGED}", _W_FIX)
            try:
                bounded = _bounded_options(uri_or_client, call_bound, connect_bound, most)
                self._client: AsyncMongoClient[Doc] = AsyncMongoClient(
                    uri_or_client, tz_aware=True, tzinfo=utc, **bounded,
                )
            except (pe.ConfigurationError, pe.InvalidURI, ValueError, TypeError) as exc:
                raise UrlInvalid(
                    f"{repr(redact(uri_or_client))[:80]} is not a MongoDB URI pymongo accepts ({redact(exc)})"
                ) from exc
            self._owns_client = True
            self._uri: str | None = uri_or_client
        elif isinstance(uri_or_client, AsyncMongoClient):
            if not uri_or_client.write_concern.acknowledged:
                raise OptionInvalid(f"the client's write concern is w=0: {_UNACKNOWLEDGED}", _W_FIX)
            self._client, self._owns_client, self._uri = uri_or_client, False, None
        else:
            raise OptionInvalid(
                f"AsyncMongoDriver wants a mongodb:// URI or {_A_CLIENT}, got {type(uri_or_client).__name__}",
                "pass AsyncMongoDriver('mongodb://host/db') or AsyncMongoDriver(AsyncMongoClient(...))",
            )
        options = self._client.options
        own = options.timeout  # the client's timeoutMS in seconds; 0 switches the bound off
        bound = call_bound if own is None else (float(own) or None)
        self._bounds = Bounds(
            call=bound, select=bound or float(options.server_selection_timeout),
            connect=float(options.pool_options.connect_timeout or 0),
        )
        clock_bound = min(bound or CLOCK_READ_BOUND, CLOCK_READ_BOUND)
        self._clock_bounds = attrs.evolve(self._bounds, call=clock_bound, select=clock_bound, fixed=True)
        """A clock reading's bounds: its own deadline, which its errors report (not the call's)."""
        if clock is None:
            clock = AsyncStoreClock()  # sync: clock = StoreClock(self._store_time)
        self.clock: Clock = clock
        # Reads from the primary whatever the client's readPreference: a claim, an ack and a
        # rescue decide on what they read, and a secondary's copy may be behind.
        db = self._client.get_database(database, codec_options=_CODEC, read_preference=ReadPreference.PRIMARY)
        self._jobs: AsyncCollection[Doc] = db[f"{collection_prefix}jobs"]
        self._meta: AsyncCollection[Doc] = db[f"{collection_prefix}meta"]
        self._capabilities: frozenset[str] | None = None
        self._ready = False
        self._lock = asyncio.Lock()  # sync: self._lock = threading.Lock()
        self._hub: AsyncHub | None = None
        jobs = AsyncMongoJobs(self)
        super().__init__(jobs, default_max_attempts=default_max_attempts)
        self._bury = jobs._bury  # the introspector's rescue buries as a claim does
        self._family = jobs.family  # rules D: the introspector's verbs settle children as settles do
        self.leases = AsyncLeasesDoor(AsyncMongoLeases(self, db[f"{collection_prefix}leases"]))
        self.introspect = AsyncIntrospectDoor(AsyncMongoIntrospect(self, self._jobs))
        self.schedules = AsyncSchedulesDoor(
            AsyncMongoSchedules(self, db[f"{collection_prefix}schedules"]),
            default_max_attempts=self._default_max_attempts,
        )

    @classmethod
    def from_url(cls: type[_S], url: str, **options: Any) -> _S:
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
            problem = database_problem(parsed["database"])
            if problem:
                raise UrlInvalid(
                    f"the URL's database {parsed['database']!r:.70} is not a MongoDB database name ({problem})",
                    DATABASE_FIX,
                )
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

    async def _server_capabilities(self) -> frozenset[str]:
        """``shared_store``, ``ack_landed_only`` and ``deferred_start``; plus ``notify`` and
        ``transactional_enqueue`` on a replica set or mongos (docs/drivers/mongo.md, "At scale").

        Decided from ``hello`` as real MongoDB would, never by trying: change streams exist
        on replica-set members (``setName``) and mongos (``msg: isdbgrid``) from MongoDB 3.6
        (``maxWireVersion`` 6); multi-document transactions on replica sets from 4.0 (wire 7)
        and through mongos from 4.2 (wire 8); a standalone server has neither, whatever a
        lenient test server allows.
        """
        if self._capabilities is None:
            self._capabilities = capabilities_of(await self._hello())
        return self._capabilities

    def _known_capabilities(self) -> frozenset[str]:
        """The capabilities as far as the server has told them: before its first ``hello``
        answer (the async flavour reads it on first use, never in a property), only those every
        server offers."""
        return _BASE_CAPABILITIES if self._capabilities is None else self._capabilities

    async def _check_unsharded(self) -> None:
        """Through mongos, refuse a sharded jobs collection (``JC_NOT_SUPPORTED``): a claim is a
        ``findAndModify`` by queue and state, and the idempotency keys' unique index cannot
        hold across shards unless prefixed by the shard key (docs/drivers/mongo.md, "At scale")."""
        hello = await self._hello()
        self._capabilities = self._capabilities or capabilities_of(hello)  # sync: drop
        await self._now()  # sync: drop
        if hello.get("msg") != "isdbgrid":
            return
        try:
            stats = await self._jobs.database.command("collStats", self._jobs.name)
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

    @translated_async
    async def _hello(self) -> Doc:
        return await self._client.admin.command("hello", codec_options=_CODEC)

    @translated_async
    async def _store_time(self) -> datetime:
        """The server's wall time (``hello``'s ``localTime``, whole milliseconds): what the
        default :class:`~jobcore.clock.StoreClock` carries forward (F01).

        Bounded tighter than a call: a reading that slow is no use (its error is half
        its round trip), and while the server is away the clock keeps its last reading,
        so a re-read due during an outage should cost little of a call's time.
        """
        bounds = self._clock_bounds
        try:
            with pymongo.timeout(bounds.call):
                found = (await self._client.admin.command("hello", codec_options=_CODEC)).get("localTime")
        except pe.PyMongoError as exc:  # told with the reading's own bound, the one it waited
            raise translate(exc, "store time", bounds) from exc
        if not isinstance(found, datetime):
            raise BackendFailure(
                "the MongoDB server's hello answer has no localTime, so its clock cannot be read",
                "connect to a mongod or mongos (they answer localTime), or pass clock= explicitly",
            )
        return found

    @translated_async
    async def _migrate(self, *, dry_run: bool) -> Migration:
        """Create and check the indexes and record the schema version; idempotent, safe to race.

        ``dry_run=True`` only reads: the answer's ``statements`` are the ``mongosh``
        commands a real run would send (``jobcore migrate --dry-run``).
        """
        found = await self._version()
        before = None if found is None else found[0]
        if before is not None and before > d.SCHEMA_VERSION:
            return Migration(
                before=before, after=before, latest=d.SCHEMA_VERSION, applied=False, language="mongosh"
            )
        missing = await self._missing_indexes()
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
        await self._check_unsharded()
        try:
            await self._jobs.create_indexes(d.INDEXES)
        except pe.OperationFailure as exc:
            if exc.code in (85, 86):  # IndexOptionsConflict / IndexKeySpecsConflict
                raise SchemaOutdated(
                    f"an index of {self._jobs.full_name} differs from this jobcore's ({exc.details})",
                    "drop the conflicting jc_* index, then run `jobcore migrate` again",
                ) from exc
            raise
        if await self._missing_indexes():
            raise SchemaOutdated(f"an index of {self._jobs.full_name} is missing or differs after creating it")
        # The counter exists before the first enqueue, so enqueues never race to upsert it.
        with contextlib.suppress(pe.DuplicateKeyError):
            await self._meta.update_one({"_id": "seq"}, {"$setOnInsert": {"value": 0}}, upsert=True)
        # Only ever moves forward: a store a newer jobcore upgraded keeps its record. A
        # DuplicateKeyError means a concurrent migrate inserted the record first.
        with contextlib.suppress(pe.DuplicateKeyError):
            await self._meta.update_one(
                {"_id": "schema", "version": {"$not": {"$gte": d.SCHEMA_VERSION}}},
                {"$set": {"version": d.SCHEMA_VERSION, "compatible_from": d.COMPATIBLE_FROM}}, upsert=True,
            )
        self._ready = True
        return Migration(
            before=before, after=after, latest=d.SCHEMA_VERSION, statements=statements, language="mongosh"
        )

    async def _version(self) -> tuple[int, int] | None:
        """The store's schema version and the oldest version whose code runs against it, or
        None when jobcore never set this database up."""
        found = await self._meta.find_one({"_id": "schema"})
        if found is None:
            return None
        version = int(found.get("version", 0))
        return version, int(found.get("compatible_from", version))

    async def _missing_indexes(self) -> list[pymongo.IndexModel]:
        """This jobcore's indexes the jobs collection lacks (or holds with other keys)."""
        have = await self._jobs.index_information()
        out = []
        for model in d.INDEXES:
            spec = model.document
            found = have.get(spec["name"])
            if found is None or [(k, int(o)) for k, o in found["key"]] != list(spec["key"].items()):
                out.append(model)
        return out

    async def _ensure(self) -> None:
        """Refuse a store this jobcore cannot use: not set up (unless ``auto_migrate``), older,
        or newer than this jobcore's code can run against."""
        if self._ready:
            return
        found = await self._version()
        if found is None or found[0] < d.SCHEMA_VERSION:
            if not self.auto_migrate:
                state = "is not set up" if found is None else f"is at schema {found[0]}"
                raise SchemaOutdated(
                    f"jobcore's collections in {self._jobs.database.name} {state}; this jobcore needs schema"
                    f" {d.SCHEMA_VERSION}"
                )
            await self.migrate()
        elif found[1] > d.SCHEMA_VERSION:
            raise SchemaOutdated(
                f"{self._jobs.database.name} was set up by a newer jobcore (schema {found[0]}, which needs"
                f" schema {found[1]} or later; this jobcore has {d.SCHEMA_VERSION})",
                "upgrade jobcore in this process",
            )
        await self._check_unsharded()
        self._ready = True

    async def _now(self) -> datetime:
        if isinstance(self.clock, AsyncStoreClock):  # sync: drop
            await self.clock.refresh(self._store_time)  # sync: drop
        return to_millis(self.clock.now())

    # -- enqueue ---------------------------------------------------------------------------

    async def _next_seqs(self, count: int) -> int:
        """Reserve ``count`` sequence numbers in one ``$inc``; answers the first.

        Outside any caller transaction on purpose: the counter would otherwise serialize
        every enqueueing transaction. An aborted transaction leaves a gap, which ids and
        cursors tolerate.
        """
        for _ in range(3):
            try:
                found = await self._meta.find_one_and_update(
                    {"_id": "seq"}, {"$inc": {"value": count}}, upsert=True, return_document=ReturnDocument.AFTER,
                )
                if found is not None:
                    return int(found["value"]) - count + 1
            except pe.DuplicateKeyError:  # two first-ever upserts raced; the loser retries
                continue
        raise pe.OperationFailure("could not reserve enqueue sequence numbers")

    # -- the public extra: enqueue inside the caller's transaction (transactional_enqueue) --

    async def enqueue(
        self, name: str, payload: Any = None, *, queue: str = "default", priority: int = 0,
        run_at: datetime | None = None, delay: Duration | None = None, max_attempts: int | None = None,
        key: str | None = None, depends_on: Iterable[str | Job] | None = None,
        on_parent_failure: str = "cancel", session: AsyncClientSession | None = None,
    ) -> Job:
        """See :meth:`jobcore.driver.JobDriver.enqueue`; ``session`` joins the caller's transaction."""
        if session is None:
            return await super().enqueue(
                name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
                max_attempts=max_attempts, key=key, depends_on=depends_on, on_parent_failure=on_parent_failure,
            )
        if isinstance(session, AsyncClientSession) and session.in_transaction:  # sync: drop
            await self._server_capabilities()  # sync: drop
        return await self._enqueue_in(
            session, "session", name, payload, queue=queue, priority=priority, run_at=run_at, delay=delay,
            max_attempts=max_attempts, key=key, depends_on=depends_on, on_parent_failure=on_parent_failure,
        )

    async def enqueue_many(self, specs: Iterable[Any], *, session: AsyncClientSession | None = None) -> list[Job]:
        """See :meth:`jobcore.driver.JobDriver.enqueue_many`; ``session`` joins the caller's transaction."""
        if isinstance(session, AsyncClientSession) and session.in_transaction:  # sync: drop
            await self._server_capabilities()  # sync: drop
        return await self._enqueue_many_in(session, "session", specs)

    def _joined(self, connection: object, keyword: str) -> AsyncClientSession | None:
        """A session of this driver's client; inside a transaction only with ``transactional_enqueue``
        (a session outside one, for causal consistency, works on any server)."""
        if connection is None:
            return None
        if not isinstance(connection, AsyncClientSession) or connection.client is not self._client:
            raise OptionInvalid(
                f"session must be {_A_SESSION} started from this driver's AsyncMongoClient",
                "start it with client.start_session() on the client the driver was built with",
            )
        if connection.in_transaction and "transactional_enqueue" not in self.capabilities:
            raise NotSupported(
                "this MongoDB server is standalone; it has no multi-document transactions",
                "run MongoDB as a replica set (a single-node one will do) to enqueue inside a transaction",
            )
        return connection

    def _hub_idle(self, hub: AsyncHub) -> None:
        """The last subscription of ``hub`` closed: stop it (each flavour's driver says how)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"AsyncMongoDriver(collection={self._jobs.full_name!r}, clock={self.clock!r})"



def _seconds(value: object, name: str) -> float:
    """A positive finite number of seconds (or a timedelta), as seconds."""
    return v.check_duration(value, name, positive=True).total_seconds()


def capabilities_of(hello: Doc) -> frozenset[str]:
    """What a server answering ``hello`` offers the driver (see :attr:`MongoDriver.capabilities`)."""
    wire = hello.get("maxWireVersion", 0)
    wire = wire if isinstance(wire, int) and not isinstance(wire, bool) else 0
    mongos = hello.get("msg") == "isdbgrid"
    replica = bool(hello.get("setName")) and not mongos
    extra: set[str] = set()
    if (replica or mongos) and wire >= 6:
        extra.update(("notify", "finish_notify"))
    if (replica and wire >= 7) or (mongos and wire >= 8):
        extra.add("transactional_enqueue")
    return frozenset({"shared_store", "ack_landed_only", "deferred_start", "dependencies", "heartbeat_many", *extra})


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


_UNACKNOWLEDGED = (
    "unacknowledged writes cannot keep jobcore's rules (a refused duplicate key, an ack that did not land and"
    " a claim's answer would all go unseen)"
)
_W_FIX = "drop w=0 (the default w=1, or w=majority on a replica set)"


def _unacknowledged(uri: str) -> bool:
    """Whether ``uri`` asks for unacknowledged writes (``w=0``), read without resolving anything."""
    try:
        query = urlsplit(uri).query.replace(";", "&")
    except ValueError:
        return False  # the client's own parse refuses it, coded
    return any(name.lower() == "w" and value.strip() == "0" for name, value in parse_qsl(query))


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

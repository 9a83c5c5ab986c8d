"""jobcore against every Python PostgreSQL queue, and against the server's own limit (a script, not a test).

    .venv/bin/python bench/peers.py [--jobs N] [--runs R] [--quick] [--no-write] [--systems a,b]
    .venv/bin/python bench/peers.py --async-producers [--runs R]   # the async producer rows only

The peers: Procrastinate, PGQueuer, oban-py, SAQ (its PostgreSQL queue) and Chancy. The
"limit" is no queue: the same drains done by a bare loop of batch-claim and batch-ack SQL on
jobcore's schema with the same fencing (:func:`limit_worker`), so the table shows jobcore
as a share of what the server allows on this machine. "driver" is jobcore's own driver in
such a loop, no worker around it (:func:`driver_loop`); "bare" is that loop with the handler
called and the completion line logged per job, and nothing else (:func:`bare_worker`). Between
them, where the share the limit leaves goes: jobcore's statements and records, the per-job
call and log line every worker has, and the rest of jobcore's worker.

What it does, in one run:

1. starts its own throwaway PostgreSQL from the local binaries (``fixtures/postgres.py``'s
   ``LocalServer``, with ``pg_stat_statements`` preloaded), one database per system;
2. installs the peers at the pinned versions (:data:`PEER_PINS`) into a separate virtualenv
   (``~/.cache/jobcore-bench/peers-venv``, or ``$JOBCORE_BENCH_VENV``), and oban-py, which
   needs Python 3.12 or newer, into another (:data:`OBAN_PINS`,
   ``~/.cache/jobcore-bench/oban-venv``, built from ``--oban-python`` or the first Python
   3.12+ found under pyenv or on PATH), never into the project's; peer workers and peer
   enqueuers run from those, jobcore's and the limit's from this one;
3. for each of ``--runs`` rounds, phase by phase, and for each system in an order that
   rotates every round:

   * async producers (unless ``--no-async``): jobcore's ``AsyncPostgresDriver``, Procrastinate
     and PGQueuer enqueueing from one event loop, one at a time and in batches of 100, by 1
     producer coroutine and by 50 gathered ones sharing the count (:func:`_async_producers`);
     jobs/s and the producer process's CPU per job,
   * enqueue one at a time (each system's own enqueue call, one transaction per job),
   * enqueue in batches of 1,000 (this fills the queue for the drain that follows),
   * drain ``--jobs`` already-queued no-op jobs with 1, then 4, worker processes run by each
     system's own CLI with its defaults; timing starts once every worker is connected and
     blocked on the queue table (the harness holds an ``ACCESS EXCLUSIVE`` lock until all of
     them wait on it) and stops when the system's own "done" count reaches N; afterwards
     every job is checked to have ended done,
   * enqueue-to-start latency: one idle worker waits, jobs are enqueued one by one about
     25 ms apart, each carrying its enqueue wall time, and the handler records its start;
   * client CPU (the worker processes and their children, from ``/proc``), server CPU (the
     postgres processes, the harness's own backends left out) and statements per job
     (``pg_stat_statements``, the workers' role only) over each drain;

4. prints one table (medians over the rounds; latency percentiles over all samples pooled)
   with jobcore's ratio to the fastest peer on each row and its share of the limit, the
   same ratios run by run, PASS/FAIL for the goals, and writes it into
   ``docs/benchmarks.md`` between ``<!-- peers:start -->`` and ``<!-- peers:end -->`` (not
   with ``--quick`` or ``--no-write``).

The module doubles as the peers' application module (``procrastinate --app
peers.procrastinate_app``, ``pgq run peers:pgqueuer_factory``, oban-py's worker class
``peers.ObanNoop``, ``saq peers.saq_settings``, ``chancy --app peers.chancy_app``,
``jobcore worker bench/peers.py``), as the enqueue agent each system's interpreter runs
(``--agent SYSTEM ACTION``) and as the limit's, the driver loop's and the bare worker loop's
workers (``--limit-worker URL``, ``--driver-loop URL``, ``--bare-worker URL``), so its top
level imports the standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DOC = ROOT / "docs" / "benchmarks.md"
DOC_START, DOC_END = "<!-- peers:start -->", "<!-- peers:end -->"
ASYNC_START, ASYNC_END = "<!-- peers-async:start -->", "<!-- peers-async:end -->"

PEER_PINS = (
    "procrastinate==3.10.0",
    "pgqueuer==1.6.0",
    "asyncpg==0.32.0",
    "uvloop==0.23.0",
    "psycopg[binary]==3.3.9",  # the same C build of psycopg jobcore runs with
    "psycopg-pool==3.3.3",
    "typer==0.28.0",  # pgqueuer 1.6.0's `pgq run` fails under typer 0.29 (its --log-level arrives as a str)
    "saq[postgres]==0.26.4",
    "chancy[cli]==0.26.0",  # the cli extra brings click, for the `chancy` command
)
"""What the peers' virtualenv holds: the peers and the drivers their docs recommend."""

OBAN_PINS = ("oban==0.7.0", "psycopg[binary]==3.3.9", "psycopg-pool==3.3.3", "uvloop==0.23.0")
"""oban-py needs Python 3.12 or newer: its own virtualenv (``--oban-venv``), built from
``--oban-python`` (default: the first python3.12 or python3.13 found)."""

SYSTEMS = ("jobcore", "limit", "driver", "bare", "procrastinate", "pgqueuer", "oban", "saq", "chancy")
PEERS = ("procrastinate", "pgqueuer", "oban", "saq", "chancy")
LIMIT = "limit"
"""Not a queue: a bare loop of batch-claim and batch-ack SQL on jobcore's schema, with the
same fencing (:func:`limit_worker`), drains only. What the server allows on this machine."""
LIMIT_BATCH = 100
DRIVER = "driver"
"""Not a queue either: jobcore's own driver in the limit's loop (:func:`driver_loop`), drains only.
Its share of the limit is what jobcore's statements and records leave; the rest of the gap
to jobcore's drain is its worker's (handler threads, leases, logs, events)."""
BARE = "bare"
"""Not a queue either: the driver loop plus the two things every worker does per job, and
nothing else (:func:`bare_worker`): the handler called and the completion line logged as
``jobcore worker`` logs it. No attempts, slots, runner threads, leases, retries or F rules:
its share of the limit is a ceiling for any worker on jobcore's driver that logs a line per job."""
DRAIN_ONLY = (LIMIT, DRIVER, BARE)
"""Systems measured on the drains alone; their queues are filled by jobcore's ``enqueue_many``."""
SLOW = ("procrastinate", "saq", "chancy")
"""Peers whose drains run one to two orders of magnitude below jobcore's (20 to 100 times
slower on this machine): they drain ``--slow-jobs`` jobs (default 2,000) instead of
``--jobs``, so a full run fits in half an hour. Timing starts with every worker already
waiting, so a drain's rate does not depend on N."""
BASE = "jobcore_base"
"""With ``--baseline PYTHON``: jobcore as that interpreter has it installed (an older tree),
measured beside this one in the same run, so a change's cost shows as a ratio."""
JOBCORES = ("jobcore", BASE)
JOB_NAME = "noop"  # the job/task/entrypoint name in every system
BATCH = 1000  # jobs per batch enqueue call
BENCH_ROLE = "bench"  # workers and enqueuers log in as this role; the harness as the cluster owner
DSN_ENV = "JC_BENCH_DSN"
LATENCY_ENV = "JC_BENCH_LATENCY_FILE"
ROLE_ENV = "JC_BENCH_ROLE"
THREADS_ENV = "JC_BENCH_ASYNC_THREADS"
"""``1``: jobcore's async producer rows run the sync driver in threads (the stand-in), to compare."""

# Per system: the queue table the barrier locks, the count of finished jobs, the state tally
# used to verify every job ended done, and how to empty everything between phases.
QUEUE_TABLE = {
    "jobcore": "jobcore.jobs",
    "procrastinate": "procrastinate_jobs",
    "pgqueuer": "pgqueuer",
    "oban": "oban_jobs",
    "saq": "saq_jobs",
    "chancy": "chancy_jobs",
}
DONE_SQL = {
    "jobcore": "SELECT count(*) FROM jobcore.jobs WHERE state = 'done'",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
    "pgqueuer": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",  # finished jobs leave the queue
    "oban": "SELECT count(*) FROM oban_jobs WHERE state = 'completed'",
    "saq": "SELECT count(*) FROM saq_jobs WHERE status = 'complete'",
    "chancy": "SELECT count(*) FROM chancy_jobs WHERE state = 'succeeded'",
}
TALLY_SQL = {
    "jobcore": "SELECT state, count(*) FROM jobcore.jobs GROUP BY 1",
    "procrastinate": "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1",
    "pgqueuer": "SELECT 'queue:' || status::text, count(*) FROM pgqueuer GROUP BY 1"
    " UNION ALL SELECT 'log:' || status::text, count(*) FROM pgqueuer_log GROUP BY 1",
    "oban": "SELECT state::text, count(*) FROM oban_jobs GROUP BY 1",
    "saq": "SELECT status, count(*) FROM saq_jobs GROUP BY 1",
    "chancy": "SELECT state, count(*) FROM chancy_jobs GROUP BY 1",
}
DONE_KEY = {
    "jobcore": "done", "procrastinate": "succeeded", "pgqueuer": "log:successful", "oban": "completed",
    "saq": "complete", "chancy": "succeeded",
}
for _table in (QUEUE_TABLE, DONE_SQL, TALLY_SQL, DONE_KEY):
    _table[BASE] = _table["jobcore"]
    _table[LIMIT] = _table["jobcore"]
    _table[DRIVER] = _table["jobcore"]
    _table[BARE] = _table["jobcore"]
QUEUED_SQL = {system: f"SELECT count(*) FROM {table}" for system, table in QUEUE_TABLE.items()}
EMPTY_SQL = {
    "jobcore": "TRUNCATE jobcore.jobs, jobcore.leases RESTART IDENTITY",
    BASE: "TRUNCATE jobcore.jobs, jobcore.leases RESTART IDENTITY",
    "procrastinate": "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers,"
    " procrastinate_workers RESTART IDENTITY CASCADE",
    "pgqueuer": "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY",
    "oban": "TRUNCATE oban_jobs RESTART IDENTITY",
    "saq": "TRUNCATE saq_jobs, saq_stats",
    "chancy": "TRUNCATE chancy_jobs CASCADE",
    LIMIT: "TRUNCATE jobcore.jobs, jobcore.leases RESTART IDENTITY",
    DRIVER: "TRUNCATE jobcore.jobs, jobcore.leases RESTART IDENTITY",
    BARE: "TRUNCATE jobcore.jobs, jobcore.leases RESTART IDENTITY",
}


# -- the handlers and applications (imported by each system's worker) ------------------------


def _record(sent: Any) -> None:
    """Latency phase only: append "enqueue wall time, start wall time" for this job.

    A drain's jobs carry no send time: they return before the environment lookup, which
    cost more than the rest of a no-op handler (PGQueuer's handler skips this call for them).
    """
    if sent is None:
        return
    path = os.environ.get(LATENCY_ENV)
    if path:
        started = time.time()
        with open(path, "a") as out:
            out.write(f"{sent!r} {started!r}\n")


def _jobcore_noop(payload: Any) -> None:
    _record(payload.get("t") if isinstance(payload, dict) else None)


def _jobcore_handle() -> Any:
    from jobcore import job  # noqa: PLC0415 - only in jobcore's interpreter
    from jobcore.registry import default_registry  # noqa: PLC0415

    if JOB_NAME in default_registry:
        return default_registry.get(JOB_NAME)
    return job(name=JOB_NAME)(_jobcore_noop)


def _procrastinate_app() -> Any:
    import procrastinate  # noqa: PLC0415 - only in the peers' interpreter

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ[DSN_ENV]))

    @app.task(name=JOB_NAME)
    async def noop(n: int | None = None, t: float | None = None) -> None:
        _record(t)

    return app


@contextlib.asynccontextmanager
async def pgqueuer_factory() -> AsyncIterator[Any]:
    """``pgq run peers:pgqueuer_factory``: the consumer as PGQueuer's docs set it up (asyncpg)."""
    import asyncpg  # noqa: PLC0415 - only in the peers' interpreter
    from pgqueuer import PgQueuer  # noqa: PLC0415
    from pgqueuer.db import AsyncpgDriver  # noqa: PLC0415

    connection = await asyncpg.connect(os.environ[DSN_ENV])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint(JOB_NAME)
    async def noop(job: Any) -> None:
        if job.payload and job.payload.startswith(b'{"t"'):
            _record(json.loads(job.payload)["t"])

    try:
        yield pgq
    finally:
        await connection.close()


def _oban_worker() -> Any:
    """``peers.ObanNoop``: the worker class oban-py resolves from each job's ``worker`` column."""
    from oban import worker  # noqa: PLC0415 - only in oban's interpreter

    class ObanNoop:
        async def process(self, job: Any) -> None:
            _record(job.args.get("t"))

    ObanNoop.__module__, ObanNoop.__qualname__ = "peers", "ObanNoop"
    return worker(queue="default")(ObanNoop)


def _saq_settings() -> dict[str, Any]:
    """``saq peers.saq_settings``: SAQ's PostgreSQL queue and the no-op function, SAQ's defaults."""
    from saq import Queue  # noqa: PLC0415 - only in the peers' interpreter

    async def noop(ctx: Any, *, n: int | None = None, t: float | None = None) -> None:
        _record(t)

    noop.__qualname__ = noop.__name__ = JOB_NAME
    return {"queue": Queue.from_url(os.environ[DSN_ENV]), "functions": [noop]}


def _chancy_app() -> Any:
    from chancy import Chancy  # noqa: PLC0415 - only in the peers' interpreter

    return Chancy(os.environ[DSN_ENV])


def _chancy_noop() -> Any:
    """``peers.chancy_noop``: a plain function, as Chancy's default (process) executor runs them."""
    from chancy import job  # noqa: PLC0415

    def chancy_noop(n: int | None = None, t: float | None = None) -> None:
        _record(t)

    chancy_noop.__module__, chancy_noop.__qualname__ = "peers", "chancy_noop"
    return job(queue="default")(chancy_noop)


_LAZY: dict[str, Callable[[], Any]] = {
    "procrastinate_app": _procrastinate_app,
    "ObanNoop": _oban_worker,
    "saq_settings": _saq_settings,
    "chancy_app": _chancy_app,
    "chancy_noop": _chancy_noop,
}


def __getattr__(name: str) -> Any:
    """Each peer's CLI imports its application object from this module; built on first access."""
    if name in _LAZY:
        value = _LAZY[name]()
        globals()[name] = value
        return value
    raise AttributeError(name)


# -- the enqueue agent (runs in each system's interpreter, prints one JSON line) ---------------


def _agent(system: str, action: str, count: int, extra: float) -> dict[str, Any]:
    if action.startswith("async-"):  # async-single-P / async-batch-P: P concurrent producers on one loop
        _, kind, producers = action.split("-")
        async_runner = {"jobcore": _async_jobcore, BASE: _async_jobcore, "procrastinate": _async_procrastinate,
                        "pgqueuer": _async_pgqueuer}[system]
        return asyncio.run(async_runner(kind, int(producers), count, int(extra)))
    if system in (*JOBCORES, *DRAIN_ONLY):
        return _agent_jobcore(action, count, extra)
    runner = {
        "procrastinate": _agent_procrastinate,
        "pgqueuer": _agent_pgqueuer,
        "oban": _agent_oban,
        "saq": _agent_saq,
        "chancy": _agent_chancy,
    }[system]
    return asyncio.run(runner(action, count, extra))


async def _enqueue_phase(
    action: str, count: int, extra: float, one: Callable[..., Any], many: Callable[[range], Any]
) -> dict[str, Any]:
    """The three enqueue actions, given a system's "enqueue one" (``await one(n=..)`` or
    ``await one(t=..)``) and "enqueue this range as one batch" calls."""
    if action == "single":
        for i in range(20):  # warm-up: connections, prepared plans
            await one(n=-i)
        started = time.perf_counter()
        for i in range(count):
            await one(n=i)
    elif action == "batch":
        size = int(extra)
        started = time.perf_counter()
        for first in range(0, count, size):
            await many(range(first, min(count, first + size)))
    else:
        for i in range(LATENCY_WARMUP):
            await one(n=-i)
        started = time.perf_counter()
        for i in range(count):
            await asyncio.sleep(_pace(i, extra))
            await one(t=time.time())
    return {"seconds": time.perf_counter() - started}


async def _agent_oban(action: str, count: int, extra: float) -> dict[str, Any]:
    from oban import Oban  # noqa: PLC0415 - only in oban's interpreter
    from oban._config import Config  # noqa: PLC0415 - what `oban start` builds its pool with

    pool = await Config(dsn=os.environ[DSN_ENV]).create_pool()
    oban = Oban(pool=pool)  # no queues: an enqueue-only client, as oban-py's docs set one up
    worker = _oban_worker()
    try:
        async def one(**args: Any) -> None:
            await worker.enqueue(args)

        async def many(chunk: range) -> None:
            await oban.enqueue_many([worker.new({"n": i}) for i in chunk])

        return await _enqueue_phase(action, count, extra, one, many)
    finally:
        await pool.close()


async def _agent_saq(action: str, count: int, extra: float) -> dict[str, Any]:
    """SAQ has no multi-job insert: a "batch" is its ``enqueue`` calls for the batch sent
    concurrently (``asyncio.gather``) over its connection pool (20 connections by default)."""
    queue = _saq_settings()["queue"]
    await queue.connect()
    try:
        if action == "setup":
            return {"seconds": 0.0}  # connect() created SAQ's tables

        async def one(**kwargs: Any) -> None:
            await queue.enqueue(JOB_NAME, **kwargs)

        async def many(chunk: range) -> None:
            await asyncio.gather(*(queue.enqueue(JOB_NAME, n=i) for i in chunk))

        return await _enqueue_phase(action, count, extra, one, many)
    finally:
        await queue.disconnect()


async def _agent_chancy(action: str, count: int, extra: float) -> dict[str, Any]:
    from chancy import Queue  # noqa: PLC0415 - only in the peers' interpreter

    app = _chancy_app()
    noop = _chancy_noop()
    async with app:
        if action == "setup":
            await app.migrate()
            # Chancy's defaults for a queue but one: eager polling. By default a queue polls every
            # 5 s for at most its concurrency (the CPU count: 2 here), 0.4 jobs/s, whatever waits.
            await app.declare(Queue("default", eager_polling=True))
            return {"seconds": 0.0}

        async def one(**kwargs: Any) -> None:
            await app.push(noop.job.with_kwargs(**kwargs))

        async def many(chunk: range) -> None:
            async for _ in app.push_many([noop.job.with_kwargs(n=i) for i in chunk], batch_size=len(chunk)):
                pass

        return await _enqueue_phase(action, count, extra, one, many)


def _pace(index: int, spacing: float) -> float:
    """Seconds to sleep before latency sample ``index``: ``spacing`` jittered by +-40%."""
    return spacing * random.uniform(0.6, 1.4) if index else 0.0


def _agent_jobcore(action: str, count: int, extra: float) -> dict[str, Any]:
    from jobcore import connect  # noqa: PLC0415

    handle = _jobcore_handle()
    driver = connect(os.environ[DSN_ENV])
    try:
        if action == "single":
            for i in range(20):  # warm-up: connections, prepared plans
                handle.enqueue({"n": -i}, driver=driver)
            started = time.perf_counter()
            for i in range(count):
                handle.enqueue({"n": i}, driver=driver)
        elif action == "batch":
            size = int(extra)
            started = time.perf_counter()
            for first in range(0, count, size):
                handle.enqueue_many([{"n": i} for i in range(first, min(count, first + size))], driver=driver)
        else:
            for i in range(3):
                handle.enqueue({"n": -i}, driver=driver)
            started = time.perf_counter()
            for i in range(count):
                time.sleep(_pace(i, extra))
                handle.enqueue({"t": time.time()}, driver=driver)
        return {"seconds": time.perf_counter() - started}
    finally:
        driver.close()


async def _agent_procrastinate(action: str, count: int, extra: float) -> dict[str, Any]:
    app = _procrastinate_app()
    task = app.tasks[JOB_NAME]
    async with app.open_async():
        if action == "single":
            for i in range(20):
                await task.defer_async(n=-i)
            started = time.perf_counter()
            for i in range(count):
                await task.defer_async(n=i)
        elif action == "batch":
            size = int(extra)
            started = time.perf_counter()
            for first in range(0, count, size):
                await task.batch_defer_async(*({"n": i} for i in range(first, min(count, first + size))))
        else:
            for i in range(3):
                await task.defer_async(n=-i)
            started = time.perf_counter()
            for i in range(count):
                await asyncio.sleep(_pace(i, extra))
                await task.defer_async(t=time.time())
    return {"seconds": time.perf_counter() - started}


async def _agent_pgqueuer(action: str, count: int, extra: float) -> dict[str, Any]:
    import asyncpg  # noqa: PLC0415
    from pgqueuer.db import AsyncpgDriver  # noqa: PLC0415
    from pgqueuer.queries import Queries  # noqa: PLC0415

    connection = await asyncpg.connect(os.environ[DSN_ENV])
    queries = Queries(AsyncpgDriver(connection))
    try:
        if action == "single":
            for i in range(20):
                await queries.enqueue(JOB_NAME, json.dumps({"n": -i}).encode(), 0)
            started = time.perf_counter()
            for i in range(count):
                await queries.enqueue(JOB_NAME, json.dumps({"n": i}).encode(), 0)
        elif action == "batch":
            size = int(extra)
            started = time.perf_counter()
            for first in range(0, count, size):
                chunk = range(first, min(count, first + size))
                await queries.enqueue(
                    [JOB_NAME] * len(chunk), [json.dumps({"n": i}).encode() for i in chunk], [0] * len(chunk)
                )
        else:
            for i in range(3):
                await queries.enqueue(JOB_NAME, json.dumps({"n": -i}).encode(), 0)
            started = time.perf_counter()
            for i in range(count):
                await asyncio.sleep(_pace(i, extra))
                await queries.enqueue(JOB_NAME, json.dumps({"t": time.time()}).encode(), 0)
        return {"seconds": time.perf_counter() - started}
    finally:
        await connection.close()


LATENCY_WARMUP = 3  # jobs the latency agent enqueues (unrecorded) before its samples


# -- async producers: P coroutines on one event loop share a count -----------------------------

ASYNC_PEERS = ("procrastinate", "pgqueuer")
"""The peers with an asyncio producer measured beside jobcore's async driver."""
ASYNC_PRODUCERS = (1, 50)
"""One producer, and an app-like 50: 50 coroutines on one loop (say, 50 requests in flight),
each enqueueing its share, all through one client object (one pool) made as its docs make it."""


def _shares(count: int, producers: int) -> list[range]:
    """``range(count)`` cut into ``producers`` contiguous shares (sizes differing by at most 1)."""
    cuts = [count * i // producers for i in range(producers + 1)]
    return [range(cuts[i], cuts[i + 1]) for i in range(producers)]


async def _async_producers(
    kind: str, producers: int, count: int, size: int,
    one: Callable[[int], Any], many: Callable[[range], Any],
) -> dict[str, Any]:
    """Time ``count`` enqueues spread over ``producers`` coroutines gathered on this loop.

    ``kind`` "single": each coroutine awaits ``one(n)`` per job of its share; "batch": it
    awaits ``many(chunk)`` per ``size`` jobs of its share. Before timing, a warm-up of the same
    kind with every producer at once (the pool opens as many connections as it will use,
    statements get prepared): 20 jobs one at a time, or two batches of 10, per producer (at
    least 20 in all), numbered negative. Answers the seconds, the process's CPU seconds over
    them (the producer's own cost: the client library and the loop) and the warm-up job count.
    """
    rounds = max(1, -(-20 // producers)) if kind == "single" else 2

    async def warm(p: int) -> None:
        for r in range(rounds):
            if kind == "single":
                await one(-1 - (p * rounds + r))
            else:
                first = -10 * (p * rounds + r + 1)
                await many(range(first, first + 10))

    await asyncio.gather(*(warm(p) for p in range(producers)))
    warmed = producers * rounds * (1 if kind == "single" else 10)

    async def produce(share: range) -> None:
        if kind == "single":
            for i in share:
                await one(i)
        else:
            for first in range(share.start, share.stop, size):
                await many(range(first, min(share.stop, first + size)))

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(produce(share) for share in _shares(count, producers)))
    return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "warmup": warmed}


class _ThreadedAsyncDriver:
    """Stand-in for jobcore's async PostgreSQL driver where this tree has none: the sync
    driver's ``enqueue``/``enqueue_many`` run in the loop's default thread pool. Reported as
    such ("flavour": "threads"); never the figure of a tree that has the native driver."""

    def __init__(self, url: str) -> None:
        from jobcore import connect  # noqa: PLC0415

        self.sync = connect(url)

    async def enqueue(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.sync.enqueue, *args, **kwargs)

    async def enqueue_many(self, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.sync.enqueue_many, *args, **kwargs)

    async def close(self) -> None:
        self.sync.close()


async def _async_jobcore(kind: str, producers: int, count: int, size: int) -> dict[str, Any]:
    """jobcore's native async driver (``connect_async(url)``: ``AsyncPostgresDriver``, its
    default pool), through the job handle's ``enqueue_async`` / ``enqueue_many_async``."""
    handle = _jobcore_handle()
    url = os.environ[DSN_ENV]
    driver: Any
    try:
        from jobcore.drivers.postgres import AsyncPostgresDriver  # noqa: PLC0415, F401
    except ImportError:
        native = False
    else:
        native = os.environ.get(THREADS_ENV) != "1"  # "1": the sync driver in threads, to compare
    if native:
        from jobcore import connect_async  # noqa: PLC0415

        driver, flavour = connect_async(url), "native"
    else:
        driver, flavour = _ThreadedAsyncDriver(url), "threads"
    try:
        async def one(i: int) -> None:
            await handle.enqueue_async({"n": i}, driver=driver)

        async def many(chunk: range) -> None:
            await handle.enqueue_many_async([{"n": i} for i in chunk], driver=driver)

        out = await _async_producers(kind, producers, count, size, one, many)
    finally:
        await driver.close()
    return {**out, "flavour": flavour}


async def _async_procrastinate(kind: str, producers: int, count: int, size: int) -> dict[str, Any]:
    """Procrastinate's ``defer_async`` / ``batch_defer_async`` on its ``PsycopgConnector``
    (an ``AsyncConnectionPool`` with psycopg_pool's defaults: 4 connections)."""
    app = _procrastinate_app()
    task = app.tasks[JOB_NAME]
    async with app.open_async():
        async def one(i: int) -> None:
            await task.defer_async(n=i)

        async def many(chunk: range) -> None:
            await task.batch_defer_async(*({"n": i} for i in chunk))

        return await _async_producers(kind, producers, count, size, one, many)


async def _async_pgqueuer(kind: str, producers: int, count: int, size: int) -> dict[str, Any]:
    """PGQueuer's ``Queries.enqueue`` (lists for a batch). One producer: ``AsyncpgDriver`` on
    one asyncpg connection, as its README sets one up; 50: ``AsyncpgPoolDriver`` on an asyncpg
    pool with asyncpg's defaults (10 connections), since the one-connection driver runs every
    query behind a lock."""
    import asyncpg  # noqa: PLC0415
    from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver  # noqa: PLC0415
    from pgqueuer.queries import Queries  # noqa: PLC0415

    dsn = os.environ[DSN_ENV]
    resource: Any = await (asyncpg.connect(dsn) if producers == 1 else asyncpg.create_pool(dsn))
    queries = Queries(AsyncpgDriver(resource) if producers == 1 else AsyncpgPoolDriver(resource))
    try:
        async def one(i: int) -> None:
            await queries.enqueue(JOB_NAME, json.dumps({"n": i}).encode(), 0)

        async def many(chunk: range) -> None:
            await queries.enqueue(
                [JOB_NAME] * len(chunk), [json.dumps({"n": i}).encode() for i in chunk], [0] * len(chunk)
            )

        return await _async_producers(kind, producers, count, size, one, many)
    finally:
        await resource.close()


# -- /proc: CPU seconds of process trees -------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, utime + stime in seconds) for every process we can read."""
    table: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2 :].split()
        table[int(entry)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK)
    return table


def _tree_cpu(roots: list[int], exclude: set[int] | None = None) -> dict[int, float]:
    """CPU seconds so far of each process in the trees under ``roots`` (``exclude`` left out)."""
    exclude = exclude or set()
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, float] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in table and pid not in exclude:
            out[pid] = table[pid][1]
        todo.extend(children.get(pid, []))
    return out


def _cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two snapshots (a process born in between counts from zero)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


# -- the limit: a bare claim-and-ack loop on jobcore's schema -----------------------------------

LIMIT_CLAIM = """
UPDATE jobcore.jobs AS j SET
    state = 'running', worker_id = %(worker)s, claim_no = j.claim_no + 1, attempt = j.attempt + 1,
    attempted_at = now(), lease_expires_at = now() + interval '30 seconds'
WHERE j.id = ANY(ARRAY(
    SELECT d.id FROM jobcore.jobs AS d
    WHERE d.state IN ('ready', 'scheduled') AND d.queue = 'default' AND d.run_at <= now()
    ORDER BY d.priority DESC, d.run_at, d.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.claim_no
"""
"""Take up to ``limit`` due jobs, in jobcore's claim order, through its ``jobs_due`` index."""

LIMIT_ACK = """
UPDATE jobcore.jobs AS j SET state = 'done', finished_at = now(), lease_expires_at = NULL, worker_id = NULL
FROM unnest(%(ids)s::bigint[], %(claim_nos)s::bigint[]) AS t(id, claim_no)
WHERE j.id = t.id AND j.state = 'running' AND j.worker_id = %(worker)s AND j.claim_no = t.claim_no
"""
"""Settle a batch, each row fenced on its own token (state, worker, claim number) as jobcore's are."""


def _held_batches(url: str, name: str) -> Iterator[tuple[Any, str, list[Any]]]:
    """Claims through jobcore's own driver, as the worker claims: ``LIMIT_BATCH`` jobs held
    (``start=False``) at a time, until SIGTERM; yields the driver, the worker id and each
    non-empty batch (an empty claim polls again after 5 ms: no wake-ups)."""
    from datetime import timedelta  # noqa: PLC0415 - the harness's interpreter, like the limit's

    from jobcore import connect  # noqa: PLC0415

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    worker = f"{name}-{os.getpid()}"
    lease = timedelta(seconds=30)
    driver: Any = connect(url)
    while True:
        got = driver.claim(["default"], worker_id=worker, limit=LIMIT_BATCH, lease=lease, start=False)
        if not got.claimed:
            time.sleep(0.005)
            continue
        yield driver, worker, got.claimed


def driver_loop(url: str) -> None:
    """``peers.py --driver-loop URL``: :func:`limit_worker`'s loop through jobcore's own driver, no worker.

    Claims ``LIMIT_BATCH`` jobs held (``start=False``, as the worker claims them) and acks
    them all with ``ack_many(..., landed_only=True)`` (as the worker acks when no
    ``on_settled`` is set), again, until stopped: no handler, no events, no lease upkeep,
    no wake-ups (an empty claim polls again after 5 ms)."""
    for driver, _, claimed in _held_batches(url, "driver"):
        driver.ack_many([(one.token, None) for one in claimed], landed_only=True)


def bare_worker(url: str) -> None:
    """``peers.py --bare-worker URL``: :func:`driver_loop` plus what every worker does per job,
    nothing else: the job's handler called with its payload (the no-op ``jobcore worker`` runs
    here, found by name) and its completion logged as ``jobcore worker`` logs it (the
    ``settled`` event, at INFO, through the CLI's stderr handler and format). No attempts,
    slots, runner threads, leases, retries or events hooks: no F rule is kept. So its share of
    the limit bounds any worker on jobcore's driver that logs a line per job."""
    import logging  # noqa: PLC0415 - the harness's interpreter, like the limit's

    from jobcore import events  # noqa: PLC0415
    from jobcore.cli._process import configure_logging  # noqa: PLC0415

    configure_logging("INFO")
    handlers = {JOB_NAME: _jobcore_handle().fn}
    emit, info = events.emit, logging.INFO
    for driver, worker, claimed in _held_batches(url, "bare"):
        ran = []
        for one in claimed:
            job = one.job
            began = time.monotonic()
            handlers[job.name](job.payload)
            ran.append(time.monotonic() - began)
        landed = driver.ack_many([(one.token, None) for one in claimed], landed_only=True)
        for one, took, ok in zip(claimed, ran, landed, strict=True):
            if ok:  # logged once it landed, as the worker logs it
                job = one.job
                emit(
                    "settled", job, "job %s (%s) %s", job.id, job.name, "completed", level=info,
                    outcome="completed", error_type=None, duration_s=took, worker_id=worker,
                )


def limit_worker(url: str) -> None:
    """``peers.py --limit-worker URL``: claim ``LIMIT_BATCH`` jobs, ack them all, again, until
    stopped. One connection, autocommit, prepared statements; no handler, no events, no
    lease upkeep, no wake-ups (an empty claim polls again after 5 ms)."""
    import psycopg  # noqa: PLC0415 - the harness's interpreter (the same C build jobcore uses)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    worker = f"limit-{os.getpid()}"
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as conn:
        while True:
            rows = conn.execute(LIMIT_CLAIM, {"worker": worker, "limit": LIMIT_BATCH}).fetchall()
            if not rows:
                time.sleep(0.005)
                continue
            conn.execute(
                LIMIT_ACK, {"ids": [r[0] for r in rows], "claim_nos": [r[1] for r in rows], "worker": worker}
            )


# -- the harness -------------------------------------------------------------------------------


def ensure_venv(path: Path, pins: tuple[str, ...] = PEER_PINS, base: str | None = None) -> Path:
    """A virtualenv at ``path`` (made by ``base``, default this interpreter) holding exactly
    ``pins``; answers its python."""
    python = path / "bin" / "python"
    marker = path / "jobcore-bench-pins.txt"
    wanted = "\n".join(pins) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"installing {', '.join(pins)} into {path} ...", flush=True)
    subprocess.run([base or sys.executable, "-m", "venv", "--clear", str(path)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    marker.write_text(wanted)
    return python


def find_python312() -> str | None:
    """A working Python 3.12 or newer for oban-py's virtualenv: under pyenv, else on PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(p) for p in sorted(root.glob("3.1[2-9]*/bin/python"))]
    candidates += [found for name in ("python3.12", "python3.13") if (found := shutil.which(name))]
    for candidate in candidates:
        check = [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"]
        if subprocess.run(check, capture_output=True, check=False).returncode == 0:
            return candidate
    return None


class Failure(Exception):
    """A phase of one system went wrong; it is reported and its figures left out."""


class Harness:
    """The server, the per-system databases and the phases."""

    def __init__(self, server: Any, venv_python: Path, workdir: Path, oban_python: Path | None = None) -> None:
        import psycopg  # noqa: PLC0415 - the harness runs in the project's venv

        self.psycopg = psycopg
        self.server = server
        self.venv_bin = venv_python.parent
        self.venv_python = venv_python
        self.workdir = workdir
        self.admin = psycopg.connect(server.url, autocommit=True)
        self.conns: dict[str, Any] = {}
        self.harness_pids: set[int] = set()
        self._serial = 0
        self.jobcore_bin = Path(sys.executable).parent / "jobcore"
        self.base_python: str | None = None  # --baseline
        self.oban_python = oban_python
        self.stand_ins: set[str] = set()  # systems whose async producer was a thread stand-in

    # ---- setup ----

    def url(self, system: str, app_name: str | None = None, *, admin: bool = False) -> str:
        user = "jobcore" if admin else BENCH_ROLE
        base = f"postgresql://{user}@127.0.0.1:{self.server.port}/bench_{system}"
        params = ["schema=jobcore"] if system in (*JOBCORES, *DRAIN_ONLY) and not admin else []
        if app_name:
            params.append(f"application_name={app_name}")
        return base + ("?" + "&".join(params) if params else "")

    def env(self, system: str, app_name: str | None = None, **extra: str) -> dict[str, str]:
        env = {**os.environ, DSN_ENV: self.url(system, app_name), "PYTHONPATH": str(HERE), **extra}
        env.pop("VIRTUAL_ENV", None)
        return env

    def setup(self, systems: tuple[str, ...]) -> None:
        self.admin.execute(f"CREATE ROLE {BENCH_ROLE} LOGIN SUPERUSER")
        self.admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.harness_pids.add(self.admin.info.backend_pid)
        for system in systems:
            self.admin.execute(f"CREATE DATABASE bench_{system} OWNER {BENCH_ROLE}")
            if system in ("jobcore", *DRAIN_ONLY):
                from jobcore import connect  # noqa: PLC0415

                driver = connect(self.url(system))
                driver.migrate()
                driver.close()
            elif system == BASE:
                assert self.base_python is not None
                migrate = [self.base_python, "-m", "jobcore.cli", "migrate", "--url", self.url(system)]
                self._run(migrate, self.env(system))
            elif system == "procrastinate":
                self._run(
                    [str(self.venv_bin / "procrastinate"), "--app=peers.procrastinate_app", "schema", "--apply"],
                    self.env(system),
                )
            elif system == "pgqueuer":
                self._run([str(self.venv_bin / "pgq"), "install"], {**self.env(system), "PGDSN": self.url(system)})
            elif system == "oban":
                assert self.oban_python is not None
                oban = str(self.oban_python.parent / "oban")
                self._run([oban, "install", "--dsn", self.url(system)], self.env(system))
            elif system == "chancy":
                self._run(
                    [str(self.venv_bin / "chancy"), "--app", "peers.chancy_app", "misc", "migrate"], self.env(system)
                )
                self.agent(system, "setup", 0, 0)  # declares the queue "default"
            else:  # saq: its queue creates its tables when it first connects
                self.agent(system, "setup", 0, 0)
            conn = self.psycopg.connect(self.url(system, admin=True), autocommit=True)
            self.harness_pids.add(conn.info.backend_pid)
            self.conns[system] = conn

    @staticmethod
    def _run(cmd: list[str], env: dict[str, str]) -> str:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(HERE), check=False)
        if done.returncode:
            raise Failure(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
        return done.stdout

    # ---- helpers ----

    def scalar(self, system: str, query: str) -> int:
        row = self.conns[system].execute(query).fetchone()
        return int(row[0]) if row else 0

    def tally(self, system: str) -> dict[str, int]:
        return {str(k): int(n) for k, n in self.conns[system].execute(TALLY_SQL[system]).fetchall()}

    def empty(self, system: str) -> None:
        self.conns[system].execute(EMPTY_SQL[system])

    def agent(self, system: str, action: str, count: int, extra: float) -> float:
        return float(self.agent_out(system, action, count, extra)["seconds"])

    def agent_out(self, system: str, action: str, count: int, extra: float) -> dict[str, Any]:
        pythons = {
            "jobcore": sys.executable, LIMIT: sys.executable, DRIVER: sys.executable, BARE: sys.executable,
            BASE: self.base_python,
            "oban": self.oban_python,
        }
        python = str(pythons.get(system) or self.venv_python)
        cmd = [python, str(HERE / "peers.py"), "--agent", system, action, str(count), str(extra)]
        out = self._run(cmd, self.env(system, f"agent_{system}"))
        return dict(json.loads(out.strip().splitlines()[-1]))

    def worker_cmd(self, system: str, app_name: str) -> list[str]:
        if system == "jobcore":
            return [str(self.jobcore_bin), "worker", str(HERE / "peers.py"), "--url", self.url(system, app_name)]
        if system == BASE:
            assert self.base_python is not None
            return [self.base_python, "-m", "jobcore.cli", "worker", str(HERE / "peers.py"), "--url",
                    self.url(system, app_name)]
        if system == LIMIT:
            url = f"postgresql://{BENCH_ROLE}@127.0.0.1:{self.server.port}/bench_{system}?application_name={app_name}"
            return [sys.executable, str(HERE / "peers.py"), "--limit-worker", url]
        if system == DRIVER:
            return [sys.executable, str(HERE / "peers.py"), "--driver-loop", self.url(system, app_name)]
        if system == BARE:
            return [sys.executable, str(HERE / "peers.py"), "--bare-worker", self.url(system, app_name)]
        if system == "procrastinate":
            return [str(self.venv_bin / "procrastinate"), "--app=peers.procrastinate_app", "worker"]
        if system == "pgqueuer":
            return [str(self.venv_bin / "pgq"), "run", "peers:pgqueuer_factory"]
        if system == "oban":
            assert self.oban_python is not None
            return [str(self.oban_python.parent / "oban"), "start", "--dsn", self.url(system, app_name),
                    "--queues", "default:10"]
        if system == "saq":
            return [str(self.venv_bin / "saq"), "peers.saq_settings"]
        return [str(self.venv_bin / "chancy"), "--app", "peers.chancy_app", "worker", "start"]

    @contextlib.contextmanager
    def workers(self, system: str, count: int, **extra_env: str) -> Iterator[dict[str, Any]]:
        """Start ``count`` workers behind the lock barrier; yields once all wait on the queue table.

        The yielded dict has ``release()``: drop the barrier, answering the harness's
        snapshot (wall time, client and server CPU) taken right before.
        """
        self._serial += 1
        names = [f"bw{self._serial}_{i}" for i in range(count)]
        lock = self.psycopg.connect(self.url(system, admin=True))
        self.harness_pids.add(lock.info.backend_pid)
        lock.execute(f"LOCK TABLE {QUEUE_TABLE[system]} IN ACCESS EXCLUSIVE MODE")
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        try:
            for name in names:
                log = open(self.workdir / f"{name}_{system}.log", "wb")  # noqa: SIM115 - closed below
                logs.append(log)
                role = {ROLE_ENV: "jobcore-worker"} if system in JOBCORES else {}
                env = {**self.env(system, name), **role, **extra_env}
                procs.append(
                    subprocess.Popen(
                        self.worker_cmd(system, name),
                        env=env,
                        stdout=log,
                        stderr=log,
                        cwd=str(HERE),
                        start_new_session=True,
                    )
                )
            deadline = time.monotonic() + 90
            while True:
                rows = self.admin.execute(
                    "SELECT DISTINCT application_name FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND application_name = ANY(%s)",
                    (names,),
                ).fetchall()
                if len(rows) == count:
                    break
                for proc, name in zip(procs, names, strict=True):
                    if proc.poll() is not None:
                        raise Failure(f"{system} worker {name} exited {proc.returncode}: {self._tail(name, system)}")
                if time.monotonic() > deadline:
                    raise Failure(f"{system} workers not all waiting on the queue after 90s")
                time.sleep(0.02)

            def release() -> dict[str, Any]:
                snap = self.snapshot(procs)
                lock.commit()
                return snap

            yield {"release": release, "procs": procs}
        finally:
            with contextlib.suppress(Exception):
                lock.close()
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
            stop_by = time.monotonic() + 20
            for proc in procs:
                try:
                    proc.wait(max(0.1, stop_by - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            for log in logs:
                log.close()

    def _tail(self, name: str, system: str) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / f"{name}_{system}.log").read_text(errors="replace")[-1500:]
        return ""

    def snapshot(self, procs: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
        return {
            "t": time.perf_counter(),
            "client": _tree_cpu([p.pid for p in procs]),
            "server": _tree_cpu([self.server.proc.pid], self.harness_pids),
        }

    def statements(self, system: str) -> int:
        row = self.admin.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
            " WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = %s)"
            " AND dbid = (SELECT oid FROM pg_database WHERE datname = %s)",
            (BENCH_ROLE, f"bench_{system}"),
        ).fetchone()
        return int(row[0]) if row else 0

    def wait_done(self, system: str, target: int, timeout: float, procs: list[Any]) -> None:
        deadline = time.monotonic() + timeout
        while self.scalar(system, DONE_SQL[system]) < target:
            if time.monotonic() > deadline:
                raise Failure(f"{system}: not all {target} jobs done after {timeout:.0f}s: {self.tally(system)}")
            if any(p.poll() is not None for p in procs):
                raise Failure(f"{system}: a worker exited during the phase: {self.tally(system)}")
            time.sleep(0.05)

    # ---- phases ----

    def single(self, system: str, count: int) -> float:
        self.empty(system)
        seconds = self.agent(system, "single", count, 0)
        total = self.scalar(system, QUEUED_SQL[system])
        if total != count + 20:
            raise Failure(f"{system}: single enqueue stored {total} jobs, expected {count + 20}")
        return count / seconds

    def async_enqueue(
        self, system: str, kind: str, producers: int, count: int, size: int
    ) -> tuple[float, float, float]:
        """``count`` jobs enqueued by ``producers`` coroutines of one loop (one at a time or in
        batches of ``size``); every job is checked to be stored. Answers jobs/s, the producer
        process's CPU microseconds per job, and the server's statement time in microseconds
        per stored job (``pg_stat_statements``' execution time of everything the agent sent,
        its warm-up and setup included)."""
        self.empty(system)
        self.admin.execute("SELECT pg_stat_statements_reset()")
        out = self.agent_out(system, f"async-{kind}-{producers}", count, size)
        if out.get("flavour", "native") != "native":
            self.stand_ins.add(system)
        total = self.scalar(system, QUEUED_SQL[system])
        if total != count + out["warmup"]:
            raise Failure(f"{system}: async {kind} enqueue stored {total} jobs, expected {count + out['warmup']}")
        row = self.admin.execute(
            "SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements"
            " WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = %s)"
            " AND dbid = (SELECT oid FROM pg_database WHERE datname = %s)",
            (BENCH_ROLE, f"bench_{system}"),
        ).fetchone()
        server = float(row[0]) * 1000 / total if row else 0.0  # warm-up and setup included
        return count / float(out["seconds"]), float(out["cpu"]) * 1e6 / count, server

    def batch_and_drain(self, system: str, count: int, workers: int) -> dict[str, float]:
        self.empty(system)
        seconds = self.agent(system, "batch", count, BATCH)
        queued = self.scalar(system, QUEUED_SQL[system])
        if queued != count:
            raise Failure(f"{system}: batch enqueue stored {queued} jobs, expected {count}")
        # Statistics only now that the phase's data is in place (an ANALYZE of the empty
        # table would have steered the planner wrong for the inserts).
        self.conns[system].execute(f"ANALYZE {QUEUE_TABLE[system]}")
        with self.workers(system, workers) as fleet:
            self.admin.execute("SELECT pg_stat_statements_reset()")
            before = fleet["release"]()
            self.wait_done(system, count, max(300.0, count / 20), fleet["procs"])
            after = self.snapshot(fleet["procs"])
            calls = self.statements(system)
        tally = self.tally(system)
        if not ended_done(system, tally, count):
            raise Failure(f"{system}: after the drain {tally}, expected {count} {DONE_KEY[system]} and nothing else")
        elapsed = after["t"] - before["t"]
        per_k = 1000 / count
        return {
            "batch": count / seconds,
            "drain": count / elapsed,
            "client_cpu": _cpu_delta(before["client"], after["client"]) * per_k,
            "server_cpu": _cpu_delta(before["server"], after["server"]) * per_k,
            "statements": calls / count,
            "verified": float(tally[DONE_KEY[system]]),
        }

    def latency(self, system: str, count: int, spacing: float) -> list[float]:
        self.empty(system)
        path = self.workdir / f"latency_{system}_{self._serial}.txt"
        path.unlink(missing_ok=True)
        with self.workers(system, 1, **{LATENCY_ENV: str(path)}) as fleet:
            fleet["release"]()
            time.sleep(1.0)  # the worker finds nothing and settles into waiting
            self.agent(system, "latency", count, spacing)
            self.wait_done(system, count + LATENCY_WARMUP, 60, fleet["procs"])
        samples = [line.split() for line in path.read_text().splitlines() if line.strip()]
        if len(samples) != count:
            raise Failure(f"{system}: {len(samples)} latency samples recorded, expected {count}")
        return [(float(b) - float(a)) * 1000 for a, b in samples]


def ended_done(system: str, tally: dict[str, int], count: int) -> bool:
    """Every one of ``count`` jobs ended done, none in any other state.

    PGQueuer moves a finished job out of its queue table into its log, which also holds a
    row per earlier status change ('queued', 'picked'): its queue must be empty, its log
    must hold ``count`` 'successful' rows and no failure of any kind.
    """
    if tally.get(DONE_KEY[system]) != count:
        return False
    if system != "pgqueuer":
        return sum(tally.values()) == count
    bad = ("log:exception", "log:failed", "log:canceled", "log:deleted")
    return not any(key.startswith("queue:") or key in bad for key in tally)


# -- running it all ----------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


ROWS: tuple[tuple[str, str, bool], ...] = (
    # (label, key, higher is better)
    ("enqueue one at a time (jobs/s)", "single", True),
    (f"enqueue in batches of {BATCH:,} (jobs/s)", "batch", True),
    ("drain, 1 worker (jobs/s)", "drain1", True),
    ("drain, 4 workers (jobs/s)", "drain4", True),
    ("enqueue-to-start p50 (ms)", "p50", False),
    ("enqueue-to-start p99 (ms)", "p99", False),
    ("client CPU s / 1,000 jobs, 1 worker", "client_cpu1", False),
    ("client CPU s / 1,000 jobs, 4 workers", "client_cpu4", False),
    ("server CPU s / 1,000 jobs, 1 worker", "server_cpu1", False),
    ("server CPU s / 1,000 jobs, 4 workers", "server_cpu4", False),
    ("statements / job, 1 worker", "statements1", False),
    ("statements / job, 4 workers", "statements4", False),
)


ASYNC_BATCH = 100
"""Jobs per batch in the async batched rows (an endpoint fanning out, not a bulk load)."""


def async_rows(batch: int = ASYNC_BATCH) -> tuple[tuple[str, str, bool], ...]:
    """The async producer rows: (label, key, higher is better), key ``a_<kind><producers>``."""
    return tuple(
        (f"async, {'one at a time' if kind == 'single' else f'batches of {batch:,}'}, {p} producer"
         f"{'s' if p > 1 else ''} (jobs/s)", f"a_{kind}{p}", True)
        for kind in ("single", "batch") for p in ASYNC_PRODUCERS
    )


def run_all(
    h: Harness, systems: tuple[str, ...], jobs: int, runs: int, single_n: int, lat_n: int, budget: float | None,
    slow_jobs: int = 2000, *, sync: bool = True, async_sizes: tuple[int, int, int] | None = None,
) -> dict[str, Any]:
    """Every phase ``runs`` times; a run is not started when ``budget`` seconds would not hold it.

    ``sync=False`` leaves out the sync phases (enqueue, drains, latency); ``async_sizes``
    (jobs one at a time, jobs in batches, batch size) adds the async producer phase for
    jobcore and :data:`ASYNC_PEERS`, each row with one and with 50 producers.
    """
    began = time.monotonic()
    completed = 0
    samples: dict[str, dict[str, list[float]]] = {s: {} for s in systems}
    per_run: dict[tuple[int, str], dict[str, Any]] = {}
    failures: list[str] = []

    def add(system: str, key: str, value: float) -> None:
        samples[system].setdefault(key, []).append(value)

    def attempt(label: str, system: str, fn: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            out = fn()
        except Failure as exc:
            failures.append(f"run {run + 1} {label} {system}: {exc}")
            print(f"  {system:<13} {label}: FAILED {exc}", flush=True)
            return None
        print(f"  {system:<13} {label}: {_brief(out)} ({time.monotonic() - started:.1f}s)", flush=True)
        return out

    for run in range(runs):
        spent = time.monotonic() - began
        if budget is not None and completed and spent + spent / completed > budget:
            print(f"\n(stopping after {completed} runs: another would overrun --max-minutes)", flush=True)
            break
        order = systems[run % len(systems) :] + systems[: run % len(systems)]
        print(f"\n== run {run + 1} of {runs} (order: {', '.join(order)}) ==", flush=True)
        if async_sizes is not None:
            single_jobs, batch_jobs, size = async_sizes
            for kind, count in (("single", single_jobs), ("batch", batch_jobs)):
                for producers in ASYNC_PRODUCERS:
                    for system in order:
                        if system not in (*JOBCORES, *ASYNC_PEERS):
                            continue
                        value = attempt(
                            f"async {kind}, {producers} producer(s)", system,
                            lambda s=system, k=kind, p=producers, c=count, z=size: h.async_enqueue(s, k, p, c, z),
                        )
                        if value is not None:
                            add(system, f"a_{kind}{producers}", value[0])
                            add(system, f"c_{kind}{producers}", value[1])
                            add(system, f"s_{kind}{producers}", value[2])
                            per_run.setdefault((run, system), {})[f"a_{kind}{producers}"] = value[0]
        if not sync:
            completed += 1
            continue
        for system in order:
            if system in DRAIN_ONLY:
                continue
            value = attempt("enqueue one at a time", system, lambda s=system: h.single(s, single_n))
            if value is not None:
                add(system, "single", value)
                per_run.setdefault((run, system), {})["single"] = value
        for workers in (1, 4):
            for system in order:
                out = attempt(
                    f"batch enqueue + drain with {workers} worker(s)",
                    system,
                    lambda s=system, w=workers: h.batch_and_drain(s, min(jobs, slow_jobs) if s in SLOW else jobs, w),
                )
                if out is not None:
                    if system not in DRAIN_ONLY:  # their queues are filled by jobcore's enqueue_many
                        add(system, "batch", out["batch"])
                    for key in ("drain", "client_cpu", "server_cpu", "statements", "verified"):
                        add(system, f"{key}{workers}", out[key])
                    per_run.setdefault((run, system), {})[f"drain{workers}"] = out["drain"]
                    if system not in DRAIN_ONLY:
                        per_run[(run, system)].setdefault("batch", []).append(out["batch"])
        for system in order:
            if system in DRAIN_ONLY:
                continue
            lat = attempt("latency", system, lambda s=system: h.latency(s, lat_n, 0.025))
            if lat is not None:
                samples[system].setdefault("latency", []).extend(lat)
        completed += 1
    results: dict[str, dict[str, float | None]] = {}
    for system in systems:
        got = samples[system]
        results[system] = {key: _median(got.get(key, [])) for _, key, _ in ROWS if not key.startswith("p")}
        results[system].update({key: _median(got.get(key, [])) for _, key, _ in async_rows()})
        for prefix in "cs":
            results[system].update({prefix + k[1:]: _median(got.get(prefix + k[1:], [])) for _, k, _ in async_rows()})
        results[system]["p50"] = _percentile(got.get("latency", []), 0.50)
        results[system]["p99"] = _percentile(got.get("latency", []), 0.99)
        results[system]["verified1"] = _median(got.get("verified1", []))
        results[system]["verified4"] = _median(got.get("verified4", []))
        results[system]["latency_samples"] = float(len(got.get("latency", [])))
    runs_out = []
    for run in range(completed):
        row: dict[str, dict[str, float | None]] = {}
        for system in systems:
            got = per_run.get((run, system), {})
            row[system] = {
                "single": got.get("single"),
                "batch": _median(got.get("batch", [])),
                "drain1": got.get("drain1"),
                "drain4": got.get("drain4"),
                **{key: got.get(key) for _, key, _ in async_rows()},
            }
        runs_out.append(row)
    return {"results": results, "failures": failures, "runs": completed, "per_run": runs_out}


def _brief(out: Any) -> str:
    if isinstance(out, float):
        return f"{out:,.0f} jobs/s"
    if isinstance(out, tuple):
        return f"{out[0]:,.0f} jobs/s, client CPU {out[1]:,.0f} us/job, server statements {out[2]:,.0f} us/job"
    if isinstance(out, list):
        return f"p50 {_percentile(out, 0.5):.1f} ms, p99 {_percentile(out, 0.99):.1f} ms ({len(out)} samples)"
    return (
        f"batch {out['batch']:,.0f} jobs/s, drain {out['drain']:,.0f} jobs/s, client {out['client_cpu']:.3f}"
        f" / server {out['server_cpu']:.3f} CPU s per 1k, {out['statements']:.2f} statements/job"
    )


def _fmt(value: float | None, key: str) -> str:
    if value is None:
        return "n/a"
    if key in ("single", "batch", "drain1", "drain4") or key.startswith(("a_", "c_", "s_")):
        return f"{value:,.0f}"
    if key.startswith("p"):
        return f"{value:.1f}"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def best_peer(results: dict[str, dict[str, float | None]], key: str, higher: bool) -> tuple[str, float] | None:
    have = [(p, results[p][key]) for p in PEERS if p in results and results[p].get(key) is not None]
    if not have:
        return None
    pick = max if higher else min
    return pick(have, key=lambda item: item[1])  # type: ignore[arg-type, return-value]


def ratio(results: dict[str, dict[str, float | None]], key: str, higher: bool) -> float | None:
    """jobcore's figure over the better peer's (throughput: >1 is better; costs: <1 is better)."""
    best = best_peer(results, key, higher)
    mine = results.get("jobcore", {}).get(key)
    if best is None or mine is None or best[1] == 0:
        return None
    return mine / best[1]


def share_of_limit(results: dict[str, dict[str, float | None]], key: str, system: str = "jobcore") -> float | None:
    """``system``'s drain (jobcore's by default) as a share of the bare SQL loop's on the same server."""
    mine, limit = results.get(system, {}).get(key), results.get(LIMIT, {}).get(key)
    return None if mine is None or not limit else mine / limit


def table(results: dict[str, dict[str, float | None]], systems: tuple[str, ...]) -> str:
    names = {LIMIT: "SQL limit", DRIVER: "jobcore driver loop", BARE: "bare worker loop"}
    head = ["", *(names.get(s, s) for s in systems), "jobcore / best peer"]
    with_limit = LIMIT in systems
    if with_limit:
        head.append("jobcore / SQL limit")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, key, higher in ROWS:
        r = ratio(results, key, higher)
        best = best_peer(results, key, higher)
        note = "n/a" if r is None or best is None else f"{r:.2f}x ({best[0]})"
        cells = [label, *(_fmt(results[s].get(key), key) for s in systems), note]
        if with_limit:
            drains = key in ("drain1", "drain4")
            share = share_of_limit(results, key) if drains else None
            rungs = [
                f"{name} {rung:.0%}" for name, system in (("driver loop", DRIVER), ("bare worker loop", BARE))
                if drains and (rung := share_of_limit(results, key, system)) is not None
            ]
            cells.append(("" if share is None else f"{share:.0%}") + (f" ({', '.join(rungs)})" if rungs else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def async_table(results: dict[str, dict[str, float | None]], systems: tuple[str, ...], batch: int) -> str:
    """The async producer rows: jobs/s per system, and jobcore's over the fastest async peer's."""
    shown = tuple(s for s in systems if s in (*JOBCORES, *ASYNC_PEERS))
    head = ["", *shown, "jobcore / best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, key, higher in async_rows(batch):
        r = ratio(results, key, higher)
        best = best_peer(results, key, higher)
        note = "n/a" if r is None or best is None else f"{r:.2f}x ({best[0]})"
        lines.append("| " + " | ".join([label, *(_fmt(results[s].get(key), key) for s in shown), note]) + " |")
    for prefix, unit in (("c", "(producer CPU us / job)"), ("s", "(server statement time us / job)")):
        for label, key, _ in async_rows(batch):
            cost = prefix + key[1:]
            r = ratio(results, cost, False)
            best = best_peer(results, cost, False)
            note = "n/a" if r is None or best is None else f"{r:.2f}x ({best[0]})"
            cells = [label.replace("(jobs/s)", unit), *(_fmt(results[s].get(cost), cost) for s in shown)]
            lines.append("| " + " | ".join([*cells, note]) + " |")
    return "\n".join(lines)


def async_per_run_table(per_run: list[dict[str, dict[str, float | None]]], batch: int) -> str:
    """jobcore over the fastest async peer of the same run, row by row."""
    rows = async_rows(batch)
    head = ["run", *(label.removeprefix("async, ").removesuffix(" (jobs/s)") for label, _, _ in rows)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for number, row in enumerate(per_run, 1):
        cells = [str(number)]
        for _, key, _ in rows:
            r = ratio(row, key, True)
            best = best_peer(row, key, True)
            cells.append("n/a" if r is None or best is None else f"{r:.2f}x ({best[0]})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_run_table(per_run: list[dict[str, dict[str, float | None]]]) -> str:
    """jobcore over the fastest peer of the same run, row by row, and its 4-worker drain over the limit's."""
    keys = (("single", "enqueue one at a time"), ("batch", "batch enqueue"), ("drain1", "drain, 1 worker"),
            ("drain4", "drain, 4 workers"))
    head = ["run", *(label for _, label in keys), "drain, 4 workers / SQL limit"]
    rungs = [
        (name, system) for name, system in (("driver loop", DRIVER), ("bare worker loop", BARE))
        if any(row.get(system, {}).get("drain4") is not None for row in per_run)
    ]
    head += [f"{name}, 4 workers / SQL limit" for name, _ in rungs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for number, row in enumerate(per_run, 1):
        cells = [str(number)]
        for key, _ in keys:
            r = ratio(row, key, True)
            best = best_peer(row, key, True)
            cells.append("n/a" if r is None or best is None else f"{r:.2f}x ({best[0]})")
        share = share_of_limit(row, "drain4")
        cells.append("n/a" if share is None else f"{share:.0%}")
        for _, system in rungs:
            floor = share_of_limit(row, "drain4", system)
            cells.append("n/a" if floor is None else f"{floor:.0%}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


GOALS: tuple[tuple[str, Callable[[dict[str, dict[str, float | None]]], float | None], float, bool], ...] = (
    # (text, figure, threshold, figure must be >= threshold)
    ("drain with 4 workers >= 2x the fastest peer", lambda r: ratio(r, "drain4", True), 2.0, True),
    ("drain with 1 worker >= 1.5x the fastest peer", lambda r: ratio(r, "drain1", True), 1.5, True),
    ("one-at-a-time enqueue >= 1.2x the fastest peer", lambda r: ratio(r, "single", True), 1.2, True),
    ("batch enqueue >= 1.2x the fastest peer", lambda r: ratio(r, "batch", True), 1.2, True),
    ("drain with 4 workers >= 70% of the SQL limit", lambda r: share_of_limit(r, "drain4"), 0.70, True),
    ("enqueue-to-start p99 < 20 ms", lambda r: r.get("jobcore", {}).get("p99"), 20.0, False),
)


def async_goals(results: dict[str, dict[str, float | None]], batch: int) -> list[str]:
    """Issue 18's goal: jobcore's async producer at least equal to the fastest async peer on each row."""
    out = []
    for label, key, higher in async_rows(batch):
        r = ratio(results, key, higher)
        text = f"{label.removesuffix(' (jobs/s)')} >= 1.0x the fastest peer"
        verdict = "n/a" if r is None else "PASS" if r >= 1.0 else "FAIL"
        out.append(f"- {verdict}: {text}: " + ("not measured" if r is None else f"{r:.2f}x"))
    return out


def async_report(
    h: Harness, data: dict[str, Any], systems: tuple[str, ...], args: argparse.Namespace, elapsed: float, command: str
) -> str:
    """The async producer rows as their own docs/benchmarks.md section (between
    :data:`ASYNC_START` and :data:`ASYNC_END`): how to reproduce, the machine, the versions."""
    v = versions(h)
    load = ""
    with contextlib.suppress(OSError):
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "\n".join([
        ASYNC_START,
        "## Async producers against Procrastinate and PGQueuer (issue 18)",
        "",
        "Reproduce with (these rows are also a section of every full run of the script):",
        "",
        "```sh",
        command,
        "```",
        "",
        f"Machine: {machine(h)}. Load average (1, 5, 15 min) when the run ended: {load}.",
        f"Versions: jobcore {v['jobcore']} (psycopg {v['jobcore-psycopg']}); procrastinate"
        f" {v.get('procrastinate')} (psycopg {v.get('psycopg')}); pgqueuer {v.get('pgqueuer')}"
        f" (asyncpg {v.get('asyncpg')}). {data['runs']} run{'s' if data['runs'] != 1 else ''},"
        f" whole run {elapsed / 60:.1f} minutes.",
        "",
        *async_section(h, data, systems, args),
        ASYNC_END,
    ])


def async_section(h: Harness, data: dict[str, Any], systems: tuple[str, ...], args: argparse.Namespace) -> list[str]:
    """The async producer rows of the report (their table, run by run, the goals, how each runs)."""
    lines = [
        f"Each system's asyncio enqueue, from one process: {args.async_jobs:,} jobs one at a time and"
        f" {args.async_batch_jobs:,} jobs in batches of {args.async_batch:,} per row and run, by 1 producer"
        f" coroutine and by {ASYNC_PRODUCERS[-1]} (app-like: {ASYNC_PRODUCERS[-1]} coroutines gathered on one loop,"
        " each enqueueing its share through the one client object the application made). Each row starts"
        " with a warm-up of the same kind by every producer at once (pools open their connections,"
        " statements get prepared); every job is checked to be stored. Below the throughput rows, each"
        " system's cost per job on either side: the producer process's CPU time over the timed part,"
        " and the server's execution time of the statements the producer sent (`pg_stat_statements`,"
        " warm-up and setup included, divided by the jobs stored); lower is better there.",
        "",
        async_table(data["results"], systems, args.async_batch),
        "",
        "Per run (jobcore over the fastest async peer of that run):",
        "",
        async_per_run_table(data["per_run"], args.async_batch),
        "",
        "Goals (issue 18), on the medians of this run:",
        "",
        *async_goals(data["results"], args.async_batch),
        "",
        "- jobcore: `jobcore.connect_async(url)` (`AsyncPostgresDriver`, its default pool: at most 10",
        "  connections), enqueue through the job handle's `enqueue_async` / `enqueue_many_async`.",
        "- Procrastinate: `App(connector=PsycopgConnector(conninfo=...))`, `open_async()`, then",
        "  `defer_async` / `batch_defer_async` (psycopg_pool's `AsyncConnectionPool` defaults: 4 connections).",
        "- PGQueuer: `Queries.enqueue` (lists for a batch); 1 producer on `AsyncpgDriver` (one asyncpg",
        "  connection, as its README), 50 on `AsyncpgPoolDriver` (`asyncpg.create_pool` defaults: 10",
        "  connections; the one-connection driver serialises every query behind a lock).",
    ]
    if h.stand_ins:
        lines += ["", f"NOT NATIVE: {', '.join(sorted(h.stand_ins))} ran with the sync driver in threads"
                  " (JC_BENCH_ASYNC_THREADS=1, or this tree has no AsyncPostgresDriver): these jobcore figures are"
                  " not the async driver's."]
    return lines


def goals(results: dict[str, dict[str, float | None]]) -> list[str]:
    out = []
    for text, figure, threshold, at_least in GOALS:
        value = figure(results)
        if value is None:
            out.append(f"- n/a: {text} (not measured)")
            continue
        ok = value >= threshold if at_least else value < threshold
        shown = (f"{value:.0%}" if threshold < 1 else f"{value:.2f}x") if at_least else f"{value:.1f} ms"
        out.append(f"- {'PASS' if ok else 'FAIL'}: {text}: {shown}")
    return out


def machine(h: Harness) -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    settings = dict(
        h.admin.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('server_version', 'fsync', 'synchronous_commit',"
            " 'full_page_writes', 'shared_buffers', 'max_wal_size')"
        ).fetchall()
    )
    buffers = int(settings.get("shared_buffers", "0")) * 8 // 1024
    return (
        f"{os.cpu_count()} cores ({model or platform.machine()}){mem}, {platform.system()} {platform.release()};"
        f" Python {platform.python_version()}; PostgreSQL {settings.get('server_version', '?')} on the same"
        f" machine over TCP loopback, fsync={settings.get('fsync')}, synchronous_commit="
        f"{settings.get('synchronous_commit')}, full_page_writes={settings.get('full_page_writes')},"
        f" shared_buffers={buffers}MB"
    )


def versions(h: Harness) -> dict[str, str]:
    got = h._run(
        [
            str(h.venv_python),
            "-c",
            (
                "import importlib.metadata as m; print(' '.join(f'{p}={m.version(p)}' for p in"
                " ('procrastinate', 'pgqueuer', 'saq', 'chancy', 'asyncpg', 'uvloop', 'psycopg', 'psycopg-binary')))"
            ),
        ],
        dict(os.environ),
    )
    out = dict(item.split("=", 1) for item in got.split())
    if h.oban_python is not None:
        got = h._run(
            [str(h.oban_python), "-c", "import importlib.metadata as m, platform; print(m.version('oban'),"
             " m.version('psycopg'), platform.python_version())"],
            dict(os.environ),
        )
        out["oban"], out["oban-psycopg"], out["oban-python"] = got.split()
    import importlib.metadata as md  # noqa: PLC0415

    try:
        out["jobcore"] = md.version("jobcore-queue")  # the distribution's name on PyPI
    except md.PackageNotFoundError:
        out["jobcore"] = md.version("jobcore")

    def git(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=False)

    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    if head.returncode == 0:
        out["jobcore"] += f" at {head.stdout.strip()}" + (" plus uncommitted changes" if dirty.stdout.strip() else "")
    out["jobcore-psycopg"] = md.version("psycopg")
    return out


def against_base(results: dict[str, dict[str, float | None]], baseline: str) -> str:
    """This tree's jobcore over the baseline's, row by row (throughput: >1 is faster)."""
    mine, base = results.get("jobcore", {}), results.get(BASE, {})
    lines = [f"jobcore (this tree) against the baseline ({baseline}):", "", "| | this tree | baseline | ratio |",
             "|---|---|---|---|"]
    for label, key, _higher in ROWS:
        a, b = mine.get(key), base.get(key)
        share = f"{a / b:.2f}x" if a is not None and b else "n/a"
        lines.append(f"| {label} | {_fmt(a, key)} | {_fmt(b, key)} | {share} |")
    return "\n".join(lines)


def report(
    h: Harness, data: dict[str, Any], systems: tuple[str, ...], args: argparse.Namespace, elapsed: float, command: str
) -> str:
    results = data["results"]
    v = versions(h)
    load = ""
    with contextlib.suppress(OSError):
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    lines = [
        DOC_START,
        "## Against the other Python PostgreSQL queues, and the server's own limit",
        "",
        "`bench/peers.py` starts its own PostgreSQL, installs the peers into separate virtualenvs",
        "at pinned versions, and measures them all and jobcore on the same server in one run,",
        "alternating systems phase by phase (the order rotates every run). Reproduce with:",
        "",
        "```sh",
        command,
        "```",
        "",
        f"Machine: {machine(h)}. Load average (1, 5, 15 min) when the run ended: {load}.",
        f"Versions: jobcore {v['jobcore']} (psycopg {v['jobcore-psycopg']}, C build);"
        f" procrastinate {v.get('procrastinate')}, saq {v.get('saq')}, chancy {v.get('chancy')}"
        f" (psycopg {v.get('psycopg')}, C build); pgqueuer {v.get('pgqueuer')} (asyncpg {v.get('asyncpg')},"
        f" uvloop {v.get('uvloop')}); oban {v.get('oban')} (psycopg {v.get('oban-psycopg')}, Python"
        f" {v.get('oban-python')}).",
        f"{data['runs']} run{'s' if data['runs'] != 1 else ''}; N = {args.jobs:,} jobs per drain"
        f" ({min(args.jobs, args.slow_jobs):,} for {', '.join(SLOW)}, whose drains are one to two orders"
        " of magnitude slower: timing starts with every worker already waiting, so a drain's rate does not"
        " depend on N);"
        f" {args.single:,} one-at-a-time enqueues per run;"
        f" latency over {int(results.get('jobcore', {}).get('latency_samples') or 0)} samples per system."
        f" Whole run: {elapsed / 60:.1f} minutes.",
        "",
        table(results, systems),
        "",
        "Throughput rows are medians over the runs; latency percentiles pool every sample of every run;",
        "CPU and statements are per drain, medians over the runs (statements are what the workers'",
        "role sent, `BEGIN` and `COMMIT` included). \"jobcore / best peer\" divides jobcore's figure",
        "by the best peer's on that row (named): a throughput ratio above 1 and a cost ratio below 1",
        "favour jobcore. \"SQL limit\" is no queue: it is the same drain done by a bare loop of",
        f"batch-claim ({LIMIT_BATCH} jobs) and batch-ack SQL on jobcore's own schema and indexes, each",
        "ack fenced on its token as jobcore's are, one connection per process, nothing else: what",
        "the server allows on this machine. Its last column is jobcore's drain as a share of it.",
        "\"jobcore driver loop\" is that loop run through jobcore's own driver instead of bare SQL, no",
        f"worker around it: `claim` of {LIMIT_BATCH} jobs held (`start=False`, as the worker claims) and",
        "`ack_many(..., landed_only=True)` (as the worker acks), nothing else. Its share of the limit (in",
        "brackets) is what jobcore's statements and records leave; the rest of the way down to jobcore's",
        "drain is its worker's: the handler run on runner threads, the lease bookkeeping, and one",
        "INFO log line and event per job. \"bare worker loop\" is the driver loop plus the two things",
        "every worker does per job and nothing else: the handler called with the payload, and the",
        "completion line logged as `jobcore worker` logs it. It keeps none of the F rules (no attempts,",
        "slots, threads, leases or retries), so its share of the limit bounds any worker on jobcore's",
        "driver that logs a line per job.",
        "",
        "Per run (each ratio from one run's figures: jobcore over the fastest peer of that run):",
        "",
        per_run_table(data["per_run"]),
        "",
        "Goals (issue 22), on the medians of this run:",
        "",
        *goals(results),
        "",
        "How each system runs (each worker its own process, started by the system's own CLI with its",
        "defaults; the handler is a no-op):",
        "",
        "- jobcore: `jobcore worker bench/peers.py --url postgresql://...?schema=jobcore` (defaults:",
        "  concurrency 4, lease 30 s, LISTEN/NOTIFY wake-ups, log level INFO); a sync handler; enqueue",
        "  through the job handle's `enqueue` / `enqueue_many`.",
        "- Procrastinate: `procrastinate --app=peers.procrastinate_app worker` (defaults: concurrency 1,",
        "  LISTEN/NOTIFY, asyncio) on `PsycopgConnector`; an async task; enqueue with `defer_async` /",
        "  `batch_defer_async`.",
        "- PGQueuer: `pgq run peers:pgqueuer_factory` (defaults: batch size 10, uvloop) on one asyncpg",
        "  connection as its README sets it up; an async entrypoint; enqueue with `Queries.enqueue`",
        "  (lists for a batch).",
        "- oban-py: `oban start --dsn postgresql://... --queues default:10` (oban-py has no default",
        "  queue: 10 is its README's example limit; other defaults: pool 1-10 connections, stager",
        "  every 1 s, LISTEN/NOTIFY insert triggers, leadership, lifeline, pruner; log level INFO);",
        "  an async worker class; enqueue with the worker's `enqueue` / `Oban.enqueue_many` from an",
        "  enqueue-only `Oban(pool=...)` (oban-py's open-source release inserts a batch one `INSERT`",
        "  per job on one connection, and acks one `UPDATE` per job).",
        "- SAQ: `saq peers.saq_settings` with `Queue.from_url('postgresql://...')` (defaults:",
        "  concurrency 10, pool 4-20 connections, LISTEN/NOTIFY, finished jobs kept 600 s); an async",
        "  function; enqueue with `Queue.enqueue`. SAQ has no multi-job insert: a batch is its 1,000",
        "  `enqueue` calls sent concurrently with `asyncio.gather` over its pool.",
        "- Chancy: `chancy --app peers.chancy_app worker start`, the queue declared",
        "  `Queue(\"default\", eager_polling=True)`: Chancy's defaults (process executor, concurrency",
        "  the CPU count, polling every 5 s plus LISTEN/NOTIFY wake-ups on push, default plugins:",
        "  leadership, pruner, recovery, metrics, workflows) but for eager polling, its documented",
        "  switch to poll again as soon as a job completes: without it a queue of waiting jobs drains",
        "  at concurrency / 5 s, 0.4 jobs/s here. A plain function; enqueue with `Chancy.push` /",
        "  `push_many`.",
        "",
        "Verification after each drain: each system's finished rows are counted in its own table",
        "(jobcore `state = 'done'`, Procrastinate `status = 'succeeded'`, PGQueuer `successful` rows in",
        "`pgqueuer_log` with its queue table empty, oban-py `state = 'completed'` in `oban_jobs`, SAQ",
        "`status = 'complete'` in `saq_jobs`, Chancy `state = 'succeeded'` in `chancy_jobs`); each must",
        "equal N with no job in any other state. Timing starts when every worker is connected and",
        "blocked on the queue table behind the harness's lock, and stops when that count reaches N.",
        "Queue tables are truncated before each phase and analysed only once a drain's jobs are in",
        "place. The machine is shared and small: compare the ratios, which come from one alternating",
        "run, rather than the absolute figures.",
    ]
    if data["failures"]:
        lines += ["", "Phases that failed in this run (left out of the medians):", ""]
        lines += [f"- {f[:300]}" for f in data["failures"]]
    lines.append(DOC_END)
    return "\n".join(lines)


def write_doc(section: str, start: str = DOC_START, end: str = DOC_END) -> None:
    """Put ``section`` between ``start`` and ``end`` in docs/benchmarks.md; where they are not
    yet, the async section goes right after the peers' one, the peers' one before the first heading."""
    text = DOC.read_text()
    if start in text and end in text:
        head, rest = text.split(start, 1)
        tail = rest.split(end, 1)[1]
        text = head + section + tail
    elif start == ASYNC_START and DOC_END in text:
        at = text.index(DOC_END) + len(DOC_END)
        text = text[:at] + "\n\n" + section + text[at:]
    elif "\n## " in text:
        at = text.index("\n## ") + 1
        text = text[:at] + section + "\n\n" + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


def memory_hook(quick: bool) -> None:
    """Print the memory-driver figures when ``bench/memory_driver.py`` offers ``run()``."""
    path = HERE / "memory_driver.py"
    if not path.exists():
        return
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("jobcore_bench_memory_driver", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = getattr(module, "run", None)
    if run is None:
        return
    print("\n== memory driver (bench/memory_driver.py) ==", flush=True)
    try:
        figures = run(jobs=10_000) if quick else run()
    except TypeError:
        figures = run()
    for label, value in figures:
        print(f"  {label}: {value:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=None, help="jobs per drain (default 20,000; --quick 2,000)")
    parser.add_argument("--runs", type=int, default=None, help="rounds of every phase (default 3; --quick 1)")
    parser.add_argument("--single", type=int, default=None, help="one-at-a-time enqueues per run (1,000; quick 300)")
    parser.add_argument("--latency", type=int, default=None, help="latency samples per run (100; quick 50)")
    parser.add_argument(
        "--max-minutes", type=float, default=None, help="start no further run once it would end past this many minutes"
    )
    parser.add_argument(
        "--slow-jobs", type=int, default=2000, help="jobs per drain for " + ", ".join(SLOW) + " (default 2,000)"
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run (~3 minutes); does not write the doc")
    parser.add_argument(
        "--async-producers", action="store_true",
        help="only the async producer rows (jobcore, " + ", ".join(ASYNC_PEERS) + "); writes their doc section only",
    )
    parser.add_argument("--no-async", action="store_true", help="leave out the async producer rows")
    parser.add_argument(
        "--async-jobs", type=int, default=None,
        help="async one-at-a-time jobs per row and run (1,000; --async-producers 2,000; quick 500)",
    )
    parser.add_argument(
        "--async-batch-jobs", type=int, default=None,
        help="async batched jobs per row and run (10,000; --async-producers 20,000; quick 5,000)",
    )
    parser.add_argument("--async-batch", type=int, default=ASYNC_BATCH, help=f"async batch size ({ASYNC_BATCH})")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument(
        "--venv",
        default=os.environ.get("JOBCORE_BENCH_VENV", str(Path.home() / ".cache" / "jobcore-bench" / "peers-venv")),
    )
    parser.add_argument(
        "--baseline", default=None, metavar="PYTHON",
        help="also measure jobcore as this interpreter has it installed (an older tree), alternating with this one",
    )
    parser.add_argument(
        "--oban-venv",
        default=os.environ.get("JOBCORE_BENCH_OBAN_VENV", str(Path.home() / ".cache" / "jobcore-bench" / "oban-venv")),
    )
    parser.add_argument("--oban-python", default=None, help="Python 3.12+ to build oban-py's virtualenv with")
    parser.add_argument("--agent", nargs=4, metavar=("SYSTEM", "ACTION", "COUNT", "EXTRA"), help=argparse.SUPPRESS)
    parser.add_argument("--limit-worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--driver-loop", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--bare-worker", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.limit_worker:
        limit_worker(args.limit_worker)
        return
    if args.driver_loop:
        driver_loop(args.driver_loop)
        return
    if args.bare_worker:
        bare_worker(args.bare_worker)
        return
    if args.agent:
        system, action, count, extra = args.agent
        print(json.dumps(_agent(system, action, int(count), float(extra))), flush=True)
        return
    quick = args.quick
    args.jobs = args.jobs or (2000 if quick else 20_000)
    args.runs = args.runs or (1 if quick else 3)
    args.single = args.single or (300 if quick else 1000)
    args.latency = args.latency or (50 if quick else 100)
    # The full run's async section is kept short (about a minute a run); alone, it measures more.
    args.async_jobs = args.async_jobs or (500 if quick else 2000 if args.async_producers else 1000)
    args.async_batch_jobs = args.async_batch_jobs or (5000 if quick else 20_000 if args.async_producers else 10_000)
    args.async_on = not args.no_async
    systems = tuple(s for s in SYSTEMS if s in args.systems.split(","))
    if args.async_producers:
        if args.systems == ",".join(SYSTEMS):  # not narrowed: jobcore and the async peers only
            systems = ("jobcore", *ASYNC_PEERS)
        systems = tuple(s for s in systems if s in ("jobcore", *ASYNC_PEERS))
    if args.baseline:
        systems = (*systems, BASE)
    command = ".venv/bin/python bench/peers.py" + (
        "" if (args.jobs, args.runs) == (20_000, 3) else f" --jobs {args.jobs} --runs {args.runs}"
    ) + ("" if args.slow_jobs == 2000 else f" --slow-jobs {args.slow_jobs}")
    if args.max_minutes:
        command += f" --max-minutes {args.max_minutes:g}"
    if args.async_producers:  # the drains' figures do not apply
        command = ".venv/bin/python bench/peers.py --async-producers"
        command += "" if args.runs == 3 else f" --runs {args.runs}"
    sizes = (2000, 20_000) if args.async_producers else (1000, 10_000)
    if args.async_on and (args.async_jobs, args.async_batch_jobs, args.async_batch) != (*sizes, ASYNC_BATCH):
        command += f" --async-jobs {args.async_jobs} --async-batch-jobs {args.async_batch_jobs}"
        command += f" --async-batch {args.async_batch}"
    started = time.monotonic()

    sys.path.insert(0, str(ROOT))  # fixtures/ is not installed: find it from here
    from fixtures.postgres import LocalServer, find_binaries  # noqa: PLC0415

    venv_python = ensure_venv(Path(args.venv))
    oban_python = None
    if "oban" in systems:
        base = args.oban_python or find_python312()
        if base is None:
            raise SystemExit("oban-py needs Python 3.12 or newer: pass --oban-python, or leave oban out (--systems)")
        oban_python = ensure_venv(Path(args.oban_venv), OBAN_PINS, base)
    bindir = find_binaries()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries (initdb/postgres) to start a server")
    server = LocalServer(
        bindir,
        extra=(
            "-c",
            "shared_preload_libraries=pg_stat_statements",
            "-c",
            "max_wal_size=4GB",
            "-c",
            "shared_buffers=256MB",
        ),
    ).start()
    workdir = Path(tempfile.mkdtemp(prefix="jobcore-peers-"))
    h: Harness | None = None
    try:
        h = Harness(server, venv_python, workdir, oban_python)
        h.base_python = args.baseline
        h.setup(systems)
        print(f"server {server.url}; logs in {workdir}", flush=True)
        budget = args.max_minutes * 60 if args.max_minutes else None
        data = run_all(
            h, systems, args.jobs, args.runs, args.single, args.latency, budget, args.slow_jobs,
            sync=not args.async_producers,
            async_sizes=(args.async_jobs, args.async_batch_jobs, args.async_batch) if args.async_on else None,
        )
        elapsed = time.monotonic() - started
        asection = async_report(h, data, systems, args, elapsed, command) if args.async_on else None
        if args.async_producers:
            assert asection is not None
            print("\n" + asection)
            if data["failures"]:
                print(f"\n{len(data['failures'])} phase(s) failed; see above")
            if quick or args.no_write:
                print("\n(docs/benchmarks.md left alone: --quick or --no-write)")
            else:
                write_doc(asection, ASYNC_START, ASYNC_END)
                print(f"\nwrote {DOC.relative_to(ROOT)} (the async section)")
            if not data["failures"]:
                shutil.rmtree(workdir, ignore_errors=True)
            return
        section = report(h, data, systems, args, elapsed, command)
        print("\n" + section)
        if asection is not None:
            print("\n" + asection)
        if args.baseline:
            print("\n" + against_base(data["results"], args.baseline))
        if data["failures"]:
            print(f"\n{len(data['failures'])} phase(s) failed; see above")
        if quick or args.no_write:
            print("\n(docs/benchmarks.md left alone: --quick or --no-write)")
        else:
            write_doc(section)
            if asection is not None:
                write_doc(asection, ASYNC_START, ASYNC_END)
            print(f"\nwrote {DOC.relative_to(ROOT)}")
        print(f"total {elapsed:.0f}s")
        if not data["failures"]:
            shutil.rmtree(workdir, ignore_errors=True)  # else kept: the worker logs explain the failures
    finally:
        if h is not None:
            for conn in (h.admin, *h.conns.values()):
                with contextlib.suppress(Exception):
                    conn.close()
        server.stop()
    memory_hook(quick)


if __name__ == "__main__":
    main()
elif os.environ.get(ROLE_ENV) == "jobcore-worker" and __name__ == "peers":
    _jobcore_handle()  # `jobcore worker bench/peers.py` imports this file as module "peers"

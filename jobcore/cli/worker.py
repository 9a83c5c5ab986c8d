"""``jobcore worker MODULE``: import the module declaring the jobs, then run a worker.

The module (a dotted name, or a path to a ``.py`` file) registers its handlers with
``@job`` when imported. The worker connects to ``--url`` (or ``JOBCORE_URL``), makes
that driver the process-wide one (so handlers can enqueue), and runs until SIGTERM or
SIGINT; the first signal drains within ``--drain-timeout``, a second abandons what is
still running at once. Logs go through :mod:`logging` on stderr, each record carrying
the job id and name.

Connections. The worker's driver opens at most ``--connections`` connections (default
:data:`WORKER_CONNECTIONS`, whatever ``--concurrency`` is: PostgreSQL's ``pool_max``,
MongoDB's ``maxPoolSize``), plus, on PostgreSQL with wake-ups, one LISTEN connection. A
``pool_max`` (or, on MongoDB, ``maxPoolSize``) in the URL stands unless ``--connections``
is given. See docs/deploy.md for the arithmetic of a fleet.

Garbage collection. The worker process runs the cyclic garbage collector's youngest
generation every :data:`GC_YOUNG_THRESHOLD` allocations instead of Python's default (700;
2,000 from 3.13), unless the jobs module set its own thresholds (``gc.set_threshold``) when
imported: see :func:`tune_gc`.
"""

from __future__ import annotations

import argparse
import gc
import signal
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from jobcore import validate as v
from jobcore.cli._process import add_log_level_option, import_jobs, logging_to_stderr, on_stop_signals
from jobcore.cli._store import add_migrate_option, add_url_option, open_store, prepare_schema
from jobcore.current import set_job_driver
from jobcore.errors import ClaimQueuesEmpty, ConfigurationError
from jobcore.registry import default_registry
from jobcore.retention import DEFAULT_PRUNE_INTERVAL
from jobcore.worker import DEFAULT_RETENTION, TRACEBACKS, Worker

__all__ = [
    "GC_YOUNG_THRESHOLD", "WORKER_CONNECTIONS", "add_worker_options", "connection_budget", "register", "run_worker",
    "tune_gc",
]

GC_YOUNG_THRESHOLD = 7000
"""Allocations between two collections of the youngest generation in a worker process.

A claimed batch (a hundred jobs, each with its record, claim, attempt and context) lives
a few milliseconds. At Python's default of 700 the collector ran several times inside each batch,
moved its objects into the older generations, and so brought on full collections of the
whole heap: in a 4-process drain on PostgreSQL that was 4 to 5 microseconds of a job's 36
(docs/benchmarks.md). At 7,000 most batches are freed by reference counting before a
collection sees them."""


def register(subparsers: Any) -> None:
    """Add the ``worker`` sub-command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "worker", help="run a worker for the jobs a module declares",
        description="Import MODULE (registering its @job handlers) and run a worker until SIGTERM/SIGINT.",
    )
    parser.add_argument("module", metavar="MODULE", help="dotted module name or path of a .py file declaring jobs")
    add_url_option(parser)
    add_worker_options(parser)
    parser.set_defaults(func=run_worker)


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    """The worker's options after MODULE and ``--url``: shared with ``manage.py jobcore_worker``
    (:mod:`jobcore.contrib.django`), which passes its own driver and imports the jobs itself."""
    parser.add_argument(
        "--queues", default=None,
        help="comma-separated queues (default: those the jobs declare; a value naming no queue is refused)",
    )
    add_migrate_option(parser, "worker")
    parser.add_argument("--concurrency", type=int, default=4, help="handlers running at once (default 4)")
    parser.add_argument(
        "--connections", type=int, default=None,
        help=f"database connections this worker opens at most, whatever its concurrency (default "
        f"{WORKER_CONNECTIONS}, or the URL's pool_max / maxPoolSize), plus one LISTEN connection on PostgreSQL",
    )
    parser.add_argument("--lease", type=float, default=30.0, help="lease seconds, renewed every lease/3 (30)")
    parser.add_argument(
        "--margin", type=float, default=None,
        help="safety margin seconds: a handler is called off once lease - margin passed without a renewal, "
        "and a job is started only with at least a margin of its lease left (default lease/5)",
    )
    parser.add_argument(
        "--strict-starts", action="store_true",
        help="record each job's start in the store before its handler runs (a round trip per job), so a "
        "handler that kills its worker at once still spends its attempt (default: recorded right after)",
    )
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between idle polls (default 1)")
    parser.add_argument(
        "--drain-timeout", type=float, default=30.0,
        help="seconds to drain on stop (default 30; 0: abandon running handlers at once)",
    )
    parser.add_argument(
        "--rescue-interval", type=float, default=60.0, help="seconds between rescue sweeps (default 60; 0: none)",
    )
    parser.add_argument(
        "--prune-interval", type=float, default=DEFAULT_PRUNE_INTERVAL,
        help=f"seconds between pruning runs, one worker of the fleet at a time (default {DEFAULT_PRUNE_INTERVAL:g})",
    )
    parser.add_argument(
        "--no-prune", action="store_true",
        help="never prune finished jobs from this worker (default: prune by the default retention policy)",
    )
    parser.add_argument(
        "--no-scheduler", action="store_true",
        help="do not fire periodic schedules from this worker (default: a scheduler thread runs; see `scheduler`)",
    )
    parser.add_argument("--worker-id", default=None, help="worker id in claims (default host:pid:random)")
    parser.add_argument(
        "--tracebacks", choices=TRACEBACKS, default="final",
        help="when a failed attempt's traceback is logged: final (only when no retry is left; default), always, never",
    )
    parser.add_argument(
        "--summary-interval", type=float, default=60.0,
        help="seconds between one-line summaries of what the worker did (default 60; 0: none)",
    )
    parser.add_argument(
        "--progress-interval", type=float, default=1.0,
        help="seconds between two stores of one job's ctx.progress (default 1; the latest report is written)",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None,
        help="serve Prometheus metrics on this port at /metrics (needs jobcore-queue[metrics]; default: off)",
    )
    add_log_level_option(parser)


def run_worker(args: argparse.Namespace) -> int:
    """Handler of ``jobcore worker``."""
    with logging_to_stderr(args.log_level):
        return _run_worker(args)


def _queues_option(text: str | None) -> str | None:
    """``--queues`` checked: None when not given (the queues the jobs declare); a value naming
    no queue ("", spaces, commas) is refused, never taken as every queue."""
    if text is None:
        return None
    names = [q.strip() for q in text.split(",") if q.strip()]
    if not names:
        raise ClaimQueuesEmpty(
            f"--queues {text!r:.40} names no queue",
            "name the queues to run, e.g. --queues default,mail, or leave --queues out to run "
            "every queue the jobs declare",
        )
    return ",".join(names)


WORKER_CONNECTIONS = 4
"""Connections a ``jobcore worker`` process's driver opens at most, unless told otherwise."""
_BUDGETED = {"postgresql": ("pool_max",), "postgres": ("pool_max",), "mongodb": ("pool_max", "maxpoolsize"),
             "mongodb+srv": ("pool_max", "maxpoolsize")}


def connection_budget(url: str, connections: object) -> dict[str, int]:
    """The driver option bounding a worker's connections for ``url``: ``--connections`` when
    given, else :data:`WORKER_CONNECTIONS` unless the URL sets its own pool size (none for a
    driver without a pool, such as ``memory://``)."""
    if connections is not None:
        connections = v.check_int(connections, "--connections", 1, 1000)
    parts = urlsplit(url)
    names = _BUDGETED.get(parts.scheme.lower())
    if names is None:
        return {}
    if connections is None:
        given = {name.lower() for name, _ in parse_qsl(parts.query.replace(";", "&"), keep_blank_values=True)}
        if given & set(names):
            return {}
        connections = WORKER_CONNECTIONS
    return {"pool_max": int(connections)}


def tune_gc(before: tuple[int, ...]) -> bool:
    """Raise the youngest generation's threshold to :data:`GC_YOUNG_THRESHOLD` (the older
    generations' stay), where it is lower and still ``before``: the thresholds the process
    had before the jobs module was imported. A module that set its own keeps them, and a
    collector turned off stays off. Answers whether it changed anything."""
    now = gc.get_threshold()
    if now != before or not gc.isenabled() or not 0 < now[0] < GC_YOUNG_THRESHOLD:
        return False
    gc.set_threshold(GC_YOUNG_THRESHOLD, *now[1:])
    return True


def _run_worker(args: argparse.Namespace) -> int:
    queues_given = _queues_option(args.queues)  # refused before anything is imported or connected
    thresholds = gc.get_threshold()
    if args.module is not None:  # None: the caller imported the jobs (manage.py jobcore_worker)
        import_jobs(args.module)
    tune_gc(thresholds)
    if not len(default_registry):
        raise ConfigurationError(
            f"{args.module or 'the imported modules'} declares no jobs",
            "decorate its handlers with @job, or name the module that does",
        )
    if args.driver is not None and args.connections is not None:
        v.check_int(args.connections, "--connections", 1, 1000)
    # A stop signal while connecting or migrating is kept, not fatal: the migration in
    # progress finishes, then the worker exits 0 without starting.
    early: list[signal.Signals] = []
    restore_early = on_stop_signals(early.append)
    try:
        with open_store(args, options=lambda url: connection_budget(url, args.connections)) as driver:
            prepare_schema(driver, migrate=args.migrate, what="worker")
            queues = queues_given or ",".join(sorted(default_registry.queues()))
            worker = Worker(
                queues, concurrency=args.concurrency, lease=args.lease, margin=args.margin,
                strict_starts=args.strict_starts, driver=driver,
                poll_interval=args.poll_interval,
                drain_timeout=args.drain_timeout, worker_id=args.worker_id,
                rescue_interval=args.rescue_interval or None,
                retention=None if args.no_prune else DEFAULT_RETENTION, prune_interval=args.prune_interval,
                scheduler=not args.no_scheduler, tracebacks=args.tracebacks,
                summary_interval=args.summary_interval or None, progress_interval=args.progress_interval,
            )
            metrics = None
            if args.metrics_port is not None:
                from jobcore.metrics import start_metrics_server  # noqa: PLC0415 - the optional extra loads only when asked

                metrics = start_metrics_server(args.metrics_port, driver=driver)
                worker.log.info("serving metrics on port %d at /metrics", metrics.port)
            previous = set_job_driver(driver)
            restore = worker.stop_on_signals()
            try:
                if early:  # asked to stop while connecting or migrating: the worker never starts
                    worker.log.warning("%s received while starting: the worker does not start", early[0].name)
                else:
                    worker.run()
            finally:
                restore()
                if metrics is not None:
                    metrics.close()
                set_job_driver(previous)
    finally:
        restore_early()
    return 0

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
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from jobcore import validate as v
from jobcore.current import connect, set_job_driver
from jobcore.driver import JobDriver
from jobcore.errors import ClaimQueuesEmpty, ConfigurationError, SchemaOutdated, UrlInvalid
from jobcore.registry import default_registry
from jobcore.retention import DEFAULT_PRUNE_INTERVAL
from jobcore.worker import DEFAULT_RETENTION, Worker

__all__ = [
    "FLUSH_DELAY", "LOG_FORMAT", "WORKER_CONNECTIONS", "BatchedStderrHandler", "JobFieldsFilter", "configure_logging",
    "connection_budget", "import_jobs", "register",
]

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [job %(job_id)s %(job_name)s] %(message)s"


class JobFieldsFilter(logging.Filter):
    """Gives records without job fields (library or loop-level ones) ``-`` for them."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name in ("job_id", "job_name"):
            if not hasattr(record, name):
                setattr(record, name, "-")
        return True


class _Formatter(logging.Formatter):
    """:data:`LOG_FORMAT`, its date and time text made once a second, not once a record (one per job)."""

    _second = -1
    _stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:  # records are formatted under the handler's lock
            self._stamp = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return f"{self._stamp},{int(record.msecs):03d}"  # the stdlib's default_msec_format


FLUSH_DELAY = 0.05
"""Seconds an INFO (or lower) line may wait in :class:`BatchedStderrHandler` before it is written."""


class BatchedStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes formatted records in batches: one write for every line due, not one per line.

    A record at WARNING or above is written at once, after every line waiting before it; lower
    ones wait at most :data:`FLUSH_DELAY` seconds. A busy worker logs a line per finished job,
    and a write per line (a system call, on a line-buffered stderr) cost about as much as
    making the line. ``flush()``, ``close()`` and interpreter exit write what waits; a killed
    process loses at most the last :data:`FLUSH_DELAY` seconds of INFO lines.
    """

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._waiting: list[str] = []
        self._due = threading.Event()
        self._closing = False
        threading.Thread(target=self._flusher, name="jobcore-log-flush", daemon=True).start()

    def emit(self, record: logging.LogRecord) -> None:  # called under the handler's lock
        try:
            self._waiting.append(self.format(record))
            if record.levelno >= logging.WARNING or len(self._waiting) >= 1000:
                self._write()
            elif not self._due.is_set():  # the flusher clears it before it takes the lock to write
                self._due.set()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def _write(self) -> None:
        if self._waiting:
            text = self.terminator.join(self._waiting) + self.terminator
            self._waiting.clear()
            self.stream.write(text)
            self.stream.flush()

    def flush(self) -> None:
        """Write every waiting line now."""
        self.acquire()
        try:
            self._write()
        finally:
            self.release()

    def _flusher(self) -> None:
        while not self._closing:
            self._due.wait()
            time.sleep(FLUSH_DELAY)
            self._due.clear()
            with contextlib.suppress(OSError, ValueError):  # stderr closed under us: nothing to do
                self.flush()

    def close(self) -> None:
        """Write what waits and stop the flushing thread."""
        self._closing = True
        self._due.set()
        with contextlib.suppress(OSError, ValueError):
            self.flush()
        super().close()


def configure_logging(level: str = "INFO") -> tuple[logging.Handler, int]:
    """Log to stderr with :data:`LOG_FORMAT`; answers the handler added and the root's previous level."""
    handler = BatchedStderrHandler(sys.stderr)
    handler.setFormatter(_Formatter(LOG_FORMAT))
    handler.addFilter(JobFieldsFilter())
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler, previous


def import_jobs(target: str) -> ModuleType:
    """Import ``target`` (dotted module name or ``.py`` path) so its ``@job`` handlers register."""
    if target.endswith(".py") or os.sep in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise ConfigurationError(f"no such file {target}", "pass a module name or the path of a .py file")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ConfigurationError(f"cannot import {target}", "pass a module name or the path of a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the current directory import
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and target.startswith(exc.name):
            raise ConfigurationError(
                f"cannot import {target!r}: no module named {exc.name!r}",
                "run from the project directory, or pass the path of the .py file",
            ) from exc
        raise


def add_migrate_option(parser: argparse.ArgumentParser, what: str) -> None:
    """The ``--migrate`` flag of the long-running commands (the worker, the scheduler, the demo)."""
    parser.add_argument(
        "--migrate", action="store_true",
        help=f"install or upgrade the store's schema before the {what} starts (default: never run DDL; a missing "
        "or older schema is refused with JC_SCHEMA_OUTDATED; production runs `jobcore migrate` once per deploy)",
    )


def prepare_schema(driver: JobDriver, *, migrate: bool, what: str) -> None:
    """Migrate when told to (``--migrate``, or ``auto_migrate`` on the driver); otherwise
    refuse, before anything starts, a store whose schema is missing or older than this
    jobcore's. Reads only, unless told to migrate."""
    log = logging.getLogger("jobcore.cli")
    if migrate or getattr(driver, "auto_migrate", False):
        done = driver.migrate()
        log.info("schema: %s", done.describe())
        return
    plan = driver.migrate(dry_run=True)
    if plan.changed:
        state = "is not installed" if plan.before is None else f"is at version {plan.before}"
        raise SchemaOutdated(
            f"jobcore's schema on this store {state}; this jobcore needs version {plan.latest}, and a {what} "
            "runs no DDL unless told to",
            f"run `jobcore migrate --url ...` once per deploy before starting the {what} (docs/deploy.md), "
            f"or pass --migrate to let this {what} run it",
        )


def register(subparsers: Any) -> None:
    """Add the ``worker`` sub-command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "worker", help="run a worker for the jobs a module declares",
        description="Import MODULE (registering its @job handlers) and run a worker until SIGTERM/SIGINT.",
    )
    parser.add_argument("module", metavar="MODULE", help="dotted module name or path of a .py file declaring jobs")
    parser.add_argument("--url", default=os.environ.get("JOBCORE_URL"), help="driver URL (default: $JOBCORE_URL)")
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
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="seconds to drain on stop (default 30)")
    parser.add_argument("--rescue-interval", type=float, default=60.0, help="seconds between rescue sweeps (60)")
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
        "--metrics-port", type=int, default=None,
        help="serve Prometheus metrics on this port at /metrics (needs jobcore-queue[metrics]; default: off)",
    )
    parser.add_argument("--log-level", default=os.environ.get("JOBCORE_LOG_LEVEL", "INFO"), help="logging level")
    parser.set_defaults(func=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    """Handler of ``jobcore worker``."""
    handler, level = configure_logging(args.log_level)
    try:
        return _run_worker(args)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        logging.getLogger().setLevel(level)


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


def _run_worker(args: argparse.Namespace) -> int:
    queues_given = _queues_option(args.queues)  # refused before anything is imported or connected
    import_jobs(args.module)
    if not len(default_registry):
        raise ConfigurationError(
            f"{args.module} declares no jobs", "decorate its handlers with @job, or name the module that does"
        )
    driver = args.driver
    owned = driver is None
    if driver is None:
        if not args.url:
            raise UrlInvalid("no driver URL given", "pass --url postgresql://... or set JOBCORE_URL")
        driver = connect(args.url, **connection_budget(args.url, args.connections))
    elif args.connections is not None:
        v.check_int(args.connections, "--connections", 1, 1000)
    try:
        prepare_schema(driver, migrate=args.migrate, what="worker")
    except BaseException:
        if owned:
            driver.close()
        raise
    queues = queues_given or ",".join(sorted(default_registry.queues()))
    worker = Worker(
        queues, concurrency=args.concurrency, lease=args.lease, margin=args.margin,
        strict_starts=args.strict_starts, driver=driver,
        poll_interval=args.poll_interval,
        drain_timeout=args.drain_timeout, worker_id=args.worker_id, rescue_interval=args.rescue_interval or None,
        retention=None if args.no_prune else DEFAULT_RETENTION, prune_interval=args.prune_interval,
        scheduler=not args.no_scheduler,
    )
    metrics = None
    if args.metrics_port is not None:
        from jobcore.metrics import start_metrics_server  # noqa: PLC0415 - the optional extra loads only when asked

        try:
            metrics = start_metrics_server(args.metrics_port, driver=driver)
        except BaseException:
            if owned:
                driver.close()
            raise
        worker.log.info("serving metrics on port %d at /metrics", metrics.port)
    previous = set_job_driver(driver)
    restore = _install_signal_handlers(worker)
    try:
        worker.run()
    finally:
        restore()
        if metrics is not None:
            metrics.close()
        set_job_driver(previous)
        if owned:
            driver.close()
    return 0


def _install_signal_handlers(worker: Worker) -> Any:
    """SIGTERM/SIGINT drain the worker; a second one abandons in-flight jobs. Answers an undo function."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    signals = [signal.SIGINT, signal.SIGTERM]
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 1:
            worker.log.warning("%s received: draining (send it again to stop at once)", name)
            worker.request_stop()
        else:
            worker.log.warning("%s received again: abandoning in-flight jobs", name)
            worker.request_stop(drain_timeout=0)

    previous = {sig: signal.signal(sig, on_signal) for sig in signals}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore

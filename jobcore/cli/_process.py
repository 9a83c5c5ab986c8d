"""What the long-running commands (``jobcore worker``, ``jobcore scheduler``) share: logging
on stderr, each record carrying the job id and name, and importing the application's modules
so their ``@job`` handlers and schedules register.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import threading
import time
from argparse import ArgumentParser
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from jobcore._signals import on_stop_signals
from jobcore.errors import ConfigurationError, OptionInvalid

__all__ = [
    "FLUSH_DELAY", "LEVEL_NAMES", "LOG_FORMAT", "BatchedStderrHandler", "JobFieldsFilter", "add_log_level_option",
    "configure_logging", "import_jobs", "log_levels", "logging_to_stderr", "on_stop_signals",
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


LEVEL_NAMES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""The level names ``--log-level`` takes (any case; ``WARN`` and ``FATAL`` too), beside whole numbers 0-50."""
_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}
_LOG_LEVEL_FIX = (
    "pass a level (DEBUG, INFO, WARNING, ERROR, CRITICAL, or a number 0-50), optionally followed by "
    "LOGGER=LEVEL pairs, e.g. --log-level INFO,jobcore.events=WARNING (or set JOBCORE_LOG_LEVEL)"
)


def add_log_level_option(parser: ArgumentParser) -> None:
    """``--log-level`` of the long-running commands (default ``$JOBCORE_LOG_LEVEL``, else INFO)."""
    parser.add_argument(
        "--log-level", default=os.environ.get("JOBCORE_LOG_LEVEL", "INFO"), metavar="LEVEL[,LOGGER=LEVEL...]",
        help="level of what is logged on stderr, then any loggers set apart as LOGGER=LEVEL, e.g. "
        "INFO,jobcore.events=WARNING (default: $JOBCORE_LOG_LEVEL, else INFO)",
    )


def _level(text: str, spec: str) -> int:
    name = text.strip().upper()
    if name.isdigit() and int(name) <= 50:
        return int(name)
    name = _LEVEL_ALIASES.get(name, name)
    if name not in LEVEL_NAMES:
        raise OptionInvalid(f"--log-level {spec!r:.80}: {text.strip()!r:.40} is not a logging level", _LOG_LEVEL_FIX)
    return int(getattr(logging, name))


def log_levels(spec: str) -> dict[str, int]:
    """``--log-level``'s value read: the level of each logger it names, ``""`` for the root.

    ``spec`` is comma-separated: a bare level sets the root's (the one stderr shows; INFO
    when only loggers are named), and ``LOGGER=LEVEL`` sets that logger's, whatever the
    root's (``INFO,jobcore.events=WARNING``: everything at INFO but the line per job). A
    level is a name of :data:`LEVEL_NAMES` in any case, or a whole number from 0 to 50.
    Anything else, a logger or the root named twice, or no level at all, is refused with
    ``JC_OPTION_INVALID`` before any logging is set up.
    """
    levels: dict[str, int] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        logger_name, sep, level_text = item.rpartition("=") if "=" in item else ("", "", item)
        logger_name = logger_name.strip()
        if sep and (not logger_name or any(ch.isspace() for ch in logger_name)):
            raise OptionInvalid(f"--log-level {spec!r:.80}: {item.strip()!r:.60} names no logger", _LOG_LEVEL_FIX)
        value = _level(level_text, spec)
        if logger_name in levels:
            what = f"logger {logger_name}" if logger_name else "the level"
            raise OptionInvalid(f"--log-level {spec!r:.80} gives {what} twice", _LOG_LEVEL_FIX)
        levels[logger_name] = value
    if not levels:
        raise OptionInvalid(f"--log-level {spec!r:.80} names no level", _LOG_LEVEL_FIX)
    levels.setdefault("", logging.INFO)
    return levels


def configure_logging(level: str = "INFO") -> tuple[logging.Handler, dict[str, int]]:
    """Log to stderr with :data:`LOG_FORMAT` at the levels of ``level`` (an ``--log-level``
    value: see :func:`log_levels`, which refuses a bad one before anything changes); answers
    the handler added and the previous level of each logger it set (``""``: the root)."""
    levels = log_levels(level)
    handler = BatchedStderrHandler(sys.stderr)
    handler.setFormatter(_Formatter(LOG_FORMAT))
    handler.addFilter(JobFieldsFilter())
    previous = {name: logging.getLogger(name or None).level for name in levels}
    logging.getLogger().addHandler(handler)
    for name, value in levels.items():
        logging.getLogger(name or None).setLevel(value)
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


@contextlib.contextmanager
def logging_to_stderr(level: str) -> Iterator[None]:
    """:func:`configure_logging` while a command runs; then the handler is closed and the levels it set restored."""
    handler, previous = configure_logging(level)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        for name, value in previous.items():
            logging.getLogger(name or None).setLevel(value)



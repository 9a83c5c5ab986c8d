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
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from jobcore._signals import on_stop_signals
from jobcore.errors import ConfigurationError

__all__ = [
    "FLUSH_DELAY", "LOG_FORMAT", "BatchedStderrHandler", "JobFieldsFilter", "configure_logging", "import_jobs",
    "logging_to_stderr", "on_stop_signals",
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


@contextlib.contextmanager
def logging_to_stderr(level: str) -> Iterator[None]:
    """:func:`configure_logging` while a command runs; then the handler is closed and the root's level restored."""
    handler, previous = configure_logging(level)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        logging.getLogger().setLevel(previous)



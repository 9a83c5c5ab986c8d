"""How every ``jobcore`` command prints: results on stdout, notes and refusals on stderr, exit statuses.

A result is text (:func:`out`, tables by :func:`table`) or, with ``--json``, one JSON
document (:func:`print_json`); progress and prompts go to stderr (:func:`note`) so a
pipe (``jobcore ls --json | jq``) reads the result alone. A refused command prints its
error's code, cause and fix on stderr (:func:`print_error`) and exits with the status
of the error's class (:data:`EXIT_CODES`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone

from jobcore import errors
from jobcore.records import Progress

__all__ = [
    "EXIT_CODES", "STATE_COLOURS", "age", "clip", "exit_code_for", "iso", "note", "out", "print_error", "print_json",
    "progress_bar", "progress_cell", "progress_line", "table", "when",
]

EXIT_CODES: tuple[tuple[type[errors.JobcoreError], int], ...] = (
    (errors.InvalidInput, 2),
    (errors.JobNotFound, 3),
    (errors.ScheduleNotFound, 3),
    (errors.JobStateConflict, 4),
    (errors.ConfigurationError, 5),
    (errors.BackendError, 6),
    (errors.WaitTimeout, 7),
    (errors.JobcoreError, 1),
)
"""Exit status per class of refusal, most specific first (argparse's own usage errors are 2 too)."""


STATE_COLOURS: dict[str, str] = {
    "scheduled": "#6b6fd4",
    "ready": "#1f7ae0",
    "running": "#c77c02",
    "suspended": "#8a5cc2",
    "done": "#1d8a4e",
    "failed": "#d0481f",
    "dead": "#b3123a",
    "cancelled": "#6b7280",
}
"""One colour per job state, the palette every jobcore front end draws states in (the web
dashboard's badges and charts read it from here; a colouring terminal front end should too)."""


def exit_code_for(exc: errors.JobcoreError) -> int:
    """The documented exit status for ``exc``."""
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


def print_error(exc: errors.JobcoreError) -> int:
    """Print ``exc``'s code, cause and fix on stderr; answers the exit status of its class."""
    print(f"error {exc.code}: {exc.cause}\n  fix: {exc.fix}", file=sys.stderr)
    return exit_code_for(exc)


def out(text: str) -> None:
    """One line (or block) on stdout. A reader that went away (``jobcore ls | head``) ends output quietly."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so later writes and the interpreter's final flush stay quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def print_json(data: object) -> None:
    """``data`` as one indented JSON document on stdout (the ``--json`` form of every command)."""
    out(json.dumps(data, indent=2, ensure_ascii=False))


def note(text: str, *, end: str = "\n") -> None:
    """A progress line or prompt on stderr, never mixed into the result on stdout."""
    print(text, end=end, file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column (usually an error text) is not padded."""
    body = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in body) for i in range(len(headers))]
    # The last column is not padded, so lines carry no trailing blanks.
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)), r[-1]]).rstrip() for r in body
    )


def iso(value: datetime | None) -> str | None:
    """A time in JSON output: ISO 8601 with milliseconds, as stored (UTC)."""
    return None if value is None else value.isoformat(timespec="milliseconds")


def when(value: datetime | None) -> str:
    """A time in text output: ``2030-01-01 12:00:00Z``, or ``-``."""
    return "-" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def age(delta: timedelta) -> str:
    """A short human duration: ``45s``, ``12m05s``, ``3h02m``, ``2d04h``."""
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def progress_bar(value: float | None, width: int = 20) -> str:
    """``[##########----------]  50%`` for a fraction 0..1; ``[working...]`` without one."""
    if value is None:
        return "[working...]"
    filled = round(max(0.0, min(1.0, value)) * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {value:4.0%}"


def progress_line(progress: Progress | None, now: datetime) -> str:
    """A job's stored progress on one line: bar, percent, message and age, or ``-``."""
    if progress is None:
        return "-"
    parts = [progress_bar(progress.value)]
    if progress.message:
        parts.append(" ".join(progress.message.split()))
    parts.append(f"({age(now - progress.updated_at)} ago)")
    return "  ".join(parts)


def progress_cell(progress: Progress | None) -> str:
    """A job's stored progress in a table cell: percent and message, clipped."""
    if progress is None:
        return "-"
    percent = "" if progress.value is None else f"{progress.value:.0%}"
    return clip(" ".join(p for p in (percent, progress.message or "") if p) or "reported", 30)


def clip(text: str, width: int = 60) -> str:
    """``text`` on one line (tracebacks and newlines would break a table), cut to ``width`` with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"

"""The ``jobcore`` command: a thin dispatcher over the command modules.

Each module in :data:`COMMAND_MODULES` exposes ``register(subparsers)``, adding its
sub-commands with ``set_defaults(func=handler)``; a handler takes the parsed
arguments and answers the exit status. A refused command prints the error's code,
cause and fix on stderr and exits with the status of its class (see ``EXIT_CODES``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobcore import errors

if TYPE_CHECKING:
    from jobcore.driver import JobDriver

__all__ = ["COMMAND_MODULES", "EXIT_CODES", "build_parser", "exit_code_for", "main"]

COMMAND_MODULES = (
    "jobcore.cli_ops",
    "jobcore.cli_worker",
    "jobcore.cli_schedules",
    "jobcore.cli_prune",
    "jobcore.demo",
)

EXIT_CODES: tuple[tuple[type[errors.JobcoreError], int], ...] = (
    (errors.InvalidInput, 2),
    (errors.JobNotFound, 3),
    (errors.ScheduleNotFound, 3),
    (errors.JobStateConflict, 4),
    (errors.ConfigurationError, 5),
    (errors.BackendError, 6),
    (errors.JobcoreError, 1),
)
"""Exit status per class of refusal, most specific first (argparse's own usage errors are 2 too)."""


def exit_code_for(exc: errors.JobcoreError) -> int:
    """The documented exit status for ``exc``."""
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every command module's sub-commands."""
    parser = argparse.ArgumentParser(prog="jobcore", description="Durable background jobs: run, inspect, repair.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a command module not written yet
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, *, driver: JobDriver | None = None) -> int:
    """Run the CLI; answers the exit status.

    ``driver`` (for in-process tests) is used instead of connecting to ``--url``; the
    commands leave it open.
    """
    args = build_parser().parse_args(argv)
    args.driver = driver
    try:
        return int(args.func(args) or 0)
    except errors.JobcoreError as exc:
        print(f"error {exc.code}: {exc.cause}\n  fix: {exc.fix}", file=sys.stderr)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

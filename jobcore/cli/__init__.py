"""The ``jobcore`` command: a thin dispatcher over the command modules.

Each module in :data:`COMMAND_MODULES` (one per command group: :mod:`~jobcore.cli.ops`,
:mod:`~jobcore.cli.worker`, :mod:`~jobcore.cli.schedules`, :mod:`~jobcore.cli.prune`,
:mod:`~jobcore.cli.demo`, :mod:`~jobcore.cli.web`) exposes ``register(subparsers)``, adding its sub-commands with
``set_defaults(func=handler)``; a handler takes the parsed arguments and answers the exit
status. Every command finds and opens its store the one way :mod:`jobcore.cli._store`
does (``--url``, else ``$JOBCORE_URL``) and prints the one way :mod:`jobcore.cli._output`
does. A refused command prints the error's code, cause and fix on stderr and exits with
the status of its class (see ``EXIT_CODES``). ``python -m jobcore.cli`` runs it too.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobcore import errors
from jobcore.cli._output import EXIT_CODES, exit_code_for, print_error

if TYPE_CHECKING:
    from jobcore.driver import JobDriver

__all__ = ["COMMAND_MODULES", "EXIT_CODES", "build_parser", "exit_code_for", "main"]

COMMAND_MODULES = (
    "jobcore.cli.ops",
    "jobcore.cli.worker",
    "jobcore.cli.schedules",
    "jobcore.cli.prune",
    "jobcore.cli.demo",
    "jobcore.cli.web",
)


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
        return print_error(exc)
    except KeyboardInterrupt:
        return 130


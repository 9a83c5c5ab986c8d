"""How every ``jobcore`` command finds and opens its store, and checks its schema.

The URL is ``--url``, else the ``JOBCORE_URL`` environment variable (read when the
command runs), else the command's own default (only ``demo`` has one: ``memory://``).
With none, the command is refused before anything is imported or connected.
:func:`open_store` is the one way a command gets its driver: the one handed to
:func:`jobcore.cli.main` in-process (left open), or one connected from the URL and
closed when the command ends.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from jobcore.current import connect
from jobcore.driver import JobDriver
from jobcore.errors import NoDriver, SchemaOutdated

__all__ = [
    "ENV_URL", "URL_HELP", "add_migrate_option", "add_url_option", "common_options", "open_store", "prepare_schema",
    "store_url",
]

ENV_URL = "JOBCORE_URL"
"""Environment variable holding the driver URL when ``--url`` is not given."""

URL_HELP = f"driver URL: postgresql://..., mongodb://..., memory:// (default: ${ENV_URL})"


def add_url_option(parser: argparse.ArgumentParser, *, help_text: str = URL_HELP, suppress: bool = False) -> None:
    """The ``--url`` option. ``suppress``: leave ``args.url`` unset when not given (for an option
    repeated after a sub-command's verb, so it does not reset one given before the verb)."""
    parser.add_argument("--url", default=argparse.SUPPRESS if suppress else None, help=help_text)


def common_options() -> argparse.ArgumentParser:
    """A parent parser with ``--url`` and ``--json``, shared by every command reading or steering the store."""
    common = argparse.ArgumentParser(add_help=False)
    add_url_option(common)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    return common


def store_url(args: argparse.Namespace, default: str | None = None) -> str | None:
    """The URL this command uses: ``--url``, else ``$JOBCORE_URL``, else ``default``."""
    return getattr(args, "url", None) or os.environ.get(ENV_URL) or default


@contextlib.contextmanager
def open_store(
    args: argparse.Namespace,
    *,
    default: str | None = None,
    options: Callable[[str], dict[str, Any]] | None = None,
) -> Iterator[JobDriver]:
    """The driver for this command: the one handed to ``main`` in-process, else one connected from
    :func:`store_url` (``options(url)`` are extra driver options) and closed on the way out.

    No URL at all is refused with ``JC_NO_DRIVER`` (exit 5), the same for every command.
    """
    given: JobDriver | None = getattr(args, "driver", None)
    if given is not None:
        yield given
        return
    url = store_url(args, default)
    if not url:
        raise NoDriver(
            f"no driver URL: neither --url nor {ENV_URL} is set",
            f"pass --url postgresql://user@host/db (or mongodb://host/db, memory://), or export {ENV_URL}",
        )
    driver = connect(url, **(options(url) if options is not None else {}))
    try:
        yield driver
    finally:
        driver.close()


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

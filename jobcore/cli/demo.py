"""``jobcore demo``: the command running :class:`jobcore.demo.Demo` (on ``memory://`` unless told otherwise)."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Any

from jobcore.cli._store import ENV_URL, add_migrate_option, add_url_option, open_store, prepare_schema
from jobcore.demo import Demo
from jobcore.errors import OptionInvalid

__all__ = ["register", "run_demo"]

DEFAULT_URL = "memory://"
"""The demo's store when neither ``--url`` nor ``$JOBCORE_URL`` is given."""


def register(subparsers: Any) -> None:
    """Add the ``demo`` sub-command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo", help="run thousands of jobs through several workers and show what happens",
        description="Enqueue thousands of jobs, run several workers, crash one, and check nothing was lost.",
    )
    add_url_option(parser, help_text=f"driver URL (default: ${ENV_URL}, else {DEFAULT_URL})")
    parser.add_argument("--jobs", type=int, default=3000, help="bulk jobs to enqueue (default 3000)")
    parser.add_argument("--workers", type=int, default=3, help="workers besides the one that crashes (default 3)")
    parser.add_argument("--seconds", type=float, default=60.0, help="give up after this long (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="seed for the demo's random choices")
    add_migrate_option(parser, "demo")
    parser.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Handler of ``jobcore demo``."""
    if args.jobs < 1 or args.workers < 1 or not 0 < args.seconds < math.inf:
        raise OptionInvalid(
            "--jobs and --workers must be >= 1 and --seconds a finite number > 0",
            "leave them out for the defaults (--jobs 3000 --workers 3 --seconds 60)",
        )
    # The demo narrates on stdout; keep the workers' own warnings (retries...) off the screen.
    logging.getLogger("jobcore").addHandler(logging.NullHandler())
    with open_store(args, default=DEFAULT_URL) as driver:
        prepare_schema(driver, migrate=args.migrate, what="demo")
        return Demo(driver, jobs=args.jobs, out=sys.stdout, seed=args.seed).run(
            workers=args.workers, seconds=args.seconds
        )

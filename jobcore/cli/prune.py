"""``jobcore prune``: delete finished jobs older than a retention policy (rules R).

A thin layer over ``driver.introspect.prune``. Each state's age comes from
``--done``, ``--failed``, ``--cancelled`` and ``--dead`` (``7d``, ``12h``, ``30m``,
``45s``, ``1d12h``, ``0`` for "as soon as finished", ``never`` to keep that state),
defaulting to :class:`~jobcore.records.RetentionPolicy`'s. One run deletes at most
``--limit`` rows (one prune call, in batches of ``--batch`` rows each its own short
step) and says how many stay eligible; ``--all`` calls again until none does, so a
first prune of a large backlog can be run in one command, or in bounded slices from
cron. ``--dry-run`` deletes nothing and counts what would go. No confirmation is asked:
pruning only ever takes what the policy already allows (workers do it on their own).
"""

from __future__ import annotations

import argparse
import re
from datetime import timedelta
from typing import Any

from jobcore import validate as v
from jobcore.cli._output import note, out, print_json, table
from jobcore.cli._store import common_options, open_store
from jobcore.errors import OptionInvalid
from jobcore.records import JobState, PruneResult, RetentionPolicy

__all__ = ["format_age", "parse_age", "register"]

_STATES = (JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.DEAD)
_UNITS = {"w": 7 * 86_400, "d": 86_400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)([wdhms])")
_NEVER = ("never", "forever", "none")


def parse_age(text: str, option: str = "age") -> timedelta | None:
    """``7d``, ``12h``, ``30m``, ``45s``, ``1d12h``, ``0`` as a timedelta; ``never`` as ``None``.

    Anything else is refused ``JC_OPTION_INVALID`` (a bare number other than 0 too:
    "7" could mean days or seconds).
    """
    raw = text.strip().lower()
    if raw in _NEVER:
        return None
    if raw == "0":
        return timedelta(0)
    if not raw or "".join(m.group(0) for m in _PART.finditer(raw)) != raw:
        raise OptionInvalid(
            f"{option} {text!r:.40} is not an age",
            "write a number with a unit (w, d, h, m, s), e.g. 7d, 12h, 1d12h, or 0, or never",
        )
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(raw))
    if seconds > v.MAX_DELAY.total_seconds():
        raise OptionInvalid(f"{option} {text!r:.40} is too long", f"pass at most {v.MAX_DELAY.days}d, or never")
    return timedelta(seconds=seconds)


def format_age(age: timedelta | None) -> str:
    """``age`` the way :func:`parse_age` reads it back: ``1d``, ``7d``, ``1d12h``, ``0``, ``never``."""
    if age is None:
        return "never"
    seconds = int(age.total_seconds())
    if seconds == 0:
        return "0" if age == timedelta(0) else f"{age.total_seconds():g}s"
    parts = []
    for unit, size in _UNITS.items():
        if unit == "w":
            continue  # weeks read worse than days in a table
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _policy(args: argparse.Namespace) -> RetentionPolicy:
    defaults = RetentionPolicy()
    ages: dict[str, Any] = {}
    for state in _STATES:
        given = getattr(args, state.value)
        ages[state.value] = defaults.age(state) if given is None else parse_age(given, f"--{state.value}")
    return RetentionPolicy(**ages)


def _data(
    policy: RetentionPolicy, removed: dict[JobState, int], last: PruneResult, args: argparse.Namespace, calls: int
) -> dict[str, Any]:
    return {
        "dry_run": args.dry_run,
        "policy": {s.value: format_age(policy.age(s)) for s in _STATES},
        "removed": {s.value: removed.get(s, 0) for s in _STATES},
        "remaining": {s.value: last.remaining.get(s, 0) for s in _STATES},
        "total_removed": sum(removed.values()),
        "total_remaining": last.total_remaining,
        "calls": calls,
    }


def _cmd_prune(args: argparse.Namespace) -> int:
    policy = _policy(args)
    removed = dict.fromkeys(_STATES, 0)
    calls = 0
    with open_store(args) as driver:
        while True:
            result = driver.introspect.prune(policy, limit=args.limit, batch=args.batch, dry_run=args.dry_run)
            calls += 1
            for state, count in result.removed.items():
                removed[JobState(state)] = removed.get(JobState(state), 0) + count
            if args.all and not args.dry_run:
                note(f"prune: {sum(removed.values())} removed so far, {result.total_remaining} remaining")
            # A call that removed nothing while rows stay eligible (locked by a concurrent
            # pruner) ends the loop too, rather than spinning on them.
            if not args.all or args.dry_run or result.total_remaining == 0 or result.total_removed == 0:
                break
    data = _data(policy, removed, result, args, calls)
    if args.json:
        print_json(data)
        return 0
    rows = [
        [s.value, data["policy"][s.value], str(data["removed"][s.value]), str(data["remaining"][s.value])]
        for s in _STATES
    ]
    rows.append(["(all)", "", str(data["total_removed"]), str(data["total_remaining"])])
    out(table(["STATE", "KEPT FOR", "REMOVED", "STILL ELIGIBLE"], rows))
    if args.dry_run:
        out(f"dry run: nothing deleted; {data['total_remaining']} jobs are eligible")
    elif data["total_remaining"]:
        out(f"{data['total_remaining']} eligible jobs remain: run again, or pass --all")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``jobcore prune`` to the ``jobcore`` parser."""
    summary = "delete finished jobs older than the retention policy, oldest first"
    p = subparsers.add_parser("prune", parents=[common_options()], help=summary, description=summary)
    ages = p.add_argument_group("policy (ages: 7d, 12h, 30m, 45s, 1d12h, 0, never)")
    defaults = RetentionPolicy()
    for state in _STATES:
        ages.add_argument(
            f"--{state.value}",
            metavar="AGE",
            default=None,
            help=f"keep {state.value} jobs this long (default {format_age(defaults.age(state))})",
        )
    p.add_argument(
        "--limit",
        type=int,
        default=v.DEFAULT_PRUNE_ROWS,
        help=f"most rows one call deletes, 1..{v.MAX_PRUNE_ROWS} (default {v.DEFAULT_PRUNE_ROWS})",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=v.DEFAULT_PRUNE_BATCH,
        help=f"rows per delete step, 1..{v.MAX_BULK_ROWS} (default {v.DEFAULT_PRUNE_BATCH})",
    )
    p.add_argument("--all", action="store_true", help="call again until no eligible job remains")
    p.add_argument("--dry-run", action="store_true", help="delete nothing; count what is eligible")
    p.set_defaults(func=_cmd_prune)

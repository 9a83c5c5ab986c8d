"""Rate limits: at most ``limit`` starts of a job (or of one key of it) per ``per`` window, fleet-wide.

``@job(rate_limit=RateLimit(10, per=timedelta(seconds=1), key=lambda p: p["partner"]))``.
The limit is held by the store, not by a process: each start takes one slot of the
fleet lease ``jobcore:rate:NAME[:KEY]`` (rules K) for ``per`` and never gives it back, so
at most ``limit`` starts fall within any window of that length on the store's clock,
however many workers race. A job over its limit is given back without spending an
attempt, due when the earliest slot expires (T01-T03 in docs/rules.md).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from jobcore import validate as v
from jobcore.driver import Duration
from jobcore.errors import OptionInvalid
from jobcore.vocabulary import MAX_LEASE_SLOTS, MAX_NAME_LENGTH

__all__ = ["RATE_KEY_PREFIX", "RateLimit"]

RATE_KEY_PREFIX = "jobcore:rate:"
"""Fleet lease keys of rate limits start with this (``jobcore slots --key`` shows them)."""


class RateLimit:
    """At most ``limit`` starts per ``per`` (seconds or timedelta), per ``key(payload)`` if given.

    Args:
        limit: Starts allowed in any window of length ``per`` (1 to ``MAX_LEASE_SLOTS``).
        per: The window: a positive finite duration, at most ``MAX_LEASE`` (7 days).
        key: ``fn(payload) -> str``: apply the limit per key (a partner, a tenant).

    Raises:
        OptionInvalid: ``JC_OPTION_INVALID`` for a non-positive ``limit`` or ``per``, or a
            ``key`` that is not callable.
    """

    __slots__ = ("key", "limit", "per")

    def __init__(self, limit: int, per: Duration, *, key: Callable[[Any], str] | None = None) -> None:
        self.limit = v.check_int(limit, "rate limit", 1, MAX_LEASE_SLOTS)
        self.per: timedelta = v.check_lease(per, "rate limit window (per=)")
        if key is not None and not callable(key):
            raise OptionInvalid("a rate limit's key must be a function of the payload", "key=lambda p: p['partner']")
        self.key = key

    def slot(self, job_name: str, payload: Any) -> str:
        """The fleet lease key this job's starts count against (a failing ``key`` raises)."""
        if self.key is None:
            return f"{RATE_KEY_PREFIX}{job_name}"
        part = self.key(payload)
        if not isinstance(part, str):
            raise OptionInvalid(
                f"the rate limit key function answered {type(part).__name__}, not str", "answer a str from key=",
            )
        slot = f"{RATE_KEY_PREFIX}{job_name}:{part}"
        if len(slot) > MAX_NAME_LENGTH:
            raise OptionInvalid(
                f"the rate limit key {slot[:60]!r}... is longer than {MAX_NAME_LENGTH} characters",
                "answer a shorter key from key= (a hash of a long one)",
            )
        return slot

    def __repr__(self) -> str:
        keyed = "" if self.key is None else ", key=..."
        return f"RateLimit({self.limit}, per={self.per.total_seconds():g}s{keyed})"

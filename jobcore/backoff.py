"""Retry delays: exponential growth with jitter, capped.

A failed attempt ``n`` (1 for the first) waits ``base * factor ** (n - 1)`` seconds,
spread by ``jitter`` (a fraction: 0.2 means +-20 %) so that jobs failing together do
not come back together, and never more than ``cap`` seconds. The worker turns the
delay into ``retry_at`` using the driver's clock.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

import attrs

from jobcore.errors import OptionInvalid

__all__ = ["DEFAULT_BACKOFF", "Backoff"]


def _finite_non_negative(_instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise OptionInvalid(
            f"Backoff.{attribute.name} must be a finite number >= 0, got {value!r}",
            "pass seconds as an int or float",
        )


def _check_factor(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    _finite_non_negative(instance, attribute, value)
    if value < 1:
        raise OptionInvalid(f"Backoff.factor must be >= 1, got {value!r}", "use 1 for a constant delay, 2 to double")


def _check_jitter(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    _finite_non_negative(instance, attribute, value)
    if value > 1:
        raise OptionInvalid(f"Backoff.jitter must be within 0..1, got {value!r}", "0.2 spreads delays by +-20 %")


@attrs.frozen(kw_only=True)
class Backoff:
    """How long a failed job waits before its next attempt.

    Attributes:
        base: Delay after the first failed attempt, in seconds.
        factor: Growth per further attempt (2 doubles the delay each time).
        cap: Longest delay, in seconds, jitter included.
        jitter: Random spread as a fraction of the delay (0 = none, 0.2 = +-20 %).
    """

    base: float = attrs.field(default=1.0, validator=_finite_non_negative)
    factor: float = attrs.field(default=2.0, validator=_check_factor)
    cap: float = attrs.field(default=300.0, validator=_finite_non_negative)
    jitter: float = attrs.field(default=0.2, validator=_check_jitter)

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay in seconds after failed attempt ``attempt`` (1-based), jitter applied."""
        exponent = max(0, attempt - 1)
        # factor ** exponent overflows for large attempt counts; past the cap it no longer matters.
        try:
            raw = self.base * self.factor**exponent
        except OverflowError:
            raw = math.inf
        raw = min(raw, self.cap)
        spread = (rng or random).uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        return max(0.0, min(self.cap, raw * (1.0 + spread)))

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """:meth:`seconds` as a ``timedelta``."""
        return timedelta(seconds=self.seconds(attempt, rng))


DEFAULT_BACKOFF = Backoff()
"""1 s, doubling, +-20 % jitter, at most 5 minutes."""

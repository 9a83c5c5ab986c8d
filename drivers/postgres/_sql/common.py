"""What every statement template shares: the declaration :class:`Sql`, the store's clock, state sets.

Time (F01): every time decision and every stored time reads :data:`NOW`, the store's
clock (``now()``, to the millisecond) unless the driver passes ``%(now)s`` (a test's
injected clock, which then stands in for the store's). Values derived from now are
computed in the SQL too, never by the client: lease expiry (``NOW + lease``), a delay's
due time, epoch milliseconds of error entries, prune cutoffs. Durations travel as whole
milliseconds (microseconds for prune ages) times an interval, which has no day part, so
the arithmetic never depends on the session's time zone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, overload

from jobcore.records import JobState
from jobcore.vocabulary import FINISHED_STATES, LIVE_STATES

__all__ = ["FINISHED", "LIVE", "NOW", "NOW_MS", "Sql", "in_list", "lit", "ms"]


class Sql:
    """One statement, declared as a class attribute whose name is the statement's name.

    Read on the class, it is the declaration: :attr:`name` and the template :attr:`text`
    (tables as ``{jobs}``, ``{leases}``, ``{schedules}``, ``{versions}``, ``{seq}``; values
    as ``%(name)s`` bind parameters). Read on a :class:`~._sql.Statements` object, it is
    the bytes rendered for that object's schema, which the object keeps in its own
    ``__dict__`` (this descriptor defines no ``__set__``), so the hot path reads a plain
    attribute.
    """

    __slots__ = ("name", "text")

    def __init__(self, text: str) -> None:
        self.text: Final = text
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Sql: ...
    @overload
    def __get__(self, obj: object, owner: type) -> bytes: ...
    def __get__(self, obj: object, owner: type) -> Sql | bytes:
        if obj is None:
            return self
        raise AttributeError(f"statement {self.name} was not rendered for this object")

    def __repr__(self) -> str:
        return f"Sql({self.name})"


NOW: Final = "coalesce(%(now)s::timestamptz, date_trunc('milliseconds', now()))"
"""The store's time for a statement: ``now()`` (the transaction's start, so one value
throughout a statement or transaction) to the millisecond, or the injected clock's
``%(now)s`` when the driver passes one. The only place the SQL reads a clock. A stable
expression, so index scans and generic plans compare against it like a parameter."""

NOW_MS: Final = f"(date_part('epoch', {NOW}) * 1000)::bigint"
""":data:`NOW` as epoch milliseconds (error entries; answered to the driver by enqueue).
``date_part`` answers a float, a third of ``extract``'s numeric cost, and exact here: a
time to the millisecond up to the year 9000 is off by under a tenth of a millisecond as a
float, which the cast rounds away."""


def ms(param: str) -> str:
    """The interval of whole milliseconds bind parameter ``param`` holds."""
    return f"(%({param})s::bigint * interval '1 millisecond')"


def lit(state: JobState) -> str:
    """A state as an SQL string literal (quoted), for templates built at import time."""
    return "'" + JobState(state).value.replace("'", "''") + "'"


def in_list(states: Iterable[JobState]) -> str:
    """States as a parenthesised SQL list of literals, in the order :class:`JobState` declares them.

    For the few places a literal list must stand in the text (a partial index's predicate,
    which the planner matches only against constants); everywhere else states travel as
    ``= ANY(%(states)s::text[])`` bind parameters."""
    chosen = frozenset(states)
    return "(" + ", ".join(lit(s) for s in JobState if s in chosen) + ")"


LIVE: Final = in_list(LIVE_STATES)
"""The live states as an SQL list (idempotency keys, schedule overlap)."""
FINISHED: Final = in_list(FINISHED_STATES)
"""The finished states as an SQL list (requeue, prune; the partial index ``jobs_finished``)."""

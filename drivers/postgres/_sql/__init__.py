"""Every statement the PostgreSQL driver sends, in one place, rendered by one function.

- :mod:`.jobs`, :mod:`.prune` and :mod:`.schedules` declare the driver's statements as
  class attributes, ``NAME = Sql(template)``: the attribute is the statement's only name.
  :class:`Statements` is all of them; an instance holds each rendered for one schema, as
  bytes ready for ``execute`` (``driver.q.CLAIM``), so the hot path never composes SQL.
- :mod:`.schema` holds the migration steps and the statements that apply them.
- :data:`SESSION` (a new connection's set-up) and :data:`LISTEN` (wake-ups) are here.

Templates name their tables as ``{jobs}``, ``{leases}``, ``{schedules}``, ``{versions}``,
``{seq}`` (and ``{schema}``, ``{seq_name}`` in migrations); :func:`render`, the one
renderer, fills those with quoted identifiers of the configured schema
(``psycopg.sql.Identifier``). Values are always bind parameters (``%(name)s``): nothing
a caller passes is ever spliced into text. Time is read only through :data:`NOW` (see
:mod:`.common`).

Variants share parts rather than editing finished SQL: ``ACK_MANY`` and
``ACK_MANY_LANDED`` are one update with two ``RETURNING`` lists.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final

from psycopg import sql

from .common import NOW, NOW_MS, Sql
from .jobs import JOB_COLUMNS, JobStatements
from .prune import PruneStatements
from .schedules import SCHEDULE_COLUMNS, ScheduleStatements

__all__ = [
    "DEFAULT_ISOLATION", "JOB_COLUMNS", "LISTEN", "NOW", "NOW_MS", "SCHEDULE_COLUMNS", "SESSION", "Sql",
    "Statements", "bound", "names", "native", "render",
]

SESSION: Final = (
    b"SELECT pg_backend_pid() = %(pid)s::int OR %(direct)s::bool,"
    b" CASE WHEN pg_backend_pid() = %(pid)s::int OR %(direct)s::bool THEN"
    b" (SELECT string_agg(set_config(n, v, false), ',') FROM unnest(%(names)s::text[], %(values)s::text[]) AS s (n, v)"
    b" WHERE current_setting(n, true) IS NOT NULL)"
    b" END"
)
"""A new connection's set-up, one round trip (:class:`._pool.Session`): whether the backend
pid libpq was given is the server's (``direct`` forces yes), and only then the session
settings ``names``/``values`` (a transaction pooler would leave them on some other client's
server connection). A setting this server does not have (``idle_session_timeout`` before
PostgreSQL 14) is skipped. Sent as is: it names no table, so it is the same for every schema."""

DEFAULT_ISOLATION: Final = b"SELECT current_setting('default_transaction_isolation')"
"""What a session the driver did not set up defaults to (:func:`._pool.check_isolation`, once
per connection). Sent as is: it names no table."""

LISTEN: Final = "LISTEN {channel}"
"""A subscription's wake-ups (:mod:`._notify`): ``channel`` is the schema's NOTIFY channel."""


@functools.lru_cache(maxsize=64)
def names(schema: str) -> Mapping[str, sql.Composable]:
    """The identifiers the templates name, for ``schema``."""
    return {
        "jobs": sql.Identifier(schema, "jobs"),
        "leases": sql.Identifier(schema, "leases"),
        "schedules": sql.Identifier(schema, "schedules"),
        "versions": sql.Identifier(schema, "schema_versions"),
        "seq": sql.SQL("{}::regclass").format(sql.Literal(sql.Identifier(schema, "jobs_id_seq").as_string())),
        "seq_name": sql.Identifier(schema, "jobs_id_seq"),
        "schema": sql.Identifier(schema),
        # The schema's NOTIFY channel as a literal, for the one template that cannot take it
        # as a parameter: the settle-children trigger function (migration 10, rules D).
        "notify_channel": sql.Literal(_channel_for(schema)),
    }


def _channel_for(schema: str) -> str:
    from .._notify import channel_for  # noqa: PLC0415 - _notify imports this package

    return channel_for(schema)


def render(template: str, schema: str | None = None, **parts: sql.Composable) -> bytes:
    """``template`` as bytes for ``execute``: the identifiers of ``schema`` (and ``parts``) in its braces.

    The only renderer of the driver's SQL. ``parts`` are further identifiers (``LISTEN``'s
    channel) or, for a migration's record, constants of :mod:`.schema` as literals."""
    fill = {**names(schema), **parts} if schema is not None else parts
    return sql.SQL(template).format(**fill).as_bytes()


class Statements(JobStatements, PruneStatements, ScheduleStatements):
    """Every declared statement rendered for one schema (bytes, ready for ``execute``).

    Attributes:
        raw: Each rendered statement (the very bytes object its attribute holds) in its
            native form (:func:`native`), for the driver's ``_fetch``.
    """

    raw: dict[bytes, tuple[bytes, tuple[str, ...]]]

    def __init__(self, schema: str) -> None:
        raw: dict[bytes, tuple[bytes, tuple[str, ...]]] = {}
        for name, statement in DECLARED.items():
            rendered = self.__dict__[name] = render(statement.text, schema)
            form = native(rendered)
            if form is not None:
                raw[rendered] = form
        self.raw = raw


_PLACEHOLDER: Final = re.compile(rb"%(?:\((\w+)\)s|(%))")


def bound(
    statements: Statements, conn: Any, query: bytes, params: Mapping[str, Any] | None, *, raw: type, plain: type
) -> tuple[Any, bytes, Any]:
    """A cursor of ``conn``, and the text and parameters to run ``query`` with ``params`` on it.

    On a connection whose cursors are psycopg's plain ones (``plain``), a statement of
    ``statements`` runs in its native form on a ``raw`` cursor (``psycopg.RawCursor`` or
    its async twin). Anything else keeps the connection's own cursor and the text as
    given: a caller's ``cursor_factory`` (an instrumented cursor, a test's recorder)
    sees every statement, and parameters that do not fit are left to psycopg to word.
    """
    if conn.cursor_factory is plain and params is not None:
        form = statements.raw.get(query)
        if form is not None:
            try:
                return raw(conn), form[0], [params[name] for name in form[1]]
            except (KeyError, TypeError):
                pass
    return conn.cursor(), query, params


def native(query: bytes) -> tuple[bytes, tuple[str, ...]] | None:
    """``query`` with PostgreSQL's own ``$n`` placeholders, and the parameter name of each ``n``.

    Run through ``psycopg.RawCursor`` with ``[params[name] for name in names]``, it sends
    the same statement as ``execute(query, params)`` on a plain cursor, but skips the
    client's parse of the text on every call: psycopg caches that parse only for
    statements of at most 4,096 bytes, and the claim is longer (the parse of its text
    was 3 to 10% of a worker's CPU, as measured). ``None`` when the text has anything else a
    plain cursor would read (a ``%`` of another kind, a ``$``): such a statement keeps
    the plain path.
    """
    if b"$" in query:
        return None
    order: list[str] = []

    def number(match: re.Match[bytes]) -> bytes:
        if match.group(2):  # %% is a literal %
            return b"%"
        name = match.group(1).decode("ascii")
        if name not in order:
            order.append(name)
        return b"$%d" % (order.index(name) + 1)

    text = _PLACEHOLDER.sub(number, query)
    if b"%" in _PLACEHOLDER.sub(b"", query):
        return None
    return text, tuple(order)


def _declared() -> dict[str, Sql]:
    found: dict[str, Sql] = {}
    for part in Statements.__mro__[1:]:
        for name, value in vars(part).items():
            if isinstance(value, Sql):
                if name in found:
                    raise TypeError(f"statement {name} is declared twice")
                found[name] = value
    return found


DECLARED: Final = _declared()
"""Every statement of :class:`Statements` by name (its declaration: template and name)."""

"""The lean path's wire side: which statements take it, and what it sends and reads (text).

:func:`._lean_async.run` (and its generated sync twin, :func:`._lean.run`) does the I/O;
everything else of the lean path is here, once for both flavours.

The lean path: one short statement on a pooled connection, straight through libpq.

psycopg's cursor spends about 15 µs of client CPU per call on top of libpq's own work (the
query's conversion, the prepare bookkeeping, the result's set-up, the row maker): measured
against ``pgconn.send_query_prepared`` on one connection, 53-62 µs against 39-44 µs. For a
statement sent once per job (a one-at-a-time enqueue) that is a tenth of the call's wall
time. :func:`._lean_async.run` sends a statement of :data:`LEAN` in its native ``$n`` form, its parameters
dumped as text, and reads its rows as text.

It takes only what it sends and reads exactly as psycopg would (:func:`values`):

- parameters that are ``None``, ``str``, ``bool`` or ``int`` (every lean statement casts or
  types each one itself);
- result columns of :data:`_LOADERS`' types (``bigint``, ``integer``, ``smallint``,
  ``boolean``, ``text``); any other is a bug caught by the tests, never a silent guess;
- a connection in autocommit whose cursors are psycopg's plain ones (a caller's
  ``cursor_factory`` sees every statement, as :func:`._sql.bound` keeps it) and whose client
  encoding is UTF-8.

Anything else takes the cursor. The statement is prepared once per connection under a name
of its own (``jc_`` and a digest of its text; psycopg's own are ``_pg3_``), unless the
connection prepares nothing (``prepare_threshold = None``: behind a transaction pooler), where
it goes unnamed. A prepared statement the server no longer holds (``DEALLOCATE ALL``,
``DISCARD ALL``) is prepared again. Every wait goes through the connection's ``wait``, so a
:class:`~._pool.BoundedConnection` keeps its ``call_timeout`` (F07); a server error is raised
as psycopg's own exception for it, for the driver to translate as any other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from psycopg import errors as e
from psycopg import pq

from ._sql import Statements

__all__ = ["LEAN", "answered", "checked", "lean_forms", "prepared", "statement_name", "values"]

LEAN: Final = frozenset({"ENQUEUE_ONE"})
"""The statements (by name in :class:`~._sql.Statements`) that take the lean path when
:func:`values` lets them: one row in, one short row out, once per job."""

_LOADERS: Final[dict[int, Any]] = {
    20: int, 21: int, 23: int,  # bigint, smallint, integer
    16: lambda raw: raw == b"t",  # boolean
    25: lambda raw: raw.decode(),  # text
}
"""Result column type OID -> decoder of its text form."""

_OK: Final = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
_NAMES: dict[bytes, bytes] = {}
"""Native statement text -> its prepared statement name (a digest: one text per schema)."""


def lean_forms(statements: Statements) -> dict[bytes, tuple[bytes, tuple[str, ...]]]:
    """:data:`LEAN`'s statements as rendered in ``statements`` (what ``_fetch`` is called with),
    each with its native form (its ``$n`` text and the parameter name of each ``n``)."""
    return {getattr(statements, name): statements.raw[getattr(statements, name)] for name in LEAN}


def values(conn: Any, plain: type, order: Sequence[str], params: Mapping[str, Any] | None) -> list[bytes | None] | None:
    """The parameters in ``order``, dumped as the lean path sends them; ``None`` when the call
    may not take it on ``conn`` (see the module docstring): the cursor then runs it, and
    refuses what it refuses (a NUL in a text, text that is not UTF-8). The driver asks only
    on a connection of its own pool in autocommit."""
    if params is None or conn.cursor_factory is not plain or conn.info.encoding != "utf-8":
        return None
    out: list[bytes | None] = []
    for name in order:
        value = params[name]
        kind = type(value)
        if value is None:
            out.append(None)
        elif kind is bool:
            out.append(b"t" if value else b"f")
        elif kind is int:
            out.append(str(value).encode())
        elif kind is str and "\x00" not in value:
            try:
                out.append(value.encode())
            except UnicodeEncodeError:
                return None
        else:
            return None
    return out


def statement_name(text: bytes) -> bytes:
    """The name ``text`` is prepared under (``jc_`` and a digest of it)."""
    name = _NAMES.get(text)
    if name is None:
        name = _NAMES[text] = b"jc_" + hashlib.blake2b(text, digest_size=8).hexdigest().encode()
    return name


def checked(results: Sequence[pq.abc.PGresult]) -> pq.abc.PGresult:
    """The last result, once none of them is an error (raised as psycopg's exception for it)."""
    for result in results:
        if result.status not in _OK:
            raise e.error_from_result(result, encoding="utf-8")
    return results[-1]


def answered(results: Sequence[pq.abc.PGresult]) -> list[tuple[Any, ...]]:
    """The rows of a statement's results (:func:`checked` first), each column decoded from text."""
    result = checked(results)
    if result.status != pq.ExecStatus.TUPLES_OK:
        return []
    loaders = [_LOADERS[result.ftype(col)] for col in range(result.nfields)]
    rows = []
    for row in range(result.ntuples):
        cells = []
        for col, load in enumerate(loaders):
            raw = result.get_value(row, col)
            cells.append(None if raw is None else load(raw))
        rows.append(tuple(cells))
    return rows


def prepared(conn: Any) -> set[bytes]:
    """The lean statements prepared on ``conn`` (kept on the connection: its session's)."""
    held: set[bytes] | None = conn.__dict__.get("_jc_lean")
    if held is None:
        held = conn.__dict__["_jc_lean"] = set()
    return held

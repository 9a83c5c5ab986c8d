"""The lean path's I/O: one lean statement on a pooled connection, straight through libpq.

What takes the path, what it sends and how its answer is read are :mod:`._lean_wire`'s
(see there); this module only talks to the server, and its sync twin :mod:`._lean` is
generated from it by ``tools/unasync.py``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg import errors as e
from psycopg import generators

from ._lean_wire import answered, checked, prepared, statement_name

__all__ = ["run"]


async def run(conn: psycopg.AsyncConnection[Any], text: bytes, params: list[bytes | None]) -> list[Any]:
    """Run a lean statement (its native ``text``) on ``conn`` with ``params`` as
    :func:`._lean_wire.values` dumped them; answers its rows."""
    pgconn = conn.pgconn
    async with conn.lock:
        if conn.prepare_threshold is None:  # a transaction pooler: nothing survives the statement
            pgconn.send_query_params(text, params)
            return answered(await conn.wait(generators.execute(pgconn)))
        name, held = statement_name(text), prepared(conn)
        for _ in (1, 2):
            if name not in held:
                pgconn.send_prepare(name, text)
                # Already there: prepared by an earlier call whose answer was lost.
                with contextlib.suppress(e.DuplicatePreparedStatement):
                    checked(await conn.wait(generators.execute(pgconn)))
                held.add(name)
            pgconn.send_query_prepared(name, params)
            try:
                return answered(await conn.wait(generators.execute(pgconn)))
            except e.InvalidSqlStatementName:  # deallocated by someone: prepare it again, once
                held.discard(name)
    raise AssertionError("unreachable")  # pragma: no cover

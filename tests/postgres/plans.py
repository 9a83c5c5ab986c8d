"""The plan PostgreSQL uses for a statement the way the driver runs it (shared by the plan tests)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest


def generic_plan(conn: psycopg.Connection[Any], query: bytes, params: dict[str, Any]) -> str:
    """The plan of ``query`` as a prepared statement under generic planning (the driver's mode).

    ``auto_explain`` logs it as a notice; the statement runs in a rolled-back transaction.
    """
    notes: list[str] = []
    conn.add_notice_handler(lambda n: notes.append(n.message_primary or ""))
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.errors.InsufficientPrivilege:
        pytest.skip("auto_explain needs a superuser connection")
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                    "client_min_messages = log", "plan_cache_mode = force_generic_plan"):
        conn.execute(f"SET {setting}")
    with conn.transaction(force_rollback=True):
        conn.execute(query, params, prepare=True)
    return notes[-1].split("\n\n")[-1] if notes else ""

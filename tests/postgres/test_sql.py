"""The shape of the SQL: statements declared once in ``_sql``, no ``select *``, the claim on its partial index,
round trips."""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, _sql, make_pool
from jobcore.parity.plugin import START
from psycopg import sql

import jobcore
from fixtures import postgres as fx
from jobcore.clock import ManualClock
from tests.postgres.plans import generic_plan

SOURCE = Path(__file__).resolve().parents[2] / "drivers" / "postgres"


def _code_without_comments(path: Path) -> str:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return " ".join(t.string for t in tokens if t.type != tokenize.COMMENT)


def test_no_select_star_or_returning_star_in_the_driver() -> None:
    """No statement reads or returns whole rows: every column is named."""
    files = sorted(SOURCE.rglob("*.py"))
    assert any(path.parent.name == "_sql" for path in files)
    for path in files:
        text = _code_without_comments(path).lower()
        assert not re.search(r"\bselect\s+(distinct\s+)?\*", text), path.name
        assert not re.search(r"\breturning\s+\*", text), path.name
        assert not re.search(r"\b[a-z_]+\.\*", text.replace("import *", "")), path.name


def test_every_clock_reading_is_the_store_now_an_injected_clock_can_replace() -> None:
    """Statements read time only through ``_sql.NOW`` (the store's ``now()`` unless ``%(now)s``
    is given, F01): no other clock function, and no ``%(now)s`` used on its own."""
    assert _sql.NOW == "coalesce(%(now)s::timestamptz, date_trunc('milliseconds', now()))"
    reading = 0
    for name, statement in _sql.DECLARED.items():
        if name == "STORE_NOW":  # driver.clock's reading of the store's time
            continue
        template = statement.text
        reading += _sql.NOW in template
        text = template.replace(_sql.NOW, "").lower()
        for word in ("now()", "current_timestamp", "clock_timestamp", "localtimestamp", "statement_timestamp",
                     "%(now)s", "%(now_ms)s", "%(expires)s"):
            assert word not in text, (name, word)
    assert reading >= 25


def test_each_statement_is_declared_once_and_rendered_under_its_name() -> None:
    """Every statement is one ``NAME = Sql(...)`` in ``_sql`` (no list of names beside it); a driver's
    ``q`` holds each under that name, the schema's tables quoted in and no placeholder left."""
    sources = "\n".join(path.read_text() for path in sorted((SOURCE / "_sql").glob("*.py")))
    q = _sql.Statements('odd "schema"')
    assert len(_sql.DECLARED) >= 45
    for name, statement in _sql.DECLARED.items():
        assert statement.name == name
        assert sources.count(f" {name} = Sql(") == 1, name
        rendered = getattr(q, name)
        assert isinstance(rendered, bytes), name
        assert b"{" not in rendered, name
        assert b"}" not in rendered, name
        assert ("{jobs}" in statement.text) == (b'"odd ""schema"""."jobs"' in rendered), name
    assert set(vars(q)) == {*_sql.DECLARED, "raw"}


def test_ack_many_landed_is_ack_many_answering_only_item_numbers() -> None:
    """``ACK_MANY_LANDED`` runs ``ACK_MANY``'s very update (fence and writes); only what it returns differs."""
    many, landed = _sql.Statements.ACK_MANY.text, _sql.Statements.ACK_MANY_LANDED.text
    update = many[: many.rindex("RETURNING")]
    assert "WHERE" in update
    assert landed.startswith(update + "RETURNING t.ord, ")
    assert landed.count("pg_notify") == many.count("pg_notify") == 1  # the waited-on rows' wake-up (A02)


def test_only_sql_composes_statements() -> None:
    """SQL is composed and rendered in ``_sql`` alone: no other driver module builds ``sql.SQL`` or renders."""
    for path in sorted(SOURCE.glob("*.py")):
        code = _code_without_comments(path)
        for word in ("sql.SQL(", ".as_bytes(", "Sql("):
            assert word not in code, (path.name, word)


def test_every_statement_has_a_native_form_with_its_parameters_in_order() -> None:
    """Each rendered statement runs on a RawCursor (psycopg parses a text over 4,096 bytes on
    every call otherwise): ``$n`` for the n-th distinct ``%(name)s``, nothing else changed."""
    q = _sql.Statements('odd "schema"')
    for name in _sql.DECLARED:
        rendered = getattr(q, name)
        text, names = q.raw[rendered]
        found = list(dict.fromkeys(m.decode() for m in re.findall(rb"%\((\w+)\)s", rendered)))
        assert list(names) == found, name
        back = text
        for number in range(len(names), 0, -1):  # $10 before $1
            back = back.replace(b"$%d" % number, b"%%(%s)s" % names[number - 1].encode())
        assert back == rendered, name
    assert max(len(getattr(q, name)) for name in _sql.DECLARED) > 4096  # the claim: why this exists


def test_native_form_reads_percent_and_repeats_as_psycopg_does() -> None:
    """``%%`` is a literal ``%``, a repeated name is one parameter; a text a plain cursor would read
    otherwise (a positional ``%s``, a ``$``) has no native form and keeps the plain path."""
    assert _sql.native(b"SELECT '%%', %(a)s, %(b)s, %(a)s") == (b"SELECT '%', $1, $2, $1", ("a", "b"))
    assert _sql.native(b"SELECT %s") is None
    assert _sql.native(b"SELECT $1, %(a)s") is None
    assert _sql.native(b"SELECT 1") == (b"SELECT 1", ())


def test_a_native_statement_answers_as_the_named_one(driver: Any, pool: Any) -> None:
    """The driver's own path (native, on a plain pool) and psycopg's named path agree on a claim's rows."""
    driver.enqueue_many([{"name": "same", "payload": {"n": i}} for i in range(3)])
    params = {**_claim_params(driver._now()), "limit": 2, "start": False}
    native = driver._fetch(driver.q.CLAIM, params)
    with pool.connection() as conn:
        named = conn.execute(driver.q.CLAIM, {**params, "limit": 1}).fetchall()
    assert [row[0] for row in native] != [row[0] for row in named]  # each claim took its own jobs
    assert len(native) == 2
    assert len(named) == 1
    assert len(native[0]) == len(named[0])


def test_driver_executes_only_named_statements() -> None:
    """The driver modules pass statements from ``self.q`` / ``q`` (rendered constants), never literals."""
    for path in sorted(SOURCE.glob("*.py")):
        if path.name in ("_schema.py", "_schema_async.py", "_notify.py", "_anotify.py"):  # they run _sql.render output
            continue
        text = path.read_text()
        for match in re.finditer(r"(?<!def )(?:_fetch|execute)\(\s*([^,)\s]+)", text):
            target = match.group(1)
            # "pgconn": the lean path's libpq exchange (``generators.execute``) of a text it was handed by _fetch.
            allowed = (
                "self.q.", "self._d.q.", "d.q.", "q.", "query", '""', "SESSION", "DEFAULT_ISOLATION", "text", "pgconn",
            )
            assert target.startswith(allowed), (path.name, target)


def _claim_params(now: Any) -> dict[str, Any]:
    return {
        "queues": ["default"], "worker": "w", "limit": 10, "now": now, "lease_ms": 30_000, "drop": [], "start": True,
        "finished": "f",
    }


@pytest.mark.parametrize("now", [START, None], ids=["injected_clock", "store_clock"])
def test_claim_reads_the_partial_indexes(driver: Any, pool: Any, now: Any) -> None:
    """EXPLAIN of the claim with many finished rows: due rows come from jobs_due, lapsed from jobs_running."""
    with pool.connection() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, queue, payload, state, priority, attempt, max_attempts, run_at, created_at,"
                " finished_at, claim_no, errors) SELECT 'old', 'default', 'null', 'done', 0, 1, 20, %(t)s, %(t)s,"
                " %(t)s, 1, '[]' FROM generate_series(1, 20000)"
            ).format(sql.Identifier(driver.schema, "jobs")),
            {"t": START},
        )
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(driver.schema, "jobs")))
    driver.enqueue_many([{"name": "new"} for _ in range(20)])
    with pool.connection() as conn:
        plan = "\n".join(
            r[0] for r in conn.execute(b"EXPLAIN " + driver.q.CLAIM, _claim_params(now)).fetchall()
        )
    assert "jobs_due" in plan, plan
    assert "jobs_running" in plan, plan
    assert "Seq Scan" not in plan, plan


class CountingCursor(psycopg.Cursor[Any]):
    """Counts statements sent (one execute = one round trip), leaving out a new connection's
    one-time session set-up (a loaded machine may open a second connection mid-test)."""

    sent: list[bytes] = []

    def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query if isinstance(query, bytes) else str(query).encode()
        if text != (_sql.SESSION if isinstance(_sql.SESSION, bytes) else str(_sql.SESSION).encode()):
            CountingCursor.sent.append(text)
        return super().execute(query, params, **kw)


def test_statements_per_operation(pg_url: str, pool: Any) -> None:
    """One statement per claim batch, per ack_many batch, per enqueue_many batch, per nack, per heartbeat."""
    schema = fx.schema_name()
    counted = make_pool(pg_url, min_size=1, max_size=2, cursor_factory=CountingCursor)
    driver = PostgresDriver(counted, schema=schema, clock=ManualClock(START))
    try:
        driver.migrate()
        driver.introspect.get("1")  # first use checks the schema version once
        sent = CountingCursor.sent
        sent.clear()
        driver.enqueue_many([{"name": "a", "payload": i} for i in range(50)])  # options shared: ENQUEUE_UNIFORM
        assert sent == [driver.q.ENQUEUE_UNIFORM]
        sent.clear()
        driver.enqueue_many([{"name": "b", "payload": i, "priority": i % 2} for i in range(4)])  # ENQUEUE_MANY
        assert sent == [driver.q.ENQUEUE_MANY]
        sent.clear()
        result = driver.claim(["default"], worker_id="w", limit=50, lease=30)
        assert len(result.claimed) == 50
        assert len(sent) == 1
        sent.clear()
        assert driver.heartbeat(result.claimed[0].token, 30)
        assert len(sent) == 1
        sent.clear()
        answers = driver.ack_many([(c.token, {"i": c.job.payload}) for c in result.claimed[1:25]])
        assert all(a is not None for a in answers)
        assert len(sent) == 1
        sent.clear()
        landed = driver.ack_many([(c.token, None) for c in result.claimed[25:]], landed_only=True)
        assert landed == [True] * 25
        assert sent == [driver.q.ACK_MANY_LANDED]
        sent.clear()
        assert driver.nack(result.claimed[0].token, "boom") is not None
        assert len(sent) == 1
    finally:
        driver.close()
        counted.close()
        fx.drop_schema(pool, schema)


@pytest.mark.parametrize("now", [START, None], ids=["injected_clock", "store_clock"])
def test_generic_plans_of_the_hot_statements_use_indexes(driver: Any, pool: Any, pg_url: str, now: Any) -> None:
    """Generic plans (the driver's sessions use them) of the hot statements never scan the jobs table,
    whether ``now`` is passed (an injected clock) or NULL (the store's clock: the production case)."""
    with pool.connection() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (name, queue, payload, state, priority, attempt, max_attempts, run_at, created_at,"
                " finished_at, claim_no, errors) SELECT 'old', 'default', 'null', 'done', 0, 1, 20, %(t)s, %(t)s,"
                " %(t)s, 1, '[]' FROM generate_series(1, 20000)"
            ).format(sql.Identifier(driver.schema, "jobs")),
            {"t": START},
        )
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(driver.schema, "jobs")))
    fence = {"id": 1, "worker": "w", "claim_no": 1}
    cases = {
        "CLAIM": _claim_params(now),
        "ACK_MANY": {"items": json.dumps([[1, "w", 1, None], [2, "w", 1, None]]), "now": now, "finished": "f"},
        "START": {"items": json.dumps([[1, "w", 1], [2, "w", 1]]), "now": now},
        "NACK": {**fence, "fail": False, "park": False, "give_back": 0, "dead_letter": True, "type": "E",
                 "message": "m", "now": now, "retry_at": None, "channel": "c", "finished": "f"},
        "HEARTBEAT": {**fence, "now": now, "lease_ms": 30_000},
        "PROGRESS": {**fence, "now": now, "value": 0.5, "message": "m"},
        "ENQUEUE": {"items": json.dumps([["a", "q", "null", 0, 0, None, 3, "k"]]), "now": now, "channel": "c"},
        "GET": {"id": 5},
        "RESCUE": {"now": now, "channel": "c", "finished": "f"},
    }
    with psycopg.connect(pg_url, autocommit=True) as conn:
        plans = {name: generic_plan(conn, getattr(driver.q, name), params) for name, params in cases.items()}
    for name, plan in plans.items():
        assert "Index" in plan, (name, plan)
        assert "Seq Scan on jobs" not in plan, (name, plan)
    assert "jobs_due" in plans["CLAIM"]
    assert "jobs_running" in plans["CLAIM"]
    assert "jobs_running" in plans["RESCUE"]


def test_a_callers_pool_without_autocommit_still_commits_each_statement(pg_url: str, pool: Any) -> None:
    """The driver's own pool is autocommit; a pool the caller built without it commits per statement too."""
    schema = fx.schema_name()
    theirs = make_pool(pg_url, min_size=1, max_size=2, autocommit=False)
    driver = PostgresDriver(theirs, schema=schema, clock=ManualClock(START))
    try:
        driver.migrate()
        job = driver.enqueue("kept", {"n": 1})
        claimed = driver.claim(["default"], worker_id="w", lease=30).claimed
        assert [c.job.id for c in claimed] == [job.id]
        assert driver.ack(claimed[0].token) is not None
        with psycopg.connect(pg_url, autocommit=True) as other:  # what another session sees
            row = other.execute(
                sql.SQL("SELECT state FROM {} WHERE id = %s").format(sql.Identifier(schema, "jobs")), (int(job.id),)
            ).fetchone()
        assert row == ("done",)
    finally:
        driver.close()
        theirs.close()
        fx.drop_schema(pool, schema)


def test_a_pool_made_without_autocommit_keeps_its_session_settings_past_a_rollback(pg_url: str) -> None:
    """``make_pool(autocommit=False)``: the set-up is committed, so a connection comes out idle and the
    settings stay (they were undone by the first rollback, and the first transaction ran at the
    server's default isolation)."""
    theirs = make_pool(pg_url, min_size=0, max_size=1, autocommit=False)
    try:
        with theirs.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            conn.rollback()
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
            assert conn.execute("SHOW statement_timeout").fetchone() == ("9s",)
            assert conn.execute("SHOW DateStyle").fetchone()[0].startswith("ISO")  # type: ignore[index]
    finally:
        theirs.close()


def test_a_uniform_batch_stores_each_payload_as_encoded(driver: Any, pool: Any) -> None:
    """ENQUEUE_UNIFORM reads the payloads as ``json`` (not ``jsonb``): each row's text is the
    canonical encoding, key order and all, so a payload decodes as it was given."""
    payloads: list[Any] = [{"b": 1, "a": [2, {"z": None, "y": "]"}]}, "x,]\"}", None, 1.5, "é\u2028", [], {}]
    jobs = driver.enqueue_many([{"name": "u", "payload": p} for p in payloads])
    with pool.connection() as conn:
        query = sql.SQL("SELECT payload FROM {} WHERE id = ANY(%s) ORDER BY id")
        table = sql.Identifier(driver.schema, "jobs")
        stored = conn.execute(query.format(table), ([int(j.id) for j in jobs],)).fetchall()
    assert [row[0] for row in stored] == [json.dumps(p, ensure_ascii=False, separators=(",", ":")) for p in payloads]
    assert list(driver.introspect.get(jobs[0].id).payload) == ["b", "a"]


def test_url_options_reach_libpq_as_written_through_from_url_connect_and_driver_url(pg_url: str, pool: Any) -> None:
    """A space (``%20``) and a plus in a URL's libpq options arrive as written, through
    ``from_url``, ``jobcore.connect`` and the ``driver.url`` handed to a worker (the URL was
    re-encoded as an HTML form: ``options=-c%20statement_timeout%3D1234`` reached the server
    as ``+statement_timeout``, and the connection was refused)."""
    schema = fx.schema_name()
    url = f"{pg_url}?options=-c%20statement_timeout%3D1234&application_name=my%20app+1&schema={schema}"
    first = PostgresDriver.from_url(url, auto_migrate=True)
    try:
        for driver in (first, jobcore.connect(url), PostgresDriver.from_url(first.url)):
            with driver._connection() as conn:
                shown = [conn.execute(f"SHOW {name}").fetchone() for name in ("statement_timeout", "application_name")]
            assert shown == [("1234ms",), ("my app+1",)]
            if driver is not first:
                driver.close()
    finally:
        first.close()
        fx.drop_schema(pool, schema)

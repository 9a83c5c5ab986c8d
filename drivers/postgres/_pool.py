"""Bounded connections (F07) and the small pool the driver makes for itself (F06).

:class:`BoundedConnection` is a psycopg connection on which no wait for the server
lasts longer than its ``call_timeout``: psycopg runs every statement, commit and
rollback through :meth:`~psycopg.Connection.wait`, and this class gives that wait a
deadline when the caller gave none. Past it the connection is closed (its state is
unknown: a reply may still be on the way) and :class:`CallTimeout` is raised, which
the driver answers as ``JC_DB_TIMEOUT``. This is the bound that holds when the server
never sees the statement (a stalled socket, a frozen proxy or server), where the
server's own ``statement_timeout`` cannot help. Connecting is bounded by libpq's
``connect_timeout`` (default :data:`DEFAULT_CONNECT_TIMEOUT` here).

:class:`Session` is what a connection sets up once it is open: UTC, ISO dates, ``postgres``
intervals, read committed, generic plans and the
server's ``statement_timeout``, with ``set_config`` in one statement rather than as the
``options`` startup parameter (PgBouncer refuses that parameter). Behind a transaction
pooler (PgBouncer ``pool_mode = transaction`` and the like) a session setting would land
on whichever server connection ran that statement, and a prepared statement would not be
there for the next transaction: such a connection sets nothing and prepares nothing
(``prepare_threshold = None``), and the driver's statements do not depend on the session
(times are normalised to UTC on the way out), except the styles and the isolation, which
:func:`check_styles` and :func:`check_isolation` check instead. Whether a pooler sits in between is
configured (``pooler="transaction"``/``"none"``) or, by default, detected on each new
connection: libpq's backend pid (from the server's BackendKeyData, which a pooler makes up
for its client) differs from ``pg_backend_pid()`` behind a pooler.

:class:`Pool` is what a driver built from a URL uses: at most ``max_size`` connections,
each opened when a caller needs one (in the caller's thread, so after an outage the
first call once the server accepts connections gets one at once: no background
reconnect loop, no backoff), idle ones handed out last-used first and closed after
``max_idle`` beyond ``min_size``. Whether an idle connection survived (a restart,
``pg_terminate_backend``) is judged at checkout by :func:`alive`, without a round trip.
The one wait it keeps is after the server refused a connection for lack of a slot
(:data:`NO_SLOT`): each such attempt costs the full server a backend process, so for a
short while (:data:`SLOT_HOLD_FIRST`, doubling up to :data:`SLOT_HOLD_CAP` while the
refusals go on) a new connection is answered with that refusal without asking again.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import select
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any, ClassVar, Final, TypeVar

import psycopg
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolClosed, PoolTimeout

from jobcore.errors import ConfigurationError, UrlInvalid, redact, secrets_of

from ._sql import DEFAULT_ISOLATION, SESSION

__all__ = [
    "CLOCK_READ_TIMEOUT",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "LISTENER_SETTINGS",
    "POOLER_MODES",
    "READ_COMMITTED",
    "VETTED",
    "BoundedConnection",
    "CallTimeout",
    "ConnectFailed",
    "Pool",
    "Session",
    "alive",
    "at_read_committed",
    "bounded",
    "check_conninfo",
    "check_isolation",
    "check_styles",
    "connect_kwargs",
    "describe_target",
    "isolation_checked",
    "isolation_known",
    "probe",
    "vet",
    "writable_only",
]

RV = TypeVar("RV")
C = TypeVar("C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])

DEFAULT_CALL_TIMEOUT: Final = 10.0
"""Seconds a statement may wait for the server before the driver gives up on it."""
CLOCK_READ_TIMEOUT: Final = 2.0
"""Seconds ``driver.clock``'s reading of the store's time may take: a reading that slow is
of no use (the clock keeps its last one), and the caller asking the time should not wait
a whole ``call_timeout``."""
DEFAULT_CONNECT_TIMEOUT: Final = 5
"""Seconds to open a connection (libpq's ``connect_timeout``, which it rounds to whole
seconds, at least 2), unless the URL names its own."""
SERVER_SHARE: Final = 0.9
"""The server's ``statement_timeout`` defaults to this share of ``call_timeout``, so a
statement the server is merely slow at is cancelled there first (the connection stays
usable) and the client's bound is left for what the server cannot see."""
_WAIT_INTERVAL: Final = 0.1  # psycopg's own: how often a wait wakes to check for signals
POOLER_MODES: Final = ("auto", "transaction", "none")
"""``pooler=``: detect a pooler on each new connection, treat every connection as pooled, or as direct."""


def _named_in(options: str) -> set[str]:
    """The settings a libpq ``options`` string sets (``-c name=value``, ``-cname=value``, ``--name=value``)."""
    names: set[str] = set()
    words = options.split()
    for index, word in enumerate(words):
        if word == "-c" and index + 1 < len(words):
            setting = words[index + 1]
        elif word.startswith(("-c", "--")) and len(word) > 2:
            setting = word[2:]
        else:
            continue
        names.add(setting.partition("=")[0].replace("-", "_").lower())
    return names


_ISOLATION: Final = "default_transaction_isolation"

LISTENER_SETTINGS: Final = {"idle_session_timeout": "0"}
"""A LISTEN connection's session settings: it idles by design, and a server's or role's
``idle_session_timeout`` closed it every so often (a warning and a reconnection each time,
its wake-ups meanwhile lost). Skipped on a server without the setting (before 14)."""


class Session:
    """The settings a new connection applies with ``set_config`` (direct connections only),
    and whether a pooler is in between (``mode``: one of :data:`POOLER_MODES`).

    ``settings`` the caller's own ``options`` name are left to them (theirs win).
    """

    __slots__ = ("mode", "settings")

    def __init__(self, settings: dict[str, str], mode: str = "auto") -> None:
        self.settings = dict(settings)
        self.mode = mode

    def apply(self, conn: psycopg.Connection[Any]) -> bool:
        """Set ``conn`` up; answers whether a pooler sits in between (then nothing was set
        and ``conn`` will prepare no statement)."""
        params = self.params(conn)
        if params is None:
            return True
        with conn.cursor() as cur:
            cur.execute(SESSION, params, prepare=False)
            row = cur.fetchone()
        if not conn.autocommit:  # a pool made without autocommit: settings rolled back with the first rollback
            conn.commit()
        return self.pooled(conn, row)

    async def apply_async(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """:meth:`apply` on an async connection."""
        params = self.params(conn)
        if params is None:
            return True
        async with conn.cursor() as cur:
            await cur.execute(SESSION, params, prepare=False)
            row = await cur.fetchone()
        if not conn.autocommit:  # a pool made without autocommit: settings rolled back with the first rollback
            await conn.commit()
        return self.pooled(conn, row)

    def params(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> dict[str, Any] | None:
        """The parameters of the one setup statement (``SESSION``), or None when ``conn`` is
        known to be pooled (then it is set to prepare nothing, and nothing is sent)."""
        if self.mode == "transaction":
            conn.prepare_threshold = None
            return None
        return {
            "pid": conn.info.backend_pid, "direct": self.mode == "none",
            "names": list(self.settings), "values": list(self.settings.values()),
        }

    def pooled(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], row: Any) -> bool:
        """Whether the setup statement's answer ``row`` says a pooler is in between (then ``conn``
        prepares nothing). A direct session that set its default isolation is marked as known
        (:func:`isolation_known`)."""
        direct = bool(row and row[0])
        if not direct:
            conn.prepare_threshold = None
        elif _ISOLATION in self.settings:
            conn.__dict__["_jc_isolation"] = self.settings[_ISOLATION]
        return not direct


class CallTimeout(psycopg.OperationalError):
    """No complete answer came within the connection's ``call_timeout``; the connection was closed."""

    bound: float = 0.0


NO_SLOT: Final = re.compile(
    r"too many connections for (?:role|database)|sorry, too many clients already|"
    r"remaining connection slots are reserved|no more connections allowed",
    re.IGNORECASE,
)
"""The server (SQLSTATE 53300, which a failed connection attempt does not carry) or PgBouncer
(``max_client_conn``) refusing a connection because every slot it allows is in use: its
``max_connections`` (less the reserved ones), or the role's or the database's ``CONNECTION LIMIT``."""
SLOT_HOLD_FIRST: Final = 0.1
SLOT_HOLD_CAP: Final = 0.5
"""Seconds a pool answers a slot refusal (:data:`NO_SLOT`) without connecting again: the first
hold, doubled at each refusal after it, up to the cap (so a slot that frees is used within it)."""


class ConnectFailed(psycopg.OperationalError):
    """Opening a connection failed; carries where it tried (:attr:`target`), the role it
    tried as, the ``connect_timeout`` it had, and the secrets to mask in any text about it.
    The psycopg error is on ``__cause__``."""

    target: str = "the database"
    user: str = ""
    connect_timeout: float | None = None
    secrets: tuple[str, ...] = ()
    original: psycopg.Error | None = None
    no_slot: bool = False
    """The server (or a pooler) refused it because every connection slot it allows is in use."""

    @classmethod
    def wrap(cls, exc: psycopg.Error, conninfo: str, kwargs: Mapping[str, Any]) -> ConnectFailed:
        secrets = secrets_of(conninfo)
        error = cls(redact(str(exc), secrets))
        try:
            params = conninfo_to_dict(conninfo, **{k: v for k, v in kwargs.items() if k in _LIBPQ_KWARGS})
        except psycopg.Error:
            params = {}
        error.target = describe_target(params)
        error.user = str(params.get("user") or os.environ.get("PGUSER") or "")
        timeout = params.get("connect_timeout")
        try:
            error.connect_timeout = None if timeout is None else float(timeout)
        except (TypeError, ValueError):
            error.connect_timeout = None
        error.secrets = tuple({*secrets, *(str(params[k]) for k in ("password", "sslpassword") if params.get(k))})
        error.original = exc
        error.no_slot = NO_SLOT.search(str(exc)) is not None
        return error


_LIBPQ_KWARGS = frozenset({"connect_timeout", "options", "password", "user", "host", "port", "dbname"})


class BoundedConnection(psycopg.Connection[Any]):
    """A connection whose every wait for the server is bounded by :attr:`call_timeout`.

    ``BoundedConnection.connect(conninfo, call_timeout=10.0, **kwargs)`` takes the bound
    (seconds, ``None`` for none) beside psycopg's own arguments; a pool passes it through
    its connection kwargs.
    """

    call_timeout: float | None = DEFAULT_CALL_TIMEOUT
    pooled: bool | None = None
    """Whether a transaction pooler sits between this connection and the server (None: no
    :class:`Session` set it up)."""

    @classmethod
    def connect(  # type: ignore[override]  # more keywords than psycopg's
        cls, conninfo: str = "", *, call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
        session: Session | None = None, **kwargs: Any,
    ) -> BoundedConnection:
        """Connect as psycopg does; a failure raises :class:`ConnectFailed` naming the target."""
        try:
            conn = super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            failed = ConnectFailed.wrap(exc, conninfo, kwargs)
            cls.last_failure = failed
            raise failed from exc
        cls.last_failure = None
        conn.call_timeout = call_timeout
        if session is not None:
            try:
                conn.pooled = session.apply(conn)
            except BaseException:
                conn.close()
                raise
        return conn

    last_failure: ClassVar[ConnectFailed | None] = None
    """The last connection attempt's failure (None once one succeeded), for a caller's
    ``psycopg_pool`` pool whose ``PoolTimeout`` would otherwise hide it (see ``make_pool``)."""

    def wait(self, gen: PQGen[RV], interval: float = _WAIT_INTERVAL, timeout: float | None = None) -> RV:
        bound = self.call_timeout
        if timeout is not None or bound is None:  # the caller's own deadline (notifies()) stands
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, bound)
        except psycopg.errors._WaitTimeout as exc:
            # The reply may still arrive, or never: the connection cannot be trusted again.
            self.close()
            error = CallTimeout(f"no answer from the database within call_timeout={bound:g}s")
            error.bound = bound
            raise error from exc


@contextlib.contextmanager
def bounded(conn: C, seconds: float | None) -> Iterator[C]:
    """``conn`` with its client-side bound set to ``seconds`` for the block (``None``: no
    bound, for a migration's DDL); a connection without such a bound (not a
    :class:`BoundedConnection` or its async twin) is left as it is."""
    if not hasattr(conn, "call_timeout"):
        yield conn
        return
    bound, conn.call_timeout = conn.call_timeout, seconds
    try:
        yield conn
    finally:
        conn.call_timeout = bound


def _millis(span: timedelta) -> int:
    return max(1, span // timedelta(milliseconds=1))


def connect_kwargs(
    conninfo: str, *, statement_timeout: timedelta | None, call_timeout: timedelta | None, pooler: str = "auto",
    **extra: Any,
) -> dict[str, Any]:
    """What every connection of the driver is opened with: autocommit, ``connect_timeout``
    unless the conninfo names one, the client-side ``call_timeout``, and the :class:`Session`
    it applies once open (UTC, ISO dates, ``postgres`` intervals, read committed, generic
    plans, the server's ``statement_timeout``: given, else :data:`SERVER_SHARE` of
    ``call_timeout``; none of it behind a transaction pooler); ``client_encoding=UTF8``
    unless the conninfo or ``PGCLIENTENCODING`` names one.
    No startup ``options`` are sent (a pooler may refuse them); the caller's own, in the
    conninfo, are, and the settings they name are not overridden. A conninfo listing several
    hosts connects only to one that takes writes (:func:`writable_only`). ``extra`` (psycopg's
    keywords: ``cursor_factory``...) wins."""
    # Generic plans: every statement is shaped (ANY(ARRAY(...)) joins, LATERAL per queue) so
    # its generic plan reads the same indexes as a custom one, and the claim, whose custom
    # plan PostgreSQL would otherwise rebuild on every call, skips that planning.
    # psycopg reads timestamps and intervals as text in no other styles (check_styles); every
    # statement is written for read committed (SKIP LOCKED claims, ON CONFLICT keys): a role
    # or database defaulting to serializable would fail their races instead of settling them.
    settings = {
        "TimeZone": "UTC", "DateStyle": "ISO", "IntervalStyle": "postgres",
        _ISOLATION: "read committed", "plan_cache_mode": "force_generic_plan",
    }
    server = statement_timeout if statement_timeout is not None else (
        None if call_timeout is None else call_timeout * SERVER_SHARE
    )
    if server is not None:
        settings["statement_timeout"] = str(_millis(server))
    params = check_conninfo(conninfo)
    given = _named_in(str(params.get("options") or ""))
    settings = {name: value for name, value in settings.items() if name.lower() not in given}
    kwargs: dict[str, Any] = {
        "autocommit": True, "session": Session(settings, pooler),
        "call_timeout": None if call_timeout is None else call_timeout.total_seconds(),
    }
    if params.get("connect_timeout") is None:
        kwargs["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    if params.get("client_encoding") is None and not os.environ.get("PGCLIENTENCODING"):
        # A startup parameter (a pooler passes it on): UTF-8 whatever the server's or role's default.
        kwargs["client_encoding"] = "UTF8"
    return {**kwargs, **writable_only(params), **extra}


def writable_only(params: Mapping[str, Any]) -> dict[str, str]:
    """``target_session_attrs=read-write`` when ``params`` list more than one host and neither
    they nor ``PGTARGETSESSIONATTRS`` choose otherwise, else nothing.

    Every statement of the driver may write, and libpq's own default (``any``) takes the
    first host that answers: after a failover that is often the old primary, back as a
    standby, where every claim and ack would be refused. With ``read-write`` libpq skips
    the hosts that cannot take writes and connects to the one that can.
    """
    if len(_hosts(params)) < 2 or params.get("target_session_attrs") or os.environ.get("PGTARGETSESSIONATTRS"):
        return {}
    return {"target_session_attrs": "read-write"}


_CHOICES: Final[dict[str, frozenset[str]]] = {
    "sslmode": frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}),
    "gssencmode": frozenset({"disable", "prefer", "require"}),
    "channel_binding": frozenset({"disable", "prefer", "require"}),
    "target_session_attrs": frozenset({"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}),
    "load_balance_hosts": frozenset({"disable", "random"}),
    "sslnegotiation": frozenset({"postgres", "direct"}),
    "sslcertmode": frozenset({"disable", "allow", "require"}),
}
"""libpq options taking one of a few words, and those words (libpq checks them only when connecting)."""
_INTEGERS: Final = frozenset({
    "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
    "tcp_user_timeout", "sslcompression",
})
_URL_FIX: Final = (
    "write a libpq URL or keyword/value string (postgresql://user@host:5432/db?sslmode=require; "
    "see the libpq connection parameters) with jobcore's own options (schema, auto_migrate, "
    "call_timeout, statement_timeout, pool_min, pool_max, default_max_attempts)"
)


def _split(value: object) -> list[str]:
    return [] if value is None else str(value).split(",")


def _hosts(params: Mapping[str, Any]) -> list[str]:
    """The hosts a connection with ``params`` tries, in order (``host``, else ``PGHOST``, else ``hostaddr``)."""
    return _split(params.get("host") or os.environ.get("PGHOST")) or _split(params.get("hostaddr"))


def check_conninfo(conninfo: str, **kwargs: Any) -> dict[str, Any]:
    """The libpq parameters of ``conninfo`` (and psycopg's ``kwargs``), checked the way libpq
    checks them when it connects (port numbers, the word-valued options, integers, one port
    per host), so a malformed one is refused before any connection is tried.

    Raises:
        UrlInvalid: ``JC_URL_INVALID``, naming the parameter, passwords masked.
    """
    secrets = secrets_of(conninfo)
    try:
        params = conninfo_to_dict(conninfo, **kwargs)
    except psycopg.Error as exc:
        reason = redact(" ".join(str(exc).split()), secrets)
        raise UrlInvalid(f"the PostgreSQL connection string is not valid: {reason}", _URL_FIX) from None
    ports = _split(params.get("port"))
    for port in ports:
        text = port.strip()
        if text and not (text.isascii() and text.isdigit() and 1 <= int(text) <= 65535):
            raise UrlInvalid(
                f"port {redact(port, secrets)!r:.40} is not a port number (1-65535)", _URL_FIX
            )
    hosts = _split(params.get("host")) or _split(params.get("hostaddr"))
    if len(ports) > 1 and len(ports) != max(1, len(hosts)):
        raise UrlInvalid(f"{len(ports)} ports given for {max(1, len(hosts))} hosts", "give one port, or one per host")
    for name, words in _CHOICES.items():
        value = params.get(name)
        if value is not None and str(value) not in words:
            raise UrlInvalid(
                f"{name}={redact(value, secrets)!r:.40} is not a value libpq takes (one of {', '.join(sorted(words))})",
                _URL_FIX,
            )
    for name in _INTEGERS:
        value = params.get(name)
        if value is not None and not str(value).strip().lstrip("-").isdigit():
            raise UrlInvalid(f"{name}={redact(value, secrets)!r:.40} is not an integer", _URL_FIX)
    return params


def describe_target(params: Mapping[str, Any]) -> str:
    """Where a connection with ``params`` goes: ``host 127.0.0.1 port 5432`` (libpq's defaults
    and ``PGHOST``/``PGPORT`` filled in; a Unix socket directory named as such)."""
    hosts = _hosts(params) or [""]
    ports = _split(params.get("port") or os.environ.get("PGPORT")) or ["5432"]
    if len(ports) == 1:
        ports = ports * len(hosts)
    spots = []
    for host, given in zip(hosts, ports, strict=False):
        port = given.strip() or "5432"
        if not host:
            spots.append(f"the local socket (port {port})")
        elif host.startswith("/"):
            spots.append(f"socket directory {host} (port {port})")
        else:
            spots.append(f"host {host} port {port}")
    return " or ".join(spots)


READ_COMMITTED: Final = b"SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
"""A migration's first statement: its lock, then the version it reads, whatever the session."""

# PostgreSQL runs read uncommitted as read committed.
_READ_COMMITTED_LEVELS: Final = frozenset({"read committed", "read uncommitted"})


def isolation_known(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``conn``'s session is known to default to read committed: set up so by the
    driver (:func:`connect_kwargs`, unless the caller's ``options`` name the setting), or
    checked before (:func:`check_isolation`).

    Every statement is written for read committed: its transactions lock, then read what
    they locked (a lease's holders, a parent's state), and a claim or ack that waited on a
    row lock re-reads the row. At repeatable read those reads see the snapshot taken before
    the lock was granted: a fleet lease is granted past its limit, a child job is left
    waiting on a parent already done. A session the driver did not set up (a caller's pool,
    one behind a transaction pooler, which sets nothing) is asked once."""
    return "_jc_isolation" in conn.__dict__


def isolation_checked(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], level: str) -> None:
    """Remember ``conn``'s default isolation ``level`` if it is read committed, else refuse
    (``JC_CONFIGURATION``): nothing of the call was sent."""
    if level in _READ_COMMITTED_LEVELS:
        conn.__dict__["_jc_isolation"] = level
        return
    raise ConfigurationError(
        f"the PostgreSQL session's default_transaction_isolation is {level!r}, and jobcore's statements are"
        " written for read committed (at a stricter level a fleet lease can be granted past its limit and a"
        " child job left waiting on a parent already done); nothing was sent",
        f"set it for jobcore's role (ALTER ROLE {_role(conn)} SET default_transaction_isolation = 'read committed'),"
        " or open your pool's connections at read committed",
    )


def check_isolation(conn: psycopg.Connection[Any]) -> None:
    """Ask ``conn``'s session its default isolation (one round trip) and :func:`isolation_checked` it."""
    row = conn.execute(DEFAULT_ISOLATION, prepare=False).fetchone()
    if not conn.autocommit:  # a caller's pool without autocommit: end the transaction the question opened
        conn.rollback()
    isolation_checked(conn, str(row[0]) if row else "")


@contextlib.contextmanager
def at_read_committed(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A block whose transactions ``conn`` begins at read committed: a caller's connection
    set to another ``isolation_level`` (psycopg begins each transaction at it) is set back
    after the block; any other is left as it is (its session default was checked)."""
    level = conn.isolation_level
    if level is None or level == psycopg.IsolationLevel.READ_COMMITTED:
        yield
        return
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    try:
        yield
    finally:
        conn.isolation_level = level


VETTED: Final = "_jc_vetted"
"""Marks (in a connection's ``__dict__``) a connection of the driver's own pool that passed
:func:`vet`: nothing but the driver runs on it, so it is not read again."""


def vet(conn: psycopg.Connection[Any], *, own: bool) -> None:
    """Refuse a session jobcore cannot read or keep its rules in (:func:`check_styles`,
    :func:`check_isolation`), before anything is sent on it; ``own``: a connection of the
    driver's own pool, marked :data:`VETTED` once it passed. A caller's connection is
    vetted on every checkout, since the caller may ``SET`` a style between two calls."""
    check_styles(conn)
    if not isolation_known(conn):
        check_isolation(conn)
    if own:
        conn.__dict__[VETTED] = True


def check_styles(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Refuse (``JC_CONFIGURATION``) a session whose ``DateStyle`` is not ISO, whose
    ``IntervalStyle`` is not ``postgres`` or whose ``client_encoding`` is not UTF-8, before
    any statement runs on it.

    psycopg reads a ``timestamptz`` or an ``interval`` sent as text only in those styles. In
    any other, every answer holding one fails *after* the server ran the statement: a claim
    would take its jobs and never hand them over, and each would be buried unrun once its
    attempts ran out. The driver reads a payload's JSON text as UTF-8, and any text a job
    holds may be beyond a narrower encoding. The driver's own connections set all three
    (:func:`connect_kwargs`); this catches the rest: a caller's pool, a session behind a
    transaction pooler (which sets no style), a setting in the caller's own conninfo. It
    reads what the server last reported (libpq keeps it): no round trip.
    """
    pgconn = conn.pgconn
    for name, wanted, fix in _STYLES:
        style = pgconn.parameter_status(name)
        if style is not None and not style.startswith(wanted):
            shown = name.decode()
            raise ConfigurationError(
                f"the PostgreSQL session's {shown} is {style.decode(errors='replace')!r}, and jobcore reads and"
                f" writes the server's text only in {wanted.decode()} form; nothing was sent",
                fix.format(setting=shown, role=_role(conn)),
            )


def _role(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str:
    """The role ``conn`` logged in as, quoted for SQL (``<role>`` if libpq has none)."""
    user = conn.info.user or ""
    return '"' + user.replace('"', '""') + '"' if user else "<role>"


_STYLE_FIX: Final = (
    "set {setting} for jobcore's role (ALTER ROLE {role} SET {setting} = %s), or take {setting} out of the"
    " connection's options"
)
_STYLES: Final = (
    (b"DateStyle", b"ISO", _STYLE_FIX % "'ISO, MDY'; the day order after the comma may stay as it is"),
    (b"IntervalStyle", b"postgres", _STYLE_FIX % "'postgres'"),
    (b"client_encoding", b"UTF8", (
        "connect with client_encoding=UTF8 (in the URL or connection string, or PGCLIENTENCODING), or set it for"
        " jobcore's role (ALTER ROLE {role} SET {setting} = 'UTF8')"
    )),
)
"""The reported settings :func:`check_styles` reads: name, the form psycopg and the driver read, the fix."""


def alive(conn: psycopg.Connection[Any]) -> bool:
    """Whether a pooled connection survived its idle time, judged without a round trip.

    An idle pooled connection has nothing to read; if its socket is readable the server
    sent an error or closed it (restart, ``pg_terminate_backend``), so read what is there
    and let libpq tell whether the connection survived.
    """
    state = probe(conn)
    if state is None:
        try:
            conn.execute("")  # anything else pending (a notice): settle it with one empty query
        except (psycopg.Error, OSError, ValueError):
            return False
        return True
    return state


def probe(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool | None:
    """:func:`alive`'s look at an idle connection, without a round trip: False (dead), True
    (alive, nothing pending), None (alive with something pending: settle it with an empty query)."""
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if readable:
            conn.pgconn.consume_input()
            if conn.pgconn.status != psycopg.pq.ConnStatus.OK:
                return False
            return None
    except (psycopg.Error, OSError, ValueError):
        return False
    return True


_IDLE = psycopg.pq.TransactionStatus.IDLE
_IN_TRANSACTION = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


class SlotHold:
    """A pool's memory of its last slot refusal (see the module docstring). While its hold
    lasts, :meth:`check` raises a copy of it; once the hold is over, one caller connects
    (the probe) and the others are answered the same way until :meth:`note` has its outcome.
    Not locked: the pool calls it under its own lock."""

    __slots__ = ("probing", "refusal", "seconds", "until")

    def __init__(self) -> None:
        self.refusal: ConnectFailed | None = None
        self.seconds = 0.0
        self.until = 0.0
        self.probing = False

    def check(self) -> None:
        """Raise the last slot refusal again while it holds or a probe is out; else let this caller connect."""
        if self.refusal is None:
            return
        if self.probing or time.monotonic() < self.until:
            raise copy.copy(self.refusal)
        self.probing = True

    def note(self, failure: BaseException | None) -> None:
        """A connection attempt ended: ``failure`` is what it raised (None: it connected)."""
        self.probing = False
        if isinstance(failure, ConnectFailed) and failure.no_slot:
            self.seconds = min(SLOT_HOLD_CAP, self.seconds * 2 or SLOT_HOLD_FIRST)
            self.refusal, self.until = failure, time.monotonic() + self.seconds
        elif failure is None or isinstance(failure, ConnectFailed):
            self.refusal, self.seconds = None, 0.0


class Pool:
    """At most ``max_size`` :class:`BoundedConnection`, opened on demand (see the module docstring).

    Attributes:
        conninfo: What every connection connects to.
        kwargs: The keywords every connection is opened with (see :func:`connect_kwargs`).
        max_size: Connections open at once, idle or in use, at most.
    """

    def __init__(
        self, conninfo: str, *, kwargs: dict[str, Any], min_size: int = 1, max_size: int = 10,
        timeout: float = DEFAULT_CALL_TIMEOUT, max_idle: float = 600.0,
    ) -> None:
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: list[tuple[psycopg.Connection[Any], float]] = []  # last used at the end
        self._size = 0  # open, or being opened by a caller
        self._cond = threading.Condition()
        self._waiting = 0  # callers inside getconn's wait: putconn notifies only when there are some
        self._closed = False
        self._hold = SlotHold()

    def getconn(self) -> psycopg.Connection[Any]:
        """An idle connection (the last used), else a new one when fewer than ``max_size``
        are open, else the first one given back within ``timeout`` (``PoolTimeout`` then).

        The idle one may have died meanwhile: the caller checks it with :func:`alive`.
        """
        deadline: float | None = None
        with self._cond:
            while True:
                if self._closed:
                    raise PoolClosed("the driver's connection pool is closed")
                if self._idle:
                    return self._idle.pop()[0]
                if self._size < self.max_size:
                    self._hold.check()
                    self._size += 1
                    break
                if deadline is None:
                    deadline = time.monotonic() + self.timeout
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeout(
                        f"all {self.max_size} connections of the pool stayed in use for {self.timeout:g}s"
                    )
                self._waiting += 1
                try:
                    self._cond.wait(left)
                finally:
                    self._waiting -= 1
        try:
            conn: psycopg.Connection[Any] = BoundedConnection.connect(self.conninfo, **self.kwargs)
        except BaseException as exc:
            with self._cond:
                self._hold.note(exc)
            self._forget()
            raise
        with self._cond:
            self._hold.note(None)
        return conn

    def putconn(self, conn: psycopg.Connection[Any]) -> None:
        """Take back a connection from :meth:`getconn`; a closed or unusable one is dropped."""
        # libpq's own status (a closed connection's is UNKNOWN): read once, as an int, on the
        # common path (idle), which runs once per statement.
        if conn.pgconn.transaction_status != _IDLE:
            if not conn.closed and conn.info.transaction_status in _IN_TRANSACTION:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
            if conn.closed or conn.info.transaction_status != _IDLE:
                conn.close()
                self._forget()
                return
        stale: list[psycopg.Connection[Any]] = []
        with self._cond:
            if self._closed:
                stale.append(conn)
                self._size -= 1
            else:
                now = time.monotonic()
                self._idle.append((conn, now))
                while len(self._idle) > self.min_size and self._idle[0][1] < now - self.max_idle:
                    stale.append(self._idle.pop(0)[0])
                    self._size -= 1
            if self._waiting:
                self._cond.notify()
        for old in stale:
            old.close()

    def _forget(self) -> None:
        """One connection fewer is open: a waiter may open one."""
        with self._cond:
            self._size -= 1
            self._cond.notify()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for the block, given back after it."""
        conn = self.getconn()
        try:
            yield conn
        finally:
            self.putconn(conn)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the idle connections; those in use close when given back. Idempotent."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._size -= len(idle)
            self._cond.notify_all()
        for conn, _ in idle:
            conn.close()

    def __repr__(self) -> str:
        return f"Pool(max_size={self.max_size}, open={self._size}, idle={len(self._idle)})"

"""Connection failures carry their cause (issue 16, item 4): each has its own code and fix.

* credentials refused -> ``JC_DB_AUTH`` at once, one connection attempt (counted by a TCP
  proxy in front of the server), for the driver's own pool, a caller's ``psycopg_pool``
  pool and the CLI;
* a refused port -> ``JC_DB_UNAVAILABLE`` at once, a host that never answers ->
  ``JC_DB_UNAVAILABLE`` after ``connect_timeout``; both name the host and port;
* parameters libpq would refuse -> ``JC_URL_INVALID`` when the driver is built, before
  any connection (a listening socket counts none);
* no password, and no raw ``psycopg.pool`` line, in anything shown.

The session server trusts every local connection, so these tests start a second small
server whose ``pg_hba.conf`` asks every role but the bootstrap one for a SCRAM password.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from jobcore.drivers.postgres import PostgresDriver, make_pool

import jobcore
from fixtures import postgres as fx
from jobcore.errors import BackendAuthFailed, BackendUnavailable, JobcoreError, UrlInvalid
from tests.postgres.proxy import proxy_to, through

PASSWORD = "S3cret-pw"
WRONG = "Wr0ng-pw"


class AuthServer:
    """A PostgreSQL that checks passwords for every role but ``jobcore``; role ``app`` has one."""

    def __init__(self, server: fx.LocalServer) -> None:
        self.server = server
        self.port = server.port

    def url(self, user: str = "app", password: str | None = PASSWORD, **query: Any) -> str:
        auth = user if password is None else f"{user}:{password}"
        options = "&".join(f"{k}={v}" for k, v in query.items())
        return f"postgresql://{auth}@127.0.0.1:{self.port}/postgres" + (f"?{options}" if options else "")


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    bindir = fx.find_binaries()
    if bindir is None:
        fx.unavailable("no initdb/postgres binaries to start a password-checking server")
    server = fx.LocalServer(bindir)  # type: ignore[arg-type]
    hba = os.path.join(server.root, "pg_hba_auth.conf")
    with open(hba, "w") as f:
        f.write("local all all trust\nhost all jobcore 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
    server.extra = ("-c", f"hba_file={hba}", "-c", "password_encryption=scram-sha-256")
    try:
        server.start()
    except Exception as exc:
        server.stop()
        fx.unavailable(f"starting a password-checking server failed: {exc}")
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE app LOGIN PASSWORD '{PASSWORD}'")
        conn.execute("GRANT CREATE ON DATABASE postgres TO app")
    yield AuthServer(server)
    server.stop()


def _shown(error: JobcoreError) -> str:
    return f"{error} {error.cause} {error.fix} {error!r}"


def _refuses(driver: PostgresDriver) -> JobcoreError:
    try:
        with pytest.raises(JobcoreError) as info:
            driver.introspect.stats()
    finally:
        driver.close()
    return info.value


def test_the_right_password_connects(auth_server: AuthServer) -> None:
    """The server really checks passwords: the right one gets in (the wrong ones below do not)."""
    driver = PostgresDriver(auth_server.url(), auto_migrate=True, schema=fx.schema_name())
    try:
        assert driver.enqueue("a").state.value == "ready"
    finally:
        driver.close()


@pytest.mark.parametrize("form", ["url", "keyword/value"])
def test_a_wrong_password_answers_jc_db_auth_after_one_attempt(auth_server: AuthServer, form: str) -> None:
    """A wrong password: JC_DB_AUTH naming the role, host and port, from one connection attempt, masked."""
    with proxy_to(auth_server.url()) as proxy:
        if form == "url":
            conninfo = through(auth_server.url(password=WRONG), proxy)
        else:
            conninfo = f"host={proxy.host} port={proxy.port} user=app password='{WRONG}' dbname=postgres"
        started = time.monotonic()
        error = _refuses(PostgresDriver(conninfo))
        took = time.monotonic() - started
        assert isinstance(error, BackendAuthFailed)
        assert error.code == "JC_DB_AUTH"
        assert "refused the credentials as role 'app'" in error.cause
        assert f"host {proxy.host} port {proxy.port}" in error.cause
        assert "password authentication failed" in error.cause
        assert "password" in error.fix
        assert "retrying will not help" in error.fix
        assert WRONG not in _shown(error)
        assert isinstance(error.__cause__, psycopg.OperationalError)
        assert proxy.accepted == 1  # no retry, no wait for the pool
        assert took < 5, took  # the pool's wait is 10 s; one refused attempt takes milliseconds


@pytest.mark.parametrize(("user", "password", "says"), [
    ("app", None, "no password supplied"),
    ("nobody_here", PASSWORD, "password authentication failed"),
])
def test_a_missing_password_or_unknown_role_answers_jc_db_auth(
    auth_server: AuthServer, user: str, password: str | None, says: str,
) -> None:
    """No password for a role that needs one, or a role that does not exist: JC_DB_AUTH too."""
    error = _refuses(PostgresDriver(auth_server.url(user=user, password=password)))
    assert isinstance(error, BackendAuthFailed)
    assert says in error.cause
    assert PASSWORD not in _shown(error)


def test_a_callers_pool_answers_the_real_cause_and_its_log_goes_through_jobcore(
    auth_server: AuthServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """make_pool with a wrong password: JC_DB_AUTH (not 'raise the pool size') without waiting out
    the pool's 10 s; psycopg.pool's records reach jobcore's logger, never a handler as its own."""
    caplog.set_level(logging.DEBUG)
    pool = make_pool(auth_server.url(password=WRONG), timeout=10.0)
    started = time.monotonic()
    try:
        error = _refuses(PostgresDriver(pool))
    finally:
        pool.close()
    took = time.monotonic() - started
    assert isinstance(error, BackendAuthFailed)
    assert took < 5, took
    assert "raise the pool size" not in error.fix
    assert WRONG not in _shown(error)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
    routed = [r.getMessage() for r in caplog.records if r.name == "jobcore.drivers.postgres"]
    assert any("connection pool:" in m and "password authentication failed" in m for m in routed), routed
    assert not [m for m in routed if WRONG in m]


def test_the_cli_prints_jc_db_auth_and_nothing_else(auth_server: AuthServer) -> None:
    """`jobcore stats` with a wrong password: exit 6, two lines (code and cause, fix), no password, no pool lines."""
    proc = subprocess.run(
        [sys.executable, "-m", "jobcore.cli", "stats", "--url", auth_server.url(password=WRONG)],
        check=False, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 6
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error JC_DB_AUTH: PostgreSQL at host 127.0.0.1 port"), proc.stderr
    assert lines[1].startswith("  fix: check the user name and password")
    assert len(lines) == 2, proc.stderr
    assert WRONG not in proc.stderr + proc.stdout


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_callers_pool_waits_out_a_refused_port_then_names_it() -> None:
    """make_pool to a refused port (a server restarting, maybe): the pool's own wait is kept,
    then JC_DB_UNAVAILABLE names the host and port rather than the pool size."""
    port = _closed_port()
    pool = make_pool(f"postgresql://app:{PASSWORD}@127.0.0.1:{port}/postgres", timeout=1.0)
    started = time.monotonic()
    try:
        error = _refuses(PostgresDriver(pool))
    finally:
        pool.close()
    took = time.monotonic() - started
    assert type(error) is BackendUnavailable
    assert f"PostgreSQL at host 127.0.0.1 port {port} cannot be reached" in error.cause
    assert "pool size" not in error.fix
    assert 0.9 < took < 3, took


def test_a_refused_port_answers_unavailable_naming_host_and_port_at_once() -> None:
    """Nothing listens: JC_DB_UNAVAILABLE naming host and port, without waiting for the pool."""
    port = _closed_port()
    started = time.monotonic()
    error = _refuses(PostgresDriver(f"postgresql://app:{PASSWORD}@127.0.0.1:{port}/postgres"))
    took = time.monotonic() - started
    assert type(error) is BackendUnavailable
    assert f"PostgreSQL at host 127.0.0.1 port {port} cannot be reached" in error.cause
    assert "Connection refused" in error.cause
    assert "listen_addresses" in error.fix
    assert PASSWORD not in _shown(error)
    assert took < 5, took  # the pool's wait is 10 s


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening socket nobody accepts on: a host that takes the TCP handshake and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def _accepted(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def test_a_host_that_never_answers_is_unavailable_after_connect_timeout(listener: socket.socket) -> None:
    """A silent host: JC_DB_UNAVAILABLE naming host, port and connect_timeout=2s, after about 2 s."""
    port = listener.getsockname()[1]
    started = time.monotonic()
    error = _refuses(PostgresDriver(f"postgresql://app:{PASSWORD}@127.0.0.1:{port}/postgres?connect_timeout=2"))
    took = time.monotonic() - started
    assert type(error) is BackendUnavailable
    assert f"no connection to PostgreSQL at host 127.0.0.1 port {port} within connect_timeout=2s" in error.cause
    assert "raise connect_timeout" in error.fix
    assert isinstance(error.__cause__, psycopg.errors.ConnectionTimeout)
    assert 1.9 < took < 4.0, took
    assert _accepted(listener) == 1  # one attempt: not retried


BAD_PARAMETERS = [
    ("host=127.0.0.1 port=notaport user=app password=pw-xyz1", "port 'notaport' is not a port number"),
    ("postgresql://app:pw-xyz1@127.0.0.1:99999/postgres", "port '99999' is not a port number"),
    ("postgresql://app:pw-xyz1@127.0.0.1:{port}/postgres?sslmode=bogus", "sslmode='bogus' is not a value libpq takes"),
    ("host=127.0.0.1 port={port} password=pw-xyz1 sslmode=bogus", "sslmode='bogus' is not a value libpq takes"),
    ("host=127.0.0.1 port={port} password=pw-xyz1 nosuchkey=1", 'invalid connection option "nosuchkey"'),
    ("postgresql://app:pw-xyz1@127.0.0.1:{port}/postgres?nosuchopt=1", 'invalid URI query parameter: "nosuchopt"'),
    ("postgresql://app:pw-xyz1@127.0.0.1:{port}/postgres?connect_timeout=soon", "connect_timeout='soon' is not an"),
    ("host=a,b,c port=1,2 password=pw-xyz1", "2 ports given for 3 hosts"),
    ("postgresql://app:pw-xyz1@127.0.0.1:{port}/postgres?target_session_attrs=any-one", "target_session_attrs="),
    ("host=127.0.0.1 port={port} password='pw-xyz1", "unterminated quoted string"),
]


@pytest.mark.parametrize(("template", "says"), BAD_PARAMETERS, ids=[t for t, _ in BAD_PARAMETERS])
def test_invalid_connection_parameters_are_refused_before_connecting(
    listener: socket.socket, template: str, says: str,
) -> None:
    """A parameter libpq would refuse: JC_URL_INVALID from the constructor, make_pool and
    jobcore.connect, naming it, with no connection tried and no password shown."""
    conninfo = template.format(port=listener.getsockname()[1])
    builders = [lambda: PostgresDriver(conninfo), lambda: make_pool(conninfo)]
    if "://" in conninfo:
        builders.append(lambda: jobcore.connect(conninfo))
    for build in builders:
        with pytest.raises(UrlInvalid) as info:
            build()
        assert says in info.value.cause
        assert "pw-xyz1" not in _shown(info.value)
    assert _accepted(listener) == 0

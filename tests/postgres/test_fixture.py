"""The test-server fixture: discovery order and what happens when no server can be had."""

from __future__ import annotations

import os

import pytest

from fixtures import postgres as fx


def test_no_server_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under CI=true a missing server is an error, never a silent skip."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(RuntimeError, match="CI=true"):
        fx.unavailable("no binaries")


def test_no_server_skips_with_the_reason_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside CI the PostgreSQL tests are skipped, naming why and how to fix it."""
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="JOBCORE_TEST_POSTGRES_URL"):
        fx.unavailable("no binaries")


def test_env_url_comes_first(monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:
    """JOBCORE_TEST_POSTGRES_URL is used as is when set (checked on a fresh discovery)."""
    saved = dict(fx._state)
    fx._state.clear()
    try:
        monkeypatch.setenv("JOBCORE_TEST_POSTGRES_URL", pg_url + "?application_name=from_env")
        assert fx.server_url(None).endswith("application_name=from_env")
    finally:
        fx._state.clear()
        fx._state.update(saved)


def test_the_local_server_runs_unprivileged(pg_url: str) -> None:
    """A server this session started from local binaries never runs as root."""
    server = fx.local_server()
    if server is None:
        pytest.skip("the session's server did not come from local binaries")
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as status:
        uid = next(line.split()[1] for line in status if line.startswith("Uid:"))
    assert uid != "0" or os.geteuid() != 0

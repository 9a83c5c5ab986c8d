"""The test-server discovery of fixtures/mongo.py: order, hand-over on failure, CI strictness."""

from __future__ import annotations

import pytest

from fixtures import mongo as fx

_SOURCES = ("_from_testcontainers", "_from_mongod", "_from_secantus")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A discovery session of its own, no env URL, every source answering 'not here'."""
    monkeypatch.setattr(fx, "_SESSION", fx._Session())
    monkeypatch.delenv("JOBCORE_TEST_MONGO_URL", raising=False)
    for name in _SOURCES:
        monkeypatch.setattr(fx, name, lambda: None)
    return monkeypatch


def test_env_url_wins(fresh: pytest.MonkeyPatch) -> None:
    """JOBCORE_TEST_MONGO_URL is used as is, before any other source."""
    fresh.setenv("JOBCORE_TEST_MONGO_URL", "mongodb://db.example:27017/")
    found = fx.server(None)
    assert (found.kind, found.url) == ("env", "mongodb://db.example:27017/")


def test_a_failing_source_hands_over_to_the_next(fresh: pytest.MonkeyPatch) -> None:
    """A source that raises (say Docker answers but cannot pull) does not end discovery."""

    def broken() -> fx.MongoServer:
        raise RuntimeError("image pull failed")

    fresh.setattr(fx, "_from_testcontainers", broken)
    fresh.setattr(fx, "_from_secantus", lambda: fx.MongoServer("mongodb://127.0.0.1:1/", "secantusd-py"))
    assert fx.server(None).kind == "secantusd-py"


def test_no_server_skips_outside_ci(fresh: pytest.MonkeyPatch) -> None:
    """Without CI, a machine with no server skips the MongoDB tests."""
    fresh.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="no MongoDB server"):
        fx.server(None)


def test_no_server_fails_in_ci(fresh: pytest.MonkeyPatch) -> None:
    """With CI=true, a server that cannot be had fails the run instead of skipping."""
    fresh.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no MongoDB server"):
        fx.server(None)

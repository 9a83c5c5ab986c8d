"""MongoDB connection failures carry their cause (issue 16, item 4).

Credentials the server refuses answer ``JC_DB_AUTH`` (PyMongo's ``OperationFailure`` code
18; code 13 "requires authentication" when none were given), against a MongoDB-wire
server started with ``--auth`` (secantusd-py checks SCRAM-SHA-256), with the password
masked; URI options PyMongo does not know are refused (``JC_URL_INVALID``) instead of a
warning on stderr.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections.abc import Iterator

import pytest
from jobcore.drivers.mongo import MongoDriver
from jobcore.drivers.mongo._errors import translate
from pymongo import MongoClient
from pymongo import errors as pe

import jobcore
from fixtures import mongo as fx
from jobcore.errors import BackendAuthFailed, JobcoreError, UrlInvalid

PASSWORD = "S3cret-mongo"
WRONG = "Wr0ng-mongo"


@pytest.fixture(scope="module")
def auth_port() -> Iterator[int]:
    """A secantusd-py with --auth and one user, ``app`` (password :data:`PASSWORD`, role root)."""
    binary = fx.secantus_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            raise RuntimeError("secantusd-py is not installed (the test extra pins it)")
        pytest.skip("secantusd-py is not installed")
    process, url, storage = fx.start_secantus(storage=tempfile.mkdtemp(prefix="jobcore-secantus-auth-"))
    with MongoClient(url) as client:  # provisioned without auth, as secantusd-py documents
        client.admin.command("createUser", "app", pwd=PASSWORD, roles=["root"])
    fx._stopper(process, None)()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    args = [binary, "--host", "127.0.0.1", "--port", str(port), "--storage-path", storage, "--log-level", "ERROR",
            "--auth"]
    process = fx._spawn(args)
    stop = fx._stopper(process, storage)
    try:
        fx.wait_until_up(url, process)
        yield port
    finally:
        stop()


def _url(port: int, auth: str) -> str:
    return f"mongodb://{auth}127.0.0.1:{port}/jc_auth?directConnection=true&authSource=admin"


def _refused(url: str) -> JobcoreError:
    driver = MongoDriver.from_url(url, call_timeout=5)
    try:
        with pytest.raises(JobcoreError) as info:
            driver.introspect.stats()
    finally:
        driver.close()
    return info.value


def test_the_right_password_gets_in(auth_port: int) -> None:
    """The server checks credentials: the right ones work (the wrong ones below do not)."""
    driver = MongoDriver.from_url(_url(auth_port, f"app:{PASSWORD}@"), auto_migrate=True, call_timeout=10)
    try:
        assert driver.enqueue("a").state.value == "ready"
    finally:
        driver.close()


def test_a_wrong_password_answers_jc_db_auth_at_once(auth_port: int) -> None:
    """A wrong password: JC_DB_AUTH with a fix naming the credentials, the password masked, no wait."""
    started = time.monotonic()
    error = _refused(_url(auth_port, f"app:{WRONG}@"))
    took = time.monotonic() - started
    assert isinstance(error, BackendAuthFailed)
    assert "MongoDB refused the credentials" in error.cause
    assert "AuthenticationFailed" in error.cause or "authentication failed" in error.cause
    assert "authSource" in error.fix
    assert WRONG not in f"{error} {error!r}"
    assert isinstance(error.__cause__, pe.OperationFailure)
    assert error.__cause__.code == 18
    assert took < 4, took  # the call bound (5 s) was not waited out


def test_no_credentials_answers_jc_db_auth(auth_port: int) -> None:
    """No credentials for a server that requires them: JC_DB_AUTH (code 13), not JC_DB_ERROR."""
    error = _refused(_url(auth_port, ""))
    assert isinstance(error, BackendAuthFailed)
    assert "requires credentials" in error.cause


def test_operation_failure_18_maps_to_jc_db_auth() -> None:
    """The mapping itself, as a real mongod answers a failed SCRAM conversation."""
    failure = pe.OperationFailure(
        "Authentication failed.", 18, {"ok": 0, "errmsg": "Authentication failed.", "code": 18},
    )
    error = translate(failure, "store time")
    assert isinstance(error, BackendAuthFailed)
    assert error.code == "JC_DB_AUTH"
    other = translate(pe.OperationFailure("not authorized on app to execute command", 13), "claim")
    assert not isinstance(other, BackendAuthFailed)  # a missing privilege is not a credential problem


@pytest.mark.parametrize("option", ["sslmode=require", "bogus=1", "connectTimeout=5"])
def test_an_unknown_uri_option_is_refused_not_warned(option: str) -> None:
    """An option PyMongo would only warn about and ignore is refused, naming it, password masked."""
    url = f"mongodb://app:{PASSWORD}@127.0.0.1:1/db?{option}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would fail the test
        for build in (lambda: MongoDriver(url), lambda: MongoDriver.from_url(url), lambda: jobcore.connect(url)):
            with pytest.raises(UrlInvalid) as info:
                build()
            assert option.split("=", maxsplit=1)[0] in info.value.cause
            assert PASSWORD not in str(info.value)

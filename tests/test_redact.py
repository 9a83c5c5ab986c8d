"""Passwords never reach an error, a log line, a ``repr`` or the CLI: :func:`jobcore.errors.redact`.

The property test writes generated passwords into every form a connection string takes
(URL userinfo, ``?password=`` and ``?sslpassword=`` query parameters, libpq keyword/value
strings quoted and unquoted, MongoDB URIs), then drives the text through what quotes it:
``redact`` itself, the refusals of ``jobcore.connect``, ``PostgresDriver`` and
``MongoDriver`` (each connection string made invalid in a way that makes the refusal
quote it), the translation of a failed connection, and the drivers' ``repr``. No password
may appear, in any of its written forms.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import jobcore
from jobcore.errors import JobcoreError, UrlInvalid, redact, secrets_of

psycopg_ok = pytest.importorskip("psycopg")
from jobcore.drivers.postgres import PostgresDriver  # noqa: E402 - after the importorskip
from jobcore.drivers.postgres._errors import route_pool_logging, translate  # noqa: E402
from jobcore.drivers.postgres._pool import ConnectFailed  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALPHABET = st.characters(min_codepoint=32, max_codepoint=126)  # printable ASCII: quotes, \, @, %, spaces
# At least 4 characters, so the check "never appears" means something (a 1-character
# password would "appear" in any message); see jobcore.errors._MIN_LITERAL.
passwords = st.text(ALPHABET, min_size=4, max_size=24).filter(lambda p: p.strip() == p and p.strip())


def _kv_quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _kv_bare(value: str) -> str:
    return "".join("\\" + c if c in " \\'" else c for c in value)


FORMS = {
    "url": lambda pw, extra: f"postgresql://bob:{quote(pw, safe='')}@127.0.0.1:5432/db{extra}",
    "url-query": lambda pw, extra: f"postgresql://bob@127.0.0.1/db?password={quote(pw, safe='')}"
                                  f"{extra.replace('?', '&')}",
    "url-sslpassword": lambda pw, extra: f"postgresql://bob@127.0.0.1/db?sslpassword={quote(pw, safe='')}"
                                        f"{extra.replace('?', '&')}",
    "kv-quoted": lambda pw, extra: f"host=127.0.0.1 user=bob password={_kv_quoted(pw)} dbname=db{_kv(extra)}",
    "kv-bare": lambda pw, extra: f"host=127.0.0.1 password = {_kv_bare(pw)} user=bob{_kv(extra)}",
    "mongo": lambda pw, extra: f"mongodb://bob:{quote(pw, safe='')}@127.0.0.1:27017/db{extra}",
}
"""Each form, given the password and a tail that makes the string invalid (URL query form)."""

BREAKERS = ["?sslmode=bogus", "?port_typo=1", "?connect_timeout=soon", ""]


def _kv(extra: str) -> str:
    return " " + extra.lstrip("?") if extra else ""


def _forms_of(pw: str) -> set[str]:
    """Every way ``pw`` is written in the strings above."""
    return {pw, quote(pw, safe=""), quote(pw), _kv_quoted(pw), _kv_bare(pw)} - {""}


def _leaks(text: str, pw: str) -> list[str]:
    return [form for form in _forms_of(pw) if form in text]


def _refusal_text(call: Any) -> str:
    """Everything a user sees of the error ``call`` raises (or "" when it raises none)."""
    try:
        made = call()
    except JobcoreError as exc:
        return f"{exc} | {exc.cause} | {exc.fix} | {exc!r}"
    close = getattr(made, "close", None)
    text = repr(made)
    if close is not None:
        close()
    return text


@SETTINGS
@given(pw=passwords, form=st.sampled_from(sorted(FORMS)), breaker=st.sampled_from(BREAKERS))
@example(pw="y://", form="kv-bare", breaker="?sslmode=bogus")  # CI, stop 37: read as a URL, "memory://" matched
def test_a_password_never_appears_in_what_quotes_a_connection_string(pw: str, form: str, breaker: str) -> None:
    """Generated passwords, every connection string form: redact, refusals and reprs never show them."""
    text = FORMS[form](pw, breaker)
    assume(not _leaks(FORMS[form]("\x00" * 4, breaker).replace("\x00", ""), pw))  # no accidental overlap
    # Nor with the refusals' own words: "disa" of "disable" shows with no password in it.
    assume(not any(_leaks(shown.replace(NEUTRAL, ""), pw) for shown in _refusals(form, breaker, NEUTRAL)))
    assert not _leaks(redact(text), pw)
    assert not _leaks(redact(f"error: {text!r} failed"), pw)
    assert not _leaks(redact(f"tried {text}", secrets_of(text)), pw)
    for shown in _refusals(form, breaker, pw):
        assert not _leaks(shown, pw), shown


NEUTRAL = "QzQzQzQz"
"""A password no refusal has among its own words: what the refusals say with it is their fixed text."""


def _refusals(form: str, breaker: str, pw: str) -> list[str]:
    """What ``jobcore.connect`` (and, for PostgreSQL, ``PostgresDriver``) show of ``form`` made
    with ``pw`` and ``breaker``."""
    text = FORMS[form](pw, breaker)
    seen = [_refusal_text(lambda: jobcore.connect(text))]
    if form != "mongo":
        seen.append(_refusal_text(lambda: PostgresDriver(text, auto_migrate=False)))
    return seen


@SETTINGS
@given(pw=passwords)
def test_a_failed_connection_never_quotes_its_password(pw: str) -> None:
    """A connection failure whose libpq text quotes the password is masked in the coded error."""
    def shown(password: str, conninfo: str) -> str:
        raw = psycopg.OperationalError(f'connection failed: password "{password}" of {conninfo} refused')
        error = translate(ConnectFailed.wrap(raw, conninfo, {}))
        return f"{error} {error.cause} {error.fix}"

    conninfo = f"host=127.0.0.1 port=1 user=bob password={_kv_quoted(pw)}"
    # A password that is part of the message's own words ("retr" of "retried") shows with no leak.
    assume(not _leaks(shown("", "host=127.0.0.1 port=1 user=bob password="), pw))
    assert not _leaks(shown(pw, conninfo), pw)


def test_a_broken_percent_escape_in_the_password_is_refused_without_it() -> None:
    """libpq's parser quotes the token it could not decode; the refusal masks it."""
    with pytest.raises(UrlInvalid) as refused:
        PostgresDriver("postgresql://bob:ab%zzSecret@127.0.0.1/db")
    assert "zzSecret" not in str(refused.value)
    assert "invalid percent-encoded token" in refused.value.cause


@pytest.mark.parametrize(("text", "masked"), [
    ("postgresql://u:pw1@db:5432/x?sslmode=require", "postgresql://u:***@db:5432/x?sslmode=require"),
    ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
    ("host=h password=S3cret port=5", "host=h password=*** port=5"),
    ("host=h password = 'a b\\' c' user=u", "host=h password = *** user=u"),
    ("postgresql://u@h/db?password=abc&sslpassword=zz&x=1", "postgresql://u@h/db?password=***&sslpassword=***&x=1"),
    ("mongodb://h/?tlsCertificateKeyFilePassword=k3y&tls=true", "mongodb://h/?tlsCertificateKeyFilePassword=***&tls=true"),
    ("mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:t0k,SERVICE_NAME:s",
     "mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:***,SERVICE_NAME:s"),
    ('FATAL: password authentication failed for user "bob"', 'FATAL: password authentication failed for user "bob"'),
])
def test_redact_masks_each_form_and_keeps_the_rest(text: str, masked: str) -> None:
    """Each password form is masked; the text around it (and text that only mentions passwords) is kept."""
    assert redact(text) == masked


def test_the_pools_log_records_reach_jobcores_logger_masked(caplog: pytest.LogCaptureFixture) -> None:
    """psycopg.pool's records are re-logged by jobcore.drivers.postgres, masked, repeats at DEBUG."""
    route_pool_logging()
    route_pool_logging()  # idempotent: one route
    caplog.set_level(logging.DEBUG)
    pool_log = logging.getLogger("psycopg.pool")
    for _ in range(3):
        pool_log.warning("error connecting in 'pool-1': postgresql://bob:Hunter22@h/db refused")
    assert [r.name for r in caplog.records] == ["jobcore.drivers.postgres"] * 3
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert all("Hunter22" not in r.getMessage() for r in caplog.records)
    assert "connection pool: error connecting in 'pool-1': postgresql://bob:***@h/db" in caplog.records[0].getMessage()

"""``jobcore.connect`` refuses bad URLs with JC_URL_INVALID and never echoes a password."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import jobcore
from jobcore.clock import ManualClock
from jobcore.errors import OptionInvalid, UrlInvalid, redact_url

SECRET = "s3cr3t-pw"

BAD_URLS = [
    f"postgresql://bob:{SECRET}@[unbalanced/db",
    f"mongodb://bob:{SECRET}@[unbalanced/db",
    f"mongodb://bob:{SECRET}@host:99999999/db",
    f"memory://bob:{SECRET}@somewhere",
    f"nosuchdb://bob:{SECRET}@host/db",
]


@pytest.mark.parametrize("url", BAD_URLS, ids=lambda u: u.split(":", 1)[0] + "-" + u.rsplit("@", 1)[1][:12])
def test_a_malformed_url_is_refused_coded_without_its_password(url: str) -> None:
    with pytest.raises(UrlInvalid) as refused:
        jobcore.connect(url)
    text = f"{refused.value} {refused.value.cause} {refused.value.fix}"
    assert SECRET not in text
    assert refused.value.fix


KV_WITH_SEPARATOR = [f"host=db password={SECRET}:// user=bob", f"host=db password='{SECRET}://x' dbname=q"]


@pytest.mark.parametrize("text", KV_WITH_SEPARATOR)
def test_a_keyword_value_string_whose_password_holds_a_scheme_separator_is_refused_as_no_url(text: str) -> None:
    """``://`` inside a libpq keyword/value string does not make it a URL: the refusal points to
    the URL form, as for any keyword/value string, and never reads the text as a scheme."""
    with pytest.raises(UrlInvalid) as refused:
        jobcore.connect(text)
    shown = f"{refused.value} {refused.value.cause} {refused.value.fix}"
    assert "is not a driver URL" in refused.value.cause
    assert "keyword/value string" in refused.value.fix
    assert "driver handles" not in shown
    assert SECRET not in shown


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(("text", "where"), [
    (f"postgresql://bob:{SECRET}@127.0.0.1:1/db?sslmode=require\n", "ends with '\\n'"),
    (f"mongodb://bob:{SECRET}@127.0.0.1:1/app\n", "ends with '\\n'"),
    ("memory://\r\n", "ends with '\\r\\n'"),
    (f" postgresql://bob:{SECRET}@127.0.0.1:1/db ", "starts with ' ' and ends with ' '"),
], ids=["postgresql-newline", "mongodb-newline", "memory-crlf", "postgresql-spaces"])
def test_a_url_with_whitespace_around_it_is_refused_naming_it(text: str, where: str, flavour: str) -> None:
    """A URL read from a file or a secret often ends in a newline. PyMongo kept it in the
    database's name (another database, silently); now every scheme refuses it, by name."""
    build = jobcore.connect if flavour == "sync" else jobcore.connect_async
    with pytest.raises(UrlInvalid) as refused:
        build(text)
    scheme = text.strip().split(":", 1)[0]
    assert refused.value.cause == f"the {scheme}:// URL {where}"
    assert refused.value.fix.startswith("strip the whitespace around it")
    assert SECRET not in str(refused.value)


def test_redact_url_masks_every_password_and_keeps_the_rest() -> None:
    text = "tried postgresql://u:pw1@db:5432/x?sslmode=require then mongodb://v:pw2@m1,m2/y and memory://"
    assert redact_url(text) == (
        "tried postgresql://u:***@db:5432/x?sslmode=require then mongodb://v:***@m1,m2/y and memory://"
    )
    assert redact_url("postgresql://user@host/db") == "postgresql://user@host/db"


UNREACHED = ["memory://", "postgresql://bob@127.0.0.1:1/db", "mongodb://127.0.0.1:1/db"]
"""One URL per built-in driver, none of which is dialled: each refusal comes before any I/O."""


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("url", UNREACHED, ids=lambda u: u.split(":", 1)[0])
def test_an_option_the_driver_does_not_take_is_refused_naming_those_it_does(url: str, flavour: str) -> None:
    """``connect(url, pool_mx=2)`` is JC_OPTION_INVALID naming the stray option and the driver's
    own; it used to be Python's TypeError from inside the driver."""
    build = jobcore.connect if flavour == "sync" else jobcore.connect_async
    with pytest.raises(OptionInvalid) as refused:
        build(url, pool_mx=2, default_max_attempts=3)
    assert refused.value.code == "JC_OPTION_INVALID"
    assert "takes no option 'pool_mx'" in refused.value.cause
    assert "default_max_attempts" in refused.value.fix
    assert "clock" in refused.value.fix


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("url", UNREACHED, ids=lambda u: u.split(":", 1)[0])
@pytest.mark.parametrize("clock", [5, "now", object()], ids=["int", "str", "object"])
def test_a_clock_without_now_is_refused_at_construction(url: str, flavour: str, clock: object) -> None:
    """``clock=`` must have a callable ``now()``: anything else is JC_OPTION_INVALID at once, on
    every driver; it used to be taken, and the first verb failed with AttributeError."""
    build = jobcore.connect if flavour == "sync" else jobcore.connect_async
    with pytest.raises(OptionInvalid) as refused:
        build(url, clock=clock)
    assert refused.value.cause.startswith("clock must have a now() answering an aware datetime")
    assert "ManualClock" in refused.value.fix


def test_a_real_clock_and_the_driver_options_are_taken() -> None:
    """The check passes what the drivers take: a jobcore clock, and their own keywords."""
    driver = jobcore.connect("memory://", clock=ManualClock(), default_max_attempts=3)
    assert isinstance(driver.clock, ManualClock)
    assert driver.enqueue("j").max_attempts == 3


@pytest.mark.parametrize(
    ("made_old", "url", "cause", "fix"),
    [
        (  # psycopg 3.3.5 and older: no Connection.wait(timeout=), the call bound of F07
            "import psycopg.errors; del psycopg.errors._WaitTimeout",
            "postgresql://nobody@127.0.0.1:1/none",
            "psycopg {version} is too old for jobcore's PostgreSQL driver, which bounds every call with "
            "Connection.wait(timeout=) from psycopg 3.3.6",
            "pip install 'psycopg[binary]>=3.3.6' (the jobcore-queue[postgres] extra asks for it)",
        ),
        (  # PyMongo 4.12 and older: no stable AsyncMongoClient (and no Cursor.to_list before 4.9)
            "import pymongo; pymongo.version_tuple = (4, 12, 1); pymongo.version = '4.12.1'",
            "mongodb://127.0.0.1:1/none",
            "PyMongo 4.12.1 is too old for jobcore's MongoDB driver, which needs PyMongo 4.13",
            "pip install --upgrade 'pymongo>=4.13' (the jobcore-queue[mongo] extra asks for it)",
        ),
    ],
    ids=["psycopg", "pymongo"],
)
def test_a_driver_library_older_than_its_floor_is_refused_by_name(
    made_old: str, url: str, cause: str, fix: str
) -> None:
    """Below the floor, each driver used to fail its first calls with a raw AttributeError inside
    (psycopg: every call as "no database connection could be had in time"). Now the import, so
    connect() and every `jobcore` command, answers JC_DRIVER_UNAVAILABLE naming the version to
    install; shown with the installed library made to look old."""
    import psycopg  # noqa: PLC0415 - the installed version, as the refusal names it

    script = f"import sys; {made_old}; from jobcore.cli import main; sys.exit(main(['stats', '--url', {url!r}]))"
    proc = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stderr.splitlines() == [
        f"error JC_DRIVER_UNAVAILABLE: {cause.format(version=psycopg.__version__)}",
        f"  fix: {fix}",
    ]
    assert proc.returncode != 0

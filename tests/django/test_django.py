"""jobcore.contrib.django in a real Django project (tests/django/project) on the test PostgreSQL.

The project's settings take their database from ``SHOP_DATABASE_URL``: a database created
for this module on the session's server. ``manage.py`` runs in subprocesses (migrate, the
worker, the test runner); the transaction tests run the project in this process. Every
check reads the store through a driver of its own (``observer``), never Django's connection.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import django
import psycopg
import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.test import Client
from jobcore.drivers.postgres import PostgresDriver
from psycopg import sql

from fixtures import postgres as fx
from jobcore.contrib.django import enqueue, enqueue_many
from jobcore.contrib.django._settings import build_driver, read_config
from jobcore.current import set_job_driver, use_job_driver
from jobcore.errors import ConfigurationError, NotSupported
from jobcore.registry import default_registry

pytestmark = pytest.mark.timeout(180)

PROJECT = Path(__file__).resolve().parent / "project"
SCHEMA = "jobcore_shop"


def _run_manage(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOP_DATABASE_URL": url, "SHOP_JOBCORE_SCHEMA": SCHEMA, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def shop_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database for the project, on the session's server; dropped afterwards."""
    base = fx.server_url(request.config)
    name = f"jc_django_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            for db in (name, f"test_{name}"):
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


@pytest.fixture(scope="module")
def migrated(shop_url: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """``python manage.py migrate`` run once on the fresh database."""
    done = _run_manage(shop_url, "migrate", "--no-input")
    assert done.returncode == 0, done.stderr
    return shop_url, done


@pytest.fixture(scope="module")
def observer(migrated: tuple[str, Any]) -> Iterator[Any]:
    """A driver of its own on the project's database and jobcore schema: the independent record."""
    driver = PostgresDriver(migrated[0], schema=SCHEMA, pool_min=0, pool_max=2)
    yield driver
    driver.close()


@pytest.fixture(scope="module")
def shop(migrated: tuple[str, Any]) -> Iterator[SimpleNamespace]:
    """The project set up in this process (django.setup()), its app's driver the process-wide one
    inside each test only; the job it registers is removed afterwards."""
    os.environ["SHOP_DATABASE_URL"] = migrated[0]
    os.environ["SHOP_JOBCORE_SCHEMA"] = SCHEMA
    os.environ["DJANGO_SETTINGS_MODULE"] = "shop.settings"
    sys.path.insert(0, str(PROJECT))
    before = set_job_driver(None)
    django.setup()
    from shop.orders import views  # noqa: PLC0415 - the project's modules import once Django is set up
    from shop.orders.jobs import fulfil  # noqa: PLC0415
    from shop.orders.models import Order  # noqa: PLC0415

    app = apps.get_app_config("jobcore")
    set_job_driver(before)  # other tests in this process see no driver of Django's
    try:
        yield SimpleNamespace(app=app, driver=app.driver, views=views, fulfil=fulfil, Order=Order)
    finally:
        app.driver.close()
        connections.close_all()
        default_registry.remove(fulfil.name)
        sys.path.remove(str(PROJECT))


@pytest.fixture
def django_driver(shop: SimpleNamespace) -> Iterator[Any]:
    with use_job_driver(shop.driver) as driver:
        yield driver


# -- manage.py migrate ---------------------------------------------------------------------


def test_manage_py_migrate_installs_jobcore_beside_djangos_tables(migrated: tuple[str, Any], observer: Any) -> None:
    """One `migrate` creates the project's tables and jobcore's schema; running it again changes nothing."""
    url, first = migrated
    assert "Applying jobcore.0001_jobcore_schema... OK" in first.stdout
    assert "Applying orders.0001_initial... OK" in first.stdout
    assert observer.migrate(dry_run=True).changed is False  # jobcore's schema is at its latest
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('orders_order') IS NOT NULL").fetchone() == (True,)
        assert conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (SCHEMA,)
        ).fetchone()[0] > 0
    again = _run_manage(url, "migrate", "--no-input")
    assert again.returncode == 0, again.stderr
    assert "No migrations to apply" in again.stdout
    plan = _run_manage(url, "jobcore_migrate", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert f"already at version {observer.migrate(dry_run=True).latest}" in plan.stdout, plan.stdout


# -- enqueue joins transaction.atomic() ------------------------------------------------------

WAYS = ["handle", "helper"]


def _enqueue(shop: SimpleNamespace, way: str, order_pk: int) -> Any:
    if way == "handle":
        return shop.fulfil.enqueue({"order": order_pk})
    return enqueue(shop.fulfil, {"order": order_pk})


@pytest.mark.parametrize("way", WAYS)
def test_a_committed_atomic_block_stores_the_job_at_commit(
    shop: SimpleNamespace, django_driver: Any, observer: Any, way: str
) -> None:
    """Inside the block the job is on Django's connection only (not visible elsewhere); after it, it is stored."""
    with transaction.atomic():
        order = shop.Order.objects.create(name=f"commit-{way}")
        queued = _enqueue(shop, way, order.pk)
        assert observer.introspect.get(queued.id) is None  # uncommitted: Django's transaction holds it
    stored = observer.introspect.get(queued.id)
    assert stored is not None
    assert (stored.name, stored.queue, stored.payload, stored.max_attempts) == (
        shop.fulfil.name, "orders", {"order": order.pk}, 3,
    )


@pytest.mark.parametrize("way", WAYS)
def test_an_exception_inside_atomic_takes_the_job_with_it(
    shop: SimpleNamespace, django_driver: Any, observer: Any, way: str
) -> None:
    seen: list[Any] = []
    with pytest.raises(shop.views.Refused):
        shop.views.place_order(f"refused-{way}", helper=way == "helper", fail=True, seen=seen)
    assert observer.introspect.get(seen[0].id) is None
    assert not shop.Order.objects.filter(name=f"refused-{way}").exists()


@pytest.mark.parametrize("way", WAYS)
def test_a_rolled_back_savepoint_drops_its_job_and_keeps_the_outer_one(
    shop: SimpleNamespace, django_driver: Any, observer: Any, way: str
) -> None:
    with transaction.atomic():
        outer = _enqueue(shop, way, shop.Order.objects.create(name=f"outer-{way}").pk)
        inner: list[Any] = []
        with contextlib.suppress(shop.views.Refused), transaction.atomic():  # a savepoint
            inner.append(_enqueue(shop, way, shop.Order.objects.create(name=f"inner-{way}").pk))
            raise shop.views.Refused("inner")
    assert observer.introspect.get(outer.id) is not None
    assert observer.introspect.get(inner[0].id) is None
    assert shop.Order.objects.filter(name=f"outer-{way}").exists()
    assert not shop.Order.objects.filter(name=f"inner-{way}").exists()


def test_enqueue_many_inside_atomic_rolls_back_with_the_block(
    shop: SimpleNamespace, django_driver: Any, observer: Any
) -> None:

    kept: list[Any] = []
    dropped: list[Any] = []
    with transaction.atomic():
        kept += shop.fulfil.enqueue_many([{"order": 0}, {"order": -1}])
    with contextlib.suppress(shop.views.Refused), transaction.atomic():
        dropped += enqueue_many([{"name": shop.fulfil.name, "payload": {"order": 0}}] * 2)
        raise shop.views.Refused("batch")
    assert len(dropped) == 2
    assert [observer.introspect.get(j.id) is not None for j in kept + dropped] == [True, True, False, False]


def test_outside_atomic_the_job_is_stored_at_once(shop: SimpleNamespace, django_driver: Any, observer: Any) -> None:
    """Django's autocommit: no block to join, the job is stored before enqueue answers."""
    queued = shop.fulfil.enqueue({"order": 0})
    assert observer.introspect.get(queued.id) is not None
    helped = enqueue("other.job", {"n": 1}, queue="q")
    assert (observer.introspect.get(helped.id).name, helped.queue) == ("other.job", "q")


def test_a_view_commits_its_row_and_job_together(shop: SimpleNamespace, django_driver: Any, observer: Any) -> None:
    """A request through Django's test client: 201 stores both; a refused order stores neither."""
    client = Client()
    made = client.post("/orders", {"name": "from-view"}, content_type="application/json")
    assert made.status_code == 201
    body = made.json()
    assert observer.introspect.get(body["job"]).payload == {"order": body["order"]}
    before = observer.introspect.stats().counts
    refused = client.post("/orders", {"name": "view-refused", "fail": True}, content_type="application/json")
    assert refused.status_code == 409
    assert not shop.Order.objects.filter(name="view-refused").exists()
    assert observer.introspect.stats().counts == before  # no job more than before the refused request


# -- the worker management command ---------------------------------------------------------


def test_manage_py_jobcore_worker_runs_the_apps_jobs(shop: SimpleNamespace, django_driver: Any, observer: Any) -> None:
    """The worker imports orders/jobs.py, runs the committed job (its handler uses the ORM) and
    drains on SIGTERM with exit status 0."""
    order, queued = shop.views.place_order("for-the-worker")
    env = {**os.environ, "SHOP_DATABASE_URL": os.environ["SHOP_DATABASE_URL"], "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "jobcore_worker", "--queues", "orders", "--concurrency", "1",
         "--poll-interval", "0.2", "--no-scheduler", "--no-prune", "--drain-timeout", "5"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        job = observer.introspect.get(queued.id)
        while job.state != "done" and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            job = observer.introspect.get(queued.id)
        assert job.state == "done", f"job {job.state} after 60 s; worker exited {proc.poll()}"
        assert job.result == "fulfilled 1"
        shop.Order.objects.get(pk=order.pk).refresh_from_db()
        assert shop.Order.objects.get(pk=order.pk).fulfilled is True
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output


def test_the_worker_command_refuses_bad_options_with_codes(shop: SimpleNamespace) -> None:
    with pytest.raises(CommandError, match="JC_CLAIM_QUEUES_EMPTY") as caught:
        call_command("jobcore_worker", queues=" , ")
    assert caught.value.returncode != 0
    with pytest.raises(CommandError, match="JC_OPTION_INVALID"):
        call_command("jobcore_worker", connections=0)



def test_the_worker_command_refuses_modules_declaring_no_jobs(migrated: tuple[str, Any]) -> None:
    """Run as a user does: exit status 5 (JC_CONFIGURATION) with the cause and the fix, no worker started."""
    # --skip-checks: Django's URL checks would import the views, and with them shop/orders/jobs.py.
    done = _run_manage(migrated[0], "jobcore_worker", "json", "--skip-checks", timeout=60)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "JC_CONFIGURATION: json declare no @job handlers" in done.stderr
    assert "fix: declare @job handlers" in done.stderr


# -- Django's test runner -----------------------------------------------------------------


def test_under_manage_py_test_jobs_land_in_the_test_database(migrated: tuple[str, Any], observer: Any) -> None:
    """The migration that builds the test database points jobcore at it, and lets it be dropped after."""
    done = _run_manage(migrated[0], "test", "shop.orders", "--no-input", "-v", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    marker = next(line for line in done.stdout.splitlines() if line.startswith("JOBCORE-TEST-DATABASE"))
    _, database = marker.split()
    assert database == f"test_{urlsplit(migrated[0]).path.lstrip('/')}"
    # Nothing of the test's in the project's own database: no job in its queue, no row.
    assert "only-in-test" not in observer.introspect.stats().counts
    with psycopg.connect(migrated[0]) as conn:
        assert conn.execute("SELECT count(*) FROM orders_order WHERE name = 'in-test'").fetchone() == (0,)
    assert "Destroying test database" in done.stderr


# -- settings --------------------------------------------------------------------------------

PG = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "app"}}


@pytest.mark.parametrize(
    ("jobcore", "databases", "needle"),
    [
        (["URL"], PG, "must be a dict"),
        ({"url": "memory://"}, PG, "unknown key(s) url"),
        ({"URL": 5}, PG, "must be a driver URL"),
        ({"OPTIONS": "schema=x"}, PG, "OPTIONS'] must be a dict"),
        ({"DATABASE": "other"}, PG, "'other' is not a database"),
        (None, {"default": {"ENGINE": "django.db.backends.sqlite3"}}, "needs PostgreSQL there"),
        ({"JOIN_ATOMIC": "yes"}, PG, "must be True or False"),
        ({"URL": "memory://", "JOIN_ATOMIC": True}, PG, "only a PostgreSQL store"),
    ],
)
def test_bad_settings_are_refused_with_cause_and_fix(jobcore: Any, databases: Any, needle: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        read_config(SimpleNamespace(JOBCORE=jobcore, DATABASES=databases))
    assert caught.value.code == "JC_CONFIGURATION"
    assert needle in caught.value.cause
    assert caught.value.fix


def test_defaults_and_a_url(shop: SimpleNamespace) -> None:
    """No JOBCORE: PostgreSQL on DATABASES['default'], joining atomic(); a URL: that driver, not joining."""
    default = read_config(SimpleNamespace(DATABASES=PG))
    assert (default.url, default.database, default.join_atomic, dict(default.options)) == (None, "default", True, {})
    config = read_config(SimpleNamespace(JOBCORE={"URL": "memory://"}, DATABASES=PG))
    assert config.join_atomic is False
    memory = build_driver(config, PG["default"])
    assert type(memory).__name__ == "MemoryDriver"
    with use_job_driver(memory), pytest.raises(NotSupported) as caught:
        enqueue("x")
    assert caught.value.code == "JC_NOT_SUPPORTED"
    assert memory.introspect.stats().counts == {}


def test_importing_jobcore_imports_no_django() -> None:
    code = "import sys, jobcore, jobcore.registry, jobcore.cli, jobcore.cli.worker; print('django' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def test_starting_django_opens_no_connection(shop: SimpleNamespace) -> None:
    """ready() builds the driver without connecting: management commands that never touch the
    database (collectstatic in an image build) start with the server unreachable."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens on it once closed
    config = read_config(SimpleNamespace(DATABASES=PG))
    started = time.monotonic()
    driver = build_driver(config, {"NAME": "app", "HOST": "127.0.0.1", "PORT": str(port), "USER": "nobody"})
    try:
        assert time.monotonic() - started < 1.0
        assert (driver.django_database, driver.join_atomic, driver.database_name) == ("default", True, "app")
    finally:
        driver.close()


def test_the_app_needs_no_new_migration(shop: SimpleNamespace) -> None:
    """makemigrations finds nothing to write for jobcore (it has no models) or the project."""
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)

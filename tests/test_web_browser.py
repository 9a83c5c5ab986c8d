"""The dashboard in a real browser: headless Chromium from Debian, driven by Playwright.

A real server (uvicorn, in a thread) serves the app over the parity suite's ``driver``
(memory, PostgreSQL, MongoDB). The browser clicks through every page from the top
navigation, runs every operator verb with the page's own buttons (accepting the
confirmation dialog) and checks the store changed, read back through
``driver.introspect``. A job whose payload, name, queue and error carry a ``<script>``
tag is on every page; the script would set ``window.__pwned`` or open an alert, and
neither may ever happen.

Playwright never downloads a browser here: it launches ``/usr/bin/chromium`` (Debian's
``chromium`` package, which ``./dev`` installs). Without it the tests skip naming the
package, except in CI (``CI=true``), where a missing browser fails.

``JOBCORE_SCREENSHOTS=docs/img`` makes :func:`test_screenshots` refresh the pictures
docs/dashboard.md shows; by default they go to a temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from jobcore.drivers.memory import MemoryDriver
from jobcore.parity.plugin import START
from starlette.applications import Starlette

from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import JobState
from jobcore.schedules import ScheduleDefinition, cron, every
from jobcore.web import create_app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LEASE = timedelta(minutes=5)
EVIL = "<script>window.__pwned=1;alert('pwned')</script>\"'&é中🙂"
ROOT = Path(__file__).resolve().parents[1]


def _need_browser() -> None:
    if not os.path.exists(CHROMIUM):
        message = "headless Chromium is missing: apt-get install chromium (./dev installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _need_browser()
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only once a browser exists

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


class _Server:
    """uvicorn serving ``app`` on a free loopback port, in a thread."""

    def __init__(self, app: Starlette) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    alerts: list[str] = []

    def on_dialog(dialog: Any) -> None:
        if dialog.type != "confirm":
            alerts.append(dialog.message)  # an injected alert(); never expected
        dialog.accept()

    tab.on("dialog", on_dialog)
    tab.alerts = alerts
    try:
        yield tab
    finally:
        context.close()


def _not_pwned(page: Any) -> None:
    assert page.evaluate("window.__pwned === undefined"), f"a stored script ran on {page.url}"
    assert page.alerts == []


def _park(driver: JobDriver, queue: str, how: str) -> str:
    job = driver.enqueue(f"{how}-job", {"how": how}, queue=queue, max_attempts=1)
    claimed = driver.claim([queue], worker_id="w-seed", lease=LEASE).claimed[0]
    assert claimed.job.id == job.id
    if how == "dead":
        driver.nack(claimed.token, EVIL)
    else:
        driver.nack(claimed.token, "waiting for a human", park=True)
    return job.id


def test_click_through_every_page_and_run_every_verb(driver: JobDriver, page: Any, clock: ManualClock) -> None:
    evil = driver.enqueue(EVIL[:60], {"note": EVIL}, queue="mail", key=EVIL).id
    later = driver.enqueue("digest", queue="mail", delay=3600).id
    dead = _park(driver, "reports", "dead")
    parked = _park(driver, "held", "suspended")
    driver.enqueue("transcode", queue="video")
    transcoding = driver.claim(["video"], worker_id="worker-7", lease=LEASE).claimed[0]
    running = transcoding.job.id
    assert driver.progress(transcoding.token, 0.4, "frame 400 " + EVIL) is True
    definition = ScheduleDefinition(name="nightly", trigger=every(timedelta(hours=1)), job="digest")
    driver.schedules.declare("nightly", definition.to_json())

    with _Server(create_app(driver, auth=None)) as server:
        page.goto(server.url + "/")
        assert page.title() == "Overview · jobcore"
        assert page.locator("a[href='/jobs?queue=mail']").first.is_visible()
        _not_pwned(page)

        # Jobs: every job listed, newest first; the stored script is shown as text.
        page.click("nav >> text=Jobs")
        page.wait_for_url("**/jobs")
        assert page.locator("table.jobs tbody tr").count() == 5
        # The running job's stored progress (rules G): a bar, its percent and its message, as text.
        row = page.locator(f"table.jobs tbody tr:has(a[href='/jobs/{running}'])")
        assert row.locator("progress").get_attribute("value") == "0.4"
        assert "40%" in row.inner_text()
        assert "frame 400" in row.inner_text()
        assert page.locator("table.jobs th:has-text('Progress')").is_visible()
        page.goto(f"{server.url}/jobs/{running}")
        shown = page.locator("dd.progress")
        assert shown.locator("progress").get_attribute("value") == "0.4"
        assert shown.locator(".msg").inner_text() == "frame 400 " + EVIL  # shown as text, exactly
        assert "ago)" in shown.inner_text()
        _not_pwned(page)
        page.goto(server.url + "/jobs")
        page.fill("input[name=queue]", "mail")
        page.click("button:has-text('Filter')")
        page.wait_for_url("**/jobs?queue=mail**")
        assert page.locator("table.jobs tbody tr").count() == 2
        page.click(f"a[href='/jobs/{evil}']")
        page.wait_for_url(f"**/jobs/{evil}")
        assert json.loads(page.locator("pre.json").inner_text()) == {"note": EVIL}  # shown as text, exactly
        _not_pwned(page)

        # cancel (with a reason), then requeue it: the job page's own buttons.
        page.fill("input[name=reason]", "browser test")
        page.click("button.verb-cancel")
        page.wait_for_url(f"**/jobs/{evil}?did=cancel")
        assert driver.introspect.get(evil).state is JobState.CANCELLED  # type: ignore[union-attr]
        page.click("button.verb-requeue")
        page.wait_for_url(f"**/jobs/{evil}?did=requeue")
        assert driver.introspect.get(evil).state is JobState.READY  # type: ignore[union-attr]

        page.goto(f"{server.url}/jobs/{later}")
        page.click("button.verb-promote")
        page.wait_for_url("**?did=promote")
        assert driver.introspect.get(later).state is JobState.READY  # type: ignore[union-attr]

        page.goto(f"{server.url}/jobs/{parked}")
        page.click("button.verb-resume")
        page.wait_for_url("**?did=resume")
        assert driver.introspect.get(parked).state is JobState.READY  # type: ignore[union-attr]

        page.click("button.verb-remove")
        page.wait_for_selector("text=Removed job")
        assert driver.introspect.get(parked) is None

        # Dead letters -> bulk requeue, with the count shown before anything changes.
        page.click("nav >> text=Dead letters")
        page.wait_for_url("**/dead")
        assert page.locator(f"a[href='/jobs/{dead}']").is_visible()
        _not_pwned(page)
        page.click("text=Requeue dead jobs")
        page.wait_for_url("**/bulk?**")
        assert page.inner_text("#match-count") == "1"
        assert driver.introspect.get(dead).state is JobState.DEAD  # type: ignore[union-attr]
        page.click("#confirm")
        page.wait_for_selector("#affected")
        assert page.inner_text("#affected") == "1"
        assert page.inner_text("#remaining") == "0"
        assert driver.introspect.get(dead).state.is_live  # type: ignore[union-attr]

        # Schedules: pause.
        page.click("nav >> text=Schedules")
        page.wait_for_url("**/schedules")
        page.click("button:has-text('pause')")
        page.wait_for_url("**/schedules?did=paused**")
        assert driver.schedules.get("nightly").paused  # type: ignore[union-attr]

        # Workers: who holds which lease, and which fleet slot.
        assert driver.leases.acquire("api-quota", 2, "worker-7/1", timedelta(minutes=5)) is True
        page.click("nav >> text=Workers")
        page.wait_for_url("**/slots")
        assert page.locator("h2:has-text('worker-7')").is_visible()
        slot = page.locator("#fleet-slots-table tbody tr")
        assert slot.count() == 1
        assert slot.inner_text().split("\t")[:2] == ["api-quota", "worker-7/1"]
        assert "5m00s" in slot.inner_text()
        assert page.locator(f"a[href='/jobs/{running}']").is_visible()

        # Bulk cancel from a filtered jobs page.
        page.goto(server.url + "/jobs?queue=mail")
        page.click("button.verb-cancel")
        page.wait_for_url("**/bulk?**")
        assert page.inner_text("#match-count") == "2"
        page.click("#confirm")
        page.wait_for_selector("#affected")
        assert driver.introspect.stats().count(JobState.CANCELLED, "mail") == 2
        _not_pwned(page)

        # Rescue: worker-7 went silent and its lease lapsed.
        clock.advance(minutes=10)
        page.goto(server.url + "/slots")
        page.click("#rescue")
        page.wait_for_selector("#requeued")
        assert page.inner_text("#requeued") == "1"
        assert driver.introspect.get(running).state is JobState.READY  # type: ignore[union-attr]


def _busy_store() -> MemoryDriver:
    """A store with an hour of history: the overview's charts have something to draw."""
    clock = ManualClock(START)
    driver = MemoryDriver(clock=clock)
    queues = ("mail", "reports", "video", "webhooks")
    for minute in range(60):
        for i in range(3 + (minute * 7) % 11):
            queue = queues[(minute + i) % len(queues)]
            driver.enqueue(f"{queue}.process", {"minute": minute, "i": i, "user": f"u-{i}"}, queue=queue,
                           max_attempts=2 if i % 5 == 0 else 20)
        for queue in queues:
            for claimed in driver.claim([queue], worker_id=f"host-{queue}/1", lease=LEASE, limit=4).claimed:
                if claimed.job.payload["i"] % 5 == 0 and minute % 3 == 0:
                    driver.nack(claimed.token, ConnectionError("upstream 503: service unavailable"), fail=True)
                else:
                    driver.ack(claimed.token, {"ok": True, "took_ms": 40 + claimed.job.payload["i"]})
        clock.advance(minutes=1)
    job = driver.enqueue("reports.build", {"report": "monthly", "format": "pdf"}, queue="reports", max_attempts=1)
    token = driver.claim(["reports"], worker_id="host-reports/2", lease=LEASE, limit=1000)
    for claimed in token.claimed:
        if claimed.job.id == job.id:
            driver.nack(claimed.token, "KeyError: 'customer_id'\n  File \"reports.py\", line 42, in build")
    driver.enqueue("video.transcode", {"file": "intro.mp4"}, queue="video")
    driver.claim(["video"], worker_id="host-video/3", lease=LEASE, limit=3)
    for name, trigger in (("nightly-report", cron("30 2 * * *", tz="Europe/Warsaw")),
                          ("sync-crm", every(timedelta(minutes=15)))):
        driver.schedules.declare(name, ScheduleDefinition(name=name, trigger=trigger, job=name).to_json())
    driver.schedules.pause("sync-crm")
    return driver


def test_screenshots(page: Any, tmp_path: Path) -> None:
    target = Path(os.environ.get("JOBCORE_SCREENSHOTS") or tmp_path)
    if not target.is_absolute():
        target = ROOT / target
    target.mkdir(parents=True, exist_ok=True)
    driver = _busy_store()
    dead = driver.introspect.dead_letters(None, 1)
    failed_id = dead[0].id if dead else driver.introspect.list(None, 1).jobs[0].id
    shots = {
        "overview": "/",
        "jobs": "/jobs?queue=reports",
        "job": f"/jobs/{failed_id}",
        "dead": "/dead",
        "confirm": "/bulk?verb=requeue&state=failed&queue=mail",
        "schedules": "/schedules",
        "slots": "/slots",
    }
    with _Server(create_app(driver, auth=None)) as server:
        for name, path in shots.items():
            page.goto(server.url + path)
            page.wait_for_load_state("load")
            page.screenshot(path=str(target / f"dashboard-{name}.png"), full_page=False)
            _not_pwned(page)
    for name in shots:
        assert (target / f"dashboard-{name}.png").stat().st_size > 10_000
    driver.close()

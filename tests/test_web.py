"""The operator dashboard (``jobcore.web``), through Starlette's TestClient, on every driver.

Each test builds the app over the parity suite's ``driver`` (memory, PostgreSQL and
MongoDB, on a :class:`ManualClock`), reads pages as a browser would and checks what an
operator would: the numbers, the links, that a write changed the store (read back
through ``driver.introspect``, independent of the page), that a refused write changed
nothing, and that stored text is shown as text. Data stays tiny: the MongoDB-wire test
server is slow.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from jobcore.drivers.memory import MemoryDriver
from jobcore.parity.plugin import START
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from jobcore import cli
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.errors import WebUnprotected
from jobcore.records import JobState
from jobcore.schedules import ScheduleDefinition, every
from jobcore.web import check_exposure, create_app

LEASE = timedelta(seconds=30)
EVIL = "<script>window.__pwned=1</script>\"'&<b>é中🙂"
"""Stored text carrying a script tag, both quotes, an ampersand, markup and non-ASCII."""


def _allow(_request: Any) -> bool:
    return True


@pytest.fixture
def client(driver: JobDriver) -> TestClient:
    return TestClient(create_app(driver, auth=_allow), follow_redirects=False)


def _csrf(client: TestClient, path: str = "/") -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" (?:value|content)="([^"]+)"', page.text)
    assert found, "no form on the page"
    return found.group(1)


def _fail(driver: JobDriver, message: str, *, queue: str = "default", dead: bool = True) -> str:
    job = driver.enqueue("flaky", {"n": 1}, queue=queue, max_attempts=1, priority=1000)  # claimed first
    claimed = driver.claim([queue], worker_id="w-1", lease=LEASE).claimed[0]
    assert claimed.job.id == job.id
    driver.nack(claimed.token, message, dead_letter=dead)
    return job.id


# -- pages ---------------------------------------------------------------------------------


def test_overview_counts_queues_and_charts_from_the_store(driver: JobDriver, client: TestClient,
                                                          clock: ManualClock) -> None:
    driver.enqueue("a", queue="mail")
    driver.enqueue("a", queue="mail", delay=3600)
    driver.enqueue("b", queue="reports")
    done = driver.claim(["reports"], worker_id="w", lease=LEASE).claimed[0]
    driver.ack(done.token, {"ok": True})
    _fail(driver, "boom", queue="mail")
    clock.advance(seconds=90)
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    assert 'data-refresh="10"' in html  # refreshes by itself
    assert '<a href="/jobs?queue=mail">mail</a>' in html
    assert '<a href="/jobs?queue=reports">reports</a>' in html
    # mail: one ready, one scheduled, one dead; the counts link to the filtered list.
    assert 'href="/jobs?queue=mail&amp;state=dead" class="count c-dead">1</a>' in html
    assert 'href="/jobs?queue=mail&amp;state=scheduled" class="count c-scheduled">1</a>' in html
    assert "1m30s" in html  # the oldest due job of mail waited 90 s
    # One completed and one failed job in the last hour: one bar each.
    assert re.search(r"Completed per minute, last 60 min <strong>1</strong>", html)
    assert re.search(r"Failed or dead per minute, last 60 min <strong>1</strong>", html)
    assert html.count('class="fill-done"><title>') == 1
    assert html.count('class="fill-failed"><title>') == 1


def test_jobs_page_filters_and_pages_with_cursors(driver: JobDriver, client: TestClient) -> None:
    ids = [driver.enqueue("resize", {"i": i}, queue="img").id for i in range(5)]
    other = driver.enqueue("mail", queue="out").id
    page = client.get("/jobs", params={"queue": "img", "limit": "2"})
    assert page.status_code == 200
    listed = re.findall(r'<a href="/jobs/([^"]+)">', page.text)
    assert listed == [ids[4], ids[3]]  # newest first
    older = re.search(r'rel="next" href="([^"]+)"', page.text)
    assert older
    page2 = client.get(older.group(1).replace("&amp;", "&"))
    assert re.findall(r'<a href="/jobs/([^"]+)">', page2.text) == [ids[2], ids[1]]
    assert 'rel="prev"' in page2.text
    assert "queue=img" in older.group(1)  # paging keeps the filter
    by_name = client.get("/jobs", params={"name": "mail"})
    assert re.findall(r'<a href="/jobs/([^"]+)">', by_name.text) == [other]
    by_state = client.get("/jobs", params={"state": "ready", "queue": "out"})
    assert re.findall(r'<a href="/jobs/([^"]+)">', by_state.text) == [other]
    prefix = client.get("/jobs", params={"id": other})
    assert re.findall(r'<a href="/jobs/([^"]+)">', prefix.text) == [other]
    none = client.get("/jobs", params={"from": "2100-01-01", "queue": "img"})
    assert "No jobs match." in none.text
    bad = client.get("/jobs", params={"state": "sleeping"})
    assert bad.status_code == 400
    assert "JC_OPTION_INVALID" in bad.text
    assert "state &#39;sleeping&#39; is not a job state" in bad.text


def test_job_page_shows_payload_errors_and_lease(driver: JobDriver, client: TestClient) -> None:
    job = driver.enqueue("report", {"user": 7, "tags": ["a", "b"]}, key="k-1", priority=3, max_attempts=3)
    first = driver.claim(["default"], worker_id="host-a/1", lease=LEASE).claimed[0]
    driver.nack(first.token, ValueError("disk full"))
    driver.claim(["default"], worker_id="host-b/2", lease=LEASE)
    html = client.get(f"/jobs/{job.id}").text
    assert '<pre class="json">{\n  &#34;tags&#34;: [\n    &#34;a&#34;,' in html  # pretty JSON, escaped
    assert "<dd class=\"mono\">k-1</dd>" in html
    assert "<dd>3</dd>" in html
    assert "held by <span class=\"mono\">host-b/2</span> (claim 2)" in html
    assert '<td class="etype">ValueError</td><td><pre class="msg">disk full</pre>' in html
    assert "2 of 3" in html
    missing = client.get("/jobs/999999999")
    assert missing.status_code == 404
    assert "JC_JOB_NOT_FOUND" in missing.text


def test_job_page_and_jobs_list_show_stored_progress(driver: JobDriver, client: TestClient, clock: ManualClock) -> None:
    """A running job's progress: a <progress> bar, percent, message and age; the list adds a
    Progress column only while a running job on it reported (rules G)."""
    quiet = driver.enqueue("quiet", queue="other").id
    assert "<th>Progress</th>" not in client.get("/jobs").text
    job = driver.enqueue("import_rows", queue="img")
    token = driver.claim(["img"], worker_id="w", lease=LEASE).claimed[0].token
    assert driver.progress(token, 0.4, "row 400 of 1000") is True
    clock.advance(seconds=12)
    html = client.get(f"/jobs/{job.id}").text
    assert '<progress max="1" value="0.4">40%</progress> <span class="pct">40%</span>' in html
    assert '<span class="msg">row 400 of 1000</span> <span class="muted">(12s ago)</span>' in html
    assert "<dt>Progress</dt><dd class=\"progress\">-</dd>" in client.get(f"/jobs/{quiet}").text
    listing = client.get("/jobs").text
    assert "<th>Progress</th>" in listing
    assert listing.count("<progress ") == 1
    assert '<span class="msg">row 400 of 1000</span>' in listing
    assert driver.progress(token, None, EVIL) is True  # no fraction: an indeterminate bar; the text escaped
    html = client.get(f"/jobs/{job.id}").text
    assert '<progress max="1"></progress>' in html
    assert "<script>window" not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html


@pytest.mark.requires("dependencies")
def test_job_page_links_parents_and_children(driver: JobDriver, client: TestClient) -> None:
    """The job page lists a job's parents and children, each a link to its own page (rules D)."""
    part = driver.enqueue("part")
    report = driver.enqueue("report", depends_on=[part])
    html = client.get(f"/jobs/{report.id}").text
    assert "<h2>Dependencies</h2>" in html
    assert f'<a class="mono" href="/jobs/{part.id}">{part.id}</a>' in html
    assert "Waiting until every parent is done." in html
    assert f'<a class="mono" href="/jobs/{report.id}">{report.id}</a>' in client.get(f"/jobs/{part.id}").text
    alone = driver.enqueue("alone")
    assert "<h2>Dependencies</h2>" not in client.get(f"/jobs/{alone.id}").text


def test_dead_letters_page_lists_dead_jobs_only(driver: JobDriver, client: TestClient) -> None:
    dead = _fail(driver, "gave up", queue="mail")
    failed = _fail(driver, "no retry", queue="mail", dead=False)
    html = client.get("/dead").text
    assert f'href="/jobs/{dead}"' in html
    assert f'href="/jobs/{failed}"' not in html
    assert 'href="/bulk?verb=requeue&amp;state=dead"' in html
    assert "No dead jobs." in client.get("/dead", params={"queue": "other"}).text


def test_schedules_page_and_pause_resume(driver: JobDriver, client: TestClient) -> None:
    definition = ScheduleDefinition(name="sync", trigger=every(timedelta(minutes=5)), job="sync", queue="q")
    driver.schedules.declare("sync", definition.to_json())
    html = client.get("/schedules").text
    assert '<td class="mono">sync</td>' in html
    assert "every 5m" in html
    assert "2030-01-01 12:05:00" in html  # next occurrence, on the store's clock
    token = _csrf(client, "/schedules")
    answer = client.post("/schedules/pause", data={"csrf": token, "name": "sync"})
    assert answer.status_code == 303
    stored = driver.schedules.get("sync")
    assert stored is not None
    assert stored.paused
    assert "schedule <span class=\"mono\">sync</span> paused" in client.get(answer.headers["location"]).text
    client.post("/schedules/resume", data={"csrf": token, "name": "sync"})
    stored = driver.schedules.get("sync")
    assert stored is not None
    assert not stored.paused
    unknown = client.post("/schedules/pause", data={"csrf": token, "name": "nope"})
    assert unknown.status_code == 404
    assert "JC_SCHEDULE_NOT_FOUND" in unknown.text


def test_workers_page_shows_lease_holders(driver: JobDriver, client: TestClient) -> None:
    job = driver.enqueue("long")
    driver.claim(["default"], worker_id="worker-7", lease=LEASE)
    html = client.get("/slots").text
    assert '<h2 class="mono">worker-7 <span class="muted">(1)</span></h2>' in html
    assert f'href="/jobs/{job.id}"' in html
    assert "2030-01-01 12:00:30Z" in html  # lease until, store time


def test_workers_page_shows_fleet_slots(driver: JobDriver, client: TestClient, clock: ManualClock) -> None:
    assert "No slot is held." in client.get("/slots").text
    assert driver.leases.acquire("api", 2, "a<1>", timedelta(seconds=90)) is True
    assert driver.leases.acquire("api", 2, "w2", timedelta(seconds=30)) is True
    clock.advance(seconds=10)
    html = client.get("/slots").text
    rows = html.split('id="fleet-slots-table"')[1].split("</table>")[0]
    assert rows.index("a&lt;1&gt;") < rows.index("w2")  # escaped, by holder
    assert "2030-01-01 12:01:30Z" in rows
    assert ">1m20s<" in rows
    assert "2030-01-01 12:00:30Z" in rows
    assert ">20s<" in rows
    clock.advance(seconds=20)  # w2's slot lapses
    rows = client.get("/slots").text.split('id="fleet-slots-table"')[1].split("</table>")[0]
    assert "w2" not in rows
    assert "a&lt;1&gt;" in rows


# -- writes --------------------------------------------------------------------------------


def test_rescue_sweeps_lapsed_leases(driver: JobDriver, client: TestClient, clock: ManualClock) -> None:
    back = driver.enqueue("a", max_attempts=5).id
    buried = driver.enqueue("b", max_attempts=1).id
    driver.claim(["default"], worker_id="gone", lease=LEASE, limit=2)
    clock.advance(seconds=60)
    assert 'action="/rescue"' in client.get("/slots").text
    answer = client.post("/rescue", data={"csrf": _csrf(client)})
    assert answer.status_code == 200
    assert '<span id="requeued">1</span>' in answer.text
    assert '<span id="buried">1</span>' in answer.text
    assert driver.introspect.get(back).state is JobState.READY  # type: ignore[union-attr]
    assert driver.introspect.get(buried).state is JobState.DEAD  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("verb", "before", "after"),
    [
        ("cancel", "ready", JobState.CANCELLED),
        ("promote", "scheduled", JobState.READY),
        ("requeue", "dead", JobState.READY),
        ("resume", "suspended", JobState.READY),
        ("remove", "ready", None),
    ],
)
def test_each_verb_on_one_job_changes_the_store(
    driver: JobDriver, client: TestClient, verb: str, before: str, after: JobState | None
) -> None:
    if before == "dead":
        job_id = _fail(driver, "x")
    elif before == "suspended":
        job_id = driver.enqueue("p").id
        token = driver.claim(["default"], worker_id="w", lease=LEASE).claimed[0].token
        driver.nack(token, "parked", park=True)
    else:
        job_id = driver.enqueue("j", delay=60 if before == "scheduled" else None).id
    html = client.get(f"/jobs/{job_id}").text
    assert f'action="/jobs/{job_id}/{verb}"' in html  # the button is offered for this state
    answer = client.post(f"/jobs/{job_id}/{verb}", data={"csrf": _csrf(client), "reason": "by test"})
    stored = driver.introspect.get(job_id)
    if after is None:
        assert stored is None
        assert answer.status_code == 200
        assert "Removed job" in answer.text
    else:
        assert stored is not None
        assert stored.state is after
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/jobs/{job_id}?did={verb}"
    if verb == "cancel":
        assert stored is not None
        assert stored.errors[-1].message == "by test"


def test_a_refused_verb_shows_code_cause_and_fix_and_changes_nothing(driver: JobDriver, client: TestClient) -> None:
    job_id = driver.enqueue("j").id
    answer = client.post(f"/jobs/{job_id}/promote", data={"csrf": _csrf(client)})
    assert answer.status_code == 409
    assert "JC_JOB_NOT_PROMOTABLE" in answer.text
    assert "Fix:" in answer.text
    stored = driver.introspect.get(job_id)
    assert stored is not None
    assert stored.state is JobState.READY


def test_writes_need_the_csrf_token_and_the_same_origin(driver: JobDriver, client: TestClient) -> None:
    job_id = driver.enqueue("j").id
    token = _csrf(client)
    for data, headers in (
        ({}, {}),
        ({"csrf": "forged"}, {}),
        ({"csrf": token}, {"origin": "https://evil.example"}),
    ):
        answer = client.post(f"/jobs/{job_id}/cancel", data=data, headers=headers)
        assert answer.status_code == 403
        assert "CSRF" in answer.text
    fresh = TestClient(client.app)  # another browser: the token is bound to the first one's cookie
    fresh.get("/")
    assert fresh.post(f"/jobs/{job_id}/cancel", data={"csrf": token}).status_code == 403
    stored = driver.introspect.get(job_id)
    assert stored is not None
    assert stored.state is JobState.READY
    assert client.get(f"/jobs/{job_id}/cancel").status_code == 405  # never a GET


def test_bulk_verb_confirms_the_count_then_reports_remaining(driver: JobDriver, client: TestClient) -> None:
    dead = [_fail(driver, "x", queue="mail") for _ in range(2)]
    live = driver.enqueue("other", queue="mail").id
    confirm = client.get("/bulk", params={"verb": "requeue", "queue": "mail", "state": "dead"})
    assert confirm.status_code == 200
    assert '<strong id="match-count">2</strong>' in confirm.text
    assert all(driver.introspect.get(i).state is JobState.DEAD for i in dead)  # type: ignore[union-attr]
    token = re.search(r'name="csrf" value="([^"]+)"', confirm.text).group(1)  # type: ignore[union-attr]
    done = client.post("/bulk", data={"csrf": token, "verb": "requeue", "queue": "mail", "state": "dead"})
    assert done.status_code == 200
    assert '<span id="affected">2</span>' in done.text
    assert '<strong id="remaining">0</strong>' in done.text
    for job_id in dead:  # requeued: live again (due soon: a bulk requeue spreads due times), attempt 0
        stored = driver.introspect.get(job_id)
        assert stored is not None
        assert stored.state in (JobState.READY, JobState.SCHEDULED)
        assert stored.attempt == 0
    # A name filter the stats cannot count is counted by paging.
    by_name = client.get("/bulk", params={"verb": "cancel", "name": "other"})
    assert '<strong id="match-count">1</strong>' in by_name.text
    client.post("/bulk", data={"csrf": token, "verb": "cancel", "name": "other", "reason": "bulk test"})
    stored = driver.introspect.get(live)
    assert stored is not None
    assert stored.state is JobState.CANCELLED
    assert stored.errors[-1].message == "bulk test"
    # Without a filter a bulk verb is refused, as on the CLI.
    everything = client.post("/bulk", data={"csrf": token, "verb": "remove"})
    assert everything.status_code == 400
    assert "without a filter" in everything.text
    assert driver.introspect.get(live) is not None


def test_bulk_remaining_counts_what_a_next_call_moves() -> None:
    """1001 rows, on the memory driver only (the page code is the same for every driver; the
    drivers' own ``remaining`` is proven by the parity suite)."""
    driver = MemoryDriver(clock=ManualClock(START))
    client = TestClient(create_app(driver, auth=_allow), follow_redirects=False)
    driver.enqueue_many([{"name": "bulk", "queue": "big"} for _ in range(1001)])
    token = _csrf(client)
    confirm = client.get("/bulk", params={"verb": "cancel", "queue": "big"})
    assert '<strong id="match-count">1001</strong>' in confirm.text
    first = client.post("/bulk", data={"csrf": token, "verb": "cancel", "queue": "big"})
    assert '<span id="affected">1000</span>' in first.text
    assert '<strong id="remaining">1</strong>' in first.text
    assert "the next batch" in first.text
    second = client.post("/bulk", data={"csrf": token, "verb": "cancel", "queue": "big"})
    assert '<span id="affected">1</span>' in second.text
    assert '<strong id="remaining">0</strong>' in second.text
    assert driver.introspect.stats().count(JobState.CANCELLED, "big") == 1001


# -- safety --------------------------------------------------------------------------------


def test_stored_text_is_escaped_everywhere(driver: JobDriver, client: TestClient) -> None:
    job = driver.enqueue(EVIL[:60], {"html": EVIL, EVIL[:10]: [EVIL]}, queue=EVIL[:40], key=EVIL,
                         max_attempts=1)
    token = driver.claim([EVIL[:40]], worker_id=EVIL[:50], lease=LEASE).claimed[0].token
    pages = [client.get(p) for p in ("/", "/jobs", f"/jobs/{job.id}", "/slots")]
    driver.nack(token, EVIL, dead_letter=True, fail=False)
    pages += [client.get(p) for p in (f"/jobs/{job.id}", "/jobs", "/dead")]
    for page in pages:
        assert page.status_code == 200
        assert "<script>window" not in page.text
        assert "<b>" not in page.text
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page.text
        assert "é中🙂" in page.text or "<td>" in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self'")
    assert "&#34;&#39;&amp;&lt;b&gt;é中🙂" in pages[-3].text  # the error message, exactly escaped


def test_no_connection_string_or_password_on_any_page(driver: JobDriver, client: TestClient) -> None:
    job_id = _fail(driver, "x")
    url = str(getattr(driver, "url", "") or "")
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead", "/schedules", "/slots", "/jobs/nope"):
        html = client.get(path).text
        assert "://" not in html.replace("http://www.w3.org", "")
        if url:
            assert url not in html
        assert "password" not in html.lower()


def test_read_only_hides_and_refuses_every_write(driver: JobDriver) -> None:
    job_id = _fail(driver, "x")
    definition = ScheduleDefinition(name="s", trigger=every(timedelta(minutes=5)), job="sync")
    driver.schedules.declare("s", definition.to_json())
    client = TestClient(create_app(driver, auth=_allow, read_only=True), follow_redirects=False)
    for path in ("/", "/jobs?state=dead", f"/jobs/{job_id}", "/dead", "/schedules", "/slots"):
        html = client.get(path).text
        assert 'method="post"' not in html, path
        assert "/bulk" not in html, path
        assert "read-only" in html
    assert client.get("/bulk", params={"verb": "requeue", "state": "dead"}).status_code == 400
    for path, data in ((f"/jobs/{job_id}/requeue", {}), ("/bulk", {"verb": "remove", "state": "dead"}),
                       ("/schedules/pause", {"name": "s"})):
        answer = client.post(path, data=data)
        assert answer.status_code == 403
        assert "read-only" in answer.text
    stored = driver.introspect.get(job_id)
    assert stored is not None
    assert stored.state is JobState.DEAD
    assert not driver.schedules.get("s").paused  # type: ignore[union-attr]


def test_token_auth_signs_a_browser_in(driver: JobDriver) -> None:
    client = TestClient(create_app(driver, auth="t0ken-123"), follow_redirects=False)
    first = client.get("/jobs")
    assert first.status_code == 303
    assert first.headers["location"] == "/login?next=%2Fjobs"
    login = client.get("/login")
    assert 'type="password" name="token"' in login.text
    token = re.search(r'name="csrf" value="([^"]+)"', login.text).group(1)  # type: ignore[union-attr]
    wrong = client.post("/login", data={"csrf": token, "token": "nope", "next": "/jobs"})
    assert wrong.status_code == 401
    assert client.get("/jobs").status_code == 303
    right = client.post("/login", data={"csrf": token, "token": "t0ken-123", "next": "//evil.example/"})
    assert right.status_code == 303
    assert right.headers["location"] == "/"
    assert "t0ken-123" not in right.headers.get("set-cookie", "")
    assert client.get("/jobs").status_code == 200
    out = client.post("/logout", data={"csrf": _csrf(client)})
    assert out.status_code == 303
    assert client.get("/jobs").status_code == 303  # signed out
    script = TestClient(client.app)
    assert script.get("/", headers={"authorization": "Bearer t0ken-123"}).status_code == 200
    assert script.post("/jobs/1/cancel", headers={"authorization": "Bearer x"}).status_code == 403


def test_basic_auth_and_callable_auth(driver: JobDriver) -> None:
    basic = TestClient(create_app(driver, auth=("ops", "s3cret")))
    refused = basic.get("/")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Basic")
    good = "Basic " + base64.b64encode(b"ops:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"ops:wrong").decode()
    assert basic.get("/", headers={"authorization": good}).status_code == 200
    assert basic.get("/", headers={"authorization": bad}).status_code == 401
    seen: list[str] = []

    def host_login(request: Any) -> bool:
        seen.append(request.url.path)
        return request.headers.get("x-user") == "alice"

    hosted = TestClient(create_app(driver, auth=host_login))
    assert hosted.get("/dead").status_code == 403
    assert hosted.get("/dead", headers={"x-user": "alice"}).status_code == 200
    assert seen == ["/dead", "/dead"]


def test_no_auth_serves_loopback_clients_only(driver: JobDriver) -> None:
    app = create_app(driver, auth=None)
    assert TestClient(app, client=("10.1.2.3", 5000)).get("/").status_code == 403
    assert TestClient(app, client=("127.0.0.1", 5000)).get("/").status_code == 200
    assert TestClient(app, client=("::1", 5000)).get("/").status_code == 200


def test_refuses_to_listen_beyond_loopback_without_auth() -> None:
    for host in ("0.0.0.0", "192.168.1.5", "::", "example.com"):
        with pytest.raises(WebUnprotected) as caught:
            check_exposure(host, None)
        assert caught.value.code == "JC_WEB_UNPROTECTED"
        assert "--token" in caught.value.fix
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_exposure(host, None)
    check_exposure("0.0.0.0", "token")


def test_cli_web_refuses_before_connecting(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBCORE_WEB_TOKEN", raising=False)
    monkeypatch.delenv("JOBCORE_WEB_BASIC_AUTH", raising=False)
    status = cli.main(["web", "--url", "postgresql://u:hunter22@nowhere.invalid/db", "--host", "0.0.0.0"])
    err = capsys.readouterr().err
    assert status == 5
    assert "error JC_WEB_UNPROTECTED" in err
    assert "hunter22" not in err
    assert cli.main(["web", "--url", "memory://", "--basic-auth", "nopassword"]) == 2
    capsys.readouterr()
    for port in ("0", "-1", "65536"):  # used to end in uvicorn's own traceback
        status = cli.main(["web", "--url", "postgresql://u:hunter22@nowhere.invalid/db", "--port", port])
        err = capsys.readouterr().err
        assert status == 2
        assert f"error JC_OPTION_INVALID: --port {port} is not a port number" in err
        assert "fix: pass a port from 1 to 65535" in err


def test_mounts_under_a_prefix_in_a_host_app(driver: JobDriver) -> None:
    job = driver.enqueue("j")
    host = Starlette(routes=[Mount("/ops", app=create_app(driver, auth=_allow))])
    client = TestClient(host)
    html = client.get("/ops/jobs").text
    assert f'href="/ops/jobs/{job.id}"' in html
    assert 'href="/ops/static/dashboard.css"' in html
    assert client.get("/ops/static/dashboard.js").status_code == 200
    own = TestClient(create_app(driver, auth=_allow, prefix="/queue"))
    assert f'href="/queue/jobs/{job.id}"' in own.get("/queue/jobs").text
    assert own.get("/jobs").status_code == 404


def test_wsgi_recipe_mounts_under_a_prefix(driver: JobDriver) -> None:
    """docs/dashboard.md's WSGI recipe: a2wsgi's bridge, mounted under /ops/jobs by a WSGI host app."""
    import io  # noqa: PLC0415
    from wsgiref.util import setup_testing_defaults  # noqa: PLC0415

    from a2wsgi import ASGIMiddleware  # noqa: PLC0415

    dashboard = ASGIMiddleware(create_app(driver, auth=_allow))  # the recipe's one line

    def host(environ: dict[str, Any], start_response: Any) -> Any:
        """A WSGI project (as Django's WSGIHandler sees it): /ops/jobs goes to the dashboard."""
        path = environ["PATH_INFO"]
        if path == "/ops/jobs" or path.startswith("/ops/jobs/"):
            environ["SCRIPT_NAME"], environ["PATH_INFO"] = "/ops/jobs", path[len("/ops/jobs"):]
            return dashboard(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the project"]

    def call(method: str, path: str, body: bytes = b"", cookie: str = "") -> tuple[str, dict[str, str], str]:
        environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path, "wsgi.input": io.BytesIO(body)}
        if body:
            environ.update(CONTENT_TYPE="application/x-www-form-urlencoded", CONTENT_LENGTH=str(len(body)))
        if cookie:
            environ["HTTP_COOKIE"] = cookie
        setup_testing_defaults(environ)
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            answer["status"], answer["headers"] = status, headers

        text = b"".join(host(environ, start_response)).decode()
        headers = {}
        for name, value in answer["headers"]:
            headers[name.lower()] = headers[name.lower()] + "; " + value if name.lower() in headers else value
        return answer["status"], headers, text

    job = driver.enqueue("j")
    assert call("GET", "/")[2] == "the project"
    status, headers, html = call("GET", f"/ops/jobs/jobs/{job.id}")
    assert status.startswith("200")
    assert 'href="/ops/jobs/static/dashboard.css"' in html
    assert f'action="/ops/jobs/jobs/{job.id}/cancel"' in html
    assert call("GET", "/ops/jobs/static/dashboard.js")[0].startswith("200")
    # a write through the bridge: the form's CSRF token and cookie, as a browser sends them
    csrf = re.search(r'name="csrf" value="([^"]+)"', html)
    assert csrf is not None
    cookie = "; ".join(part.split(";")[0] for part in headers["set-cookie"].split(", ") if "=" in part)
    status, _, _ = call("POST", f"/ops/jobs/jobs/{job.id}/cancel", f"csrf={csrf.group(1)}".encode(), cookie)
    assert status.startswith("303"), status
    assert driver.introspect.get(job.id).state is JobState.CANCELLED  # type: ignore[union-attr]


def test_state_colours_are_the_cli_palette(client: TestClient) -> None:
    from jobcore.cli._output import STATE_COLOURS  # noqa: PLC0415

    css = client.get("/static/states.css")
    assert css.headers["content-type"].startswith("text/css")
    for state in JobState:
        assert f"--state-{state.value}: {STATE_COLOURS[state.value]};" in css.text


def test_the_web_extra_is_not_imported_by_jobcore() -> None:
    code = "import sys, jobcore, jobcore.cli; jobcore.cli.build_parser(); print('starlette' in sys.modules)"
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "False"


def test_charts_are_read_from_the_store_at_most_once_per_ttl(driver: JobDriver) -> None:
    def finish() -> None:
        driver.enqueue("c", queue="charts")
        claimed = driver.claim(["charts"], worker_id="w", lease=LEASE).claimed[0]
        driver.ack(claimed.token)

    cached = TestClient(create_app(driver, auth=_allow, chart_ttl=3600))
    fresh = TestClient(create_app(driver, auth=_allow, chart_ttl=0))
    finish()
    assert "last 60 min <strong>1</strong>" in cached.get("/").text
    finish()
    assert "last 60 min <strong>1</strong>" in cached.get("/").text  # within the TTL: the figures read before
    assert "last 60 min <strong>2</strong>" in fresh.get("/").text


def test_charts_count_an_old_job_that_finished_within_the_hour() -> None:
    """A job enqueued before 1,000 newer jobs and finished a minute ago is on the chart (issue 19)."""
    clock = ManualClock(START)
    driver = MemoryDriver(clock=clock)
    old = driver.enqueue("old", queue="slow")
    clock.advance(seconds=1)
    newer = driver.enqueue_many([{"name": "new", "queue": "busy"} for _ in range(1000)])
    assert len(newer) == 1000
    claimed = driver.claim(["slow"], worker_id="w", lease=LEASE).claimed[0]
    assert claimed.job.id == old.id
    clock.advance(minutes=30)
    driver.nack(claimed.token, "late", fail=True)
    clock.advance(minutes=1)
    html = TestClient(create_app(driver, auth=_allow, chart_ttl=0)).get("/").text
    assert "Completed per minute, last 60 min <strong>0</strong>" in html
    assert "Failed or dead per minute, last 60 min <strong>1</strong>" in html
    assert html.count('class="fill-failed"><title>') == 1
    assert "most recently enqueued" not in html  # the page no longer says how many jobs it read


def test_overview_never_waits_for_the_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the background thread's count is stuck in the store, pages serve the last counts and their age."""
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415

    driver = MemoryDriver(clock=ManualClock(START))
    driver.enqueue("a", queue="q")
    client = TestClient(create_app(driver, auth=_allow, stats_ttl=0.1, chart_ttl=3600))
    ready = re.compile(r'state-ready"></span><span class="n">(\d+)<')
    assert ready.findall(client.get("/").text) == ["1"]  # the app's first overview reads itself

    counting, release = threading.Event(), threading.Event()
    backend = driver.introspect._backend  # type: ignore[attr-defined]  # the store's own read, under the door
    real = backend.stats

    def stuck() -> Any:
        counting.set()
        release.wait(30)
        return real()

    monkeypatch.setattr(backend, "stats", stuck)
    driver.enqueue("b", queue="q")
    client.get("/")  # someone watches: the refresher runs
    assert counting.wait(10), "the background thread never re-read the counts"
    page = client.get("/").text  # served while the store is still counting (a read here would see 2)
    assert ready.findall(page) == ["1"]
    assert re.search(r'<span id="counts-age">\d+</span> s ago', page)
    release.set()
    deadline = time.monotonic() + 10
    while ready.findall(client.get("/").text) != ["2"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.findall(client.get("/").text) == ["2"]


def test_cli_web_serves_the_dashboard() -> None:
    """``jobcore web`` as an operator runs it: a real server on loopback, answering pages."""
    import socket  # noqa: PLC0415
    import time  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcore.cli", "web", "--url", "memory://", "--port", str(port), "--read-only"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs", timeout=2) as answer:
                    body = answer.read().decode()
                    headers = answer.headers
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "jobcore web did not answer within 30 s"
                time.sleep(0.2)
        assert "<title>Jobs · jobcore</title>" in body
        assert "read-only" in body
        assert headers["content-security-policy"].startswith("default-src 'none'")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert f"jobcore dashboard (read-only, loopback only, no auth) on http://127.0.0.1:{port}/ for memory://" in err

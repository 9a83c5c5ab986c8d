"""The operator CLI (``jobcore stats/ls/show/dead/cancel/...``), in-process and as a real subprocess.

In-process tests hand the parity suite's ``driver`` (every registered driver, on a
:class:`ManualClock`) to ``jobcore.cli.main(argv, driver=...)`` and check each
command's output and exit status. Subprocess tests run the installed CLI: against
``memory://`` they can only see an empty store and refusals (each process has its own
memory store); against every driver that declares ``shared_store`` they change real
state, reaching the test's isolated store through the driver's ``url`` attribute.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from jobcore.parity.plugin import START

from jobcore import cli, errors
from jobcore.cli.ops import job_to_dict
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.records import JobState

ROOT = Path(__file__).resolve().parents[1]
LEASE = timedelta(seconds=30)

Run = Callable[..., tuple[int, str, str]]


class _Terminal(io.StringIO):
    """Stands in for stdin on a terminal, with the operator's typed answer."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def run(driver: JobDriver, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``run(*argv, stdin=None)`` -> (status, stdout, stderr), in-process on this test's ``driver``."""
    monkeypatch.delenv("JOBCORE_URL", raising=False)

    def call(*argv: str, stdin: io.StringIO | None = None) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", stdin if stdin is not None else io.StringIO(""))
        capsys.readouterr()
        status = cli.main(list(argv), driver=driver)
        out, err = capsys.readouterr()
        return status, out, err

    return call


def _json(out: str) -> Any:
    return json.loads(out)


def _dead_job(driver: JobDriver, name: str = "boom", queue: str = "default") -> str:
    job = driver.enqueue(name, {"n": 1}, queue=queue, max_attempts=1)
    claimed = driver.claim([queue], worker_id="w1", lease=LEASE).claimed
    assert [c.job.id for c in claimed] == [job.id]
    driver.nack(claimed[0].token, ValueError("it broke"))
    return job.id


# -- reads -----------------------------------------------------------------------------


def test_stats_reports_counts_per_queue_and_state_oldest_due_age_and_dead(
    run: Run, driver: JobDriver, clock: ManualClock
) -> None:
    """stats --json counts per (queue, state), the oldest due age per queue and the dead total."""
    driver.enqueue("a", queue="mail")
    driver.enqueue("a", queue="mail", delay=3600)
    clock.advance(seconds=90)
    driver.enqueue("b", queue="default")
    _dead_job(driver, queue="reports")
    status, out, _ = run("stats", "--json")
    assert status == 0
    data = _json(out)
    assert data["queues"]["mail"]["counts"]["ready"] == 1
    assert data["queues"]["mail"]["counts"]["scheduled"] == 1
    assert data["queues"]["mail"]["oldest_due_age_seconds"] == 90.0
    assert data["queues"]["default"]["oldest_due_age_seconds"] == 0.0
    assert data["queues"]["reports"]["oldest_due_age_seconds"] is None
    assert data["dead"] == 1
    assert data["totals"]["ready"] == 2
    status, out, _ = run("stats")
    assert status == 0
    assert "mail" in out
    assert "1m30s" in out
    assert "dead: 1" in out


def test_stats_on_an_empty_store_says_so(run: Run) -> None:
    """An empty store prints 'no jobs', not an empty table."""
    assert run("stats")[:2] == (0, "no jobs\n")


def test_slots_lists_unexpired_fleet_slots(run: Run, driver: JobDriver, clock: ManualClock) -> None:
    """slots prints who holds which lease key until when; --key narrows, --json gives the fields."""
    assert run("slots")[:2] == (0, "no slot is held\n")
    assert driver.leases.acquire("api", 2, "w1", timedelta(seconds=90)) is True
    assert driver.leases.acquire("nightly", 1, "w2", timedelta(seconds=30)) is True
    clock.advance(seconds=30)  # w2's slot lapses
    status, out, _ = run("slots")
    assert status == 0
    assert out.splitlines()[1].split() == ["api", "w1", *out.splitlines()[1].split()[2:-1], "1m00s"]
    assert "nightly" not in out
    status, out, _ = run("slots", "--key", "api", "--json")
    assert _json(out) == {"slots": [
        {"key": "api", "holder": "w1", "expires_at": "2030-01-01T12:01:30.000+00:00", "seconds_left": 60.0},
    ]}
    status, _, err = run("slots", "--limit", "0")
    assert status != 0
    assert "JC_OPTION_INVALID" in err


def test_ls_filters_by_queue_name_state_id_prefix_and_created_range(
    run: Run, driver: JobDriver, clock: ManualClock
) -> None:
    """Each ls filter narrows the listing as JobFilter does."""
    a = driver.enqueue("send", queue="mail")
    b = driver.enqueue("send", queue="mail", delay=60)
    clock.advance(seconds=10)
    c = driver.enqueue("report", queue="default")
    mid = (START + timedelta(seconds=5)).isoformat().replace("+00:00", "Z")

    def ids(*argv: str) -> list[str]:
        status, out, err = run("ls", "--json", *argv)
        assert status == 0, err
        return [j["id"] for j in _json(out)["jobs"]]

    assert ids() == [c.id, b.id, a.id]
    assert ids("--queue", "mail") == [b.id, a.id]
    assert ids("--name", "report") == [c.id]
    assert ids("--state", "scheduled") == [b.id]
    assert ids("--state", "ready", "--state", "scheduled", "--queue", "mail") == [b.id, a.id]
    assert ids("--state", "ready,scheduled") == [c.id, b.id, a.id]
    assert ids("--id-prefix", c.id) == [c.id]
    assert ids("--created-from", mid) == [c.id]
    assert ids("--created-to", mid) == [b.id, a.id]
    assert ids("--created-to", "2030-01-01T12:00:05") == [b.id, a.id]  # no offset means UTC


def test_ls_pages_with_cursors_and_prints_them(run: Run, driver: JobDriver) -> None:
    """--limit pages newest first; the printed cursors page older (--after) and back (--before)."""
    jobs = [driver.enqueue("j", {"i": i}) for i in range(5)]
    newest_first = [j.id for j in reversed(jobs)]
    status, out, _ = run("ls", "--json", "--limit", "2")
    first = _json(out)
    assert [j["id"] for j in first["jobs"]] == newest_first[:2]
    assert first["before"] is None
    second = _json(run("ls", "--json", "--limit", "2", "--after", first["after"])[1])
    assert [j["id"] for j in second["jobs"]] == newest_first[2:4]
    back = _json(run("ls", "--json", "--limit", "2", "--before", second["before"])[1])
    assert [j["id"] for j in back["jobs"]] == newest_first[:2]
    status, out, _ = run("ls", "--limit", "2", "--after", first["after"])
    assert status == 0
    assert f"older: --after {second['after']}" in out
    assert f"newer: --before {second['before']}" in out


def test_ls_prints_a_readable_table(run: Run, driver: JobDriver) -> None:
    """The default ls output is a header plus one aligned row per job, with the last error."""
    job_id = _dead_job(driver, name="charge_card")
    status, out, _ = run("ls")
    assert status == 0
    header, row = out.splitlines()
    assert header.split()[:5] == ["ID", "STATE", "QUEUE", "NAME", "ATTEMPT"]
    assert row.split()[:5] == [job_id, "dead", "default", "charge_card", "1/1"]
    assert "ValueError: it broke" in row
    assert header.index("NAME") == row.index("charge_card")


def test_ls_refuses_bad_state_time_and_cursor_with_codes(run: Run) -> None:
    """Bad filter values are coded InvalidInput refusals (status 2), cause and fix on stderr."""
    status, _, err = run("ls", "--state", "stuck")
    assert status == 2
    assert "JC_OPTION_INVALID" in err
    assert "fix: use one of: scheduled" in err
    status, _, err = run("ls", "--created-from", "yesterday")
    assert (status, "JC_OPTION_INVALID" in err) == (2, True)
    status, _, err = run("ls", "--after", "c1.000000")
    assert (status, "JC_PAGE_INVALID" in err) == (2, True)
    status, _, err = run("ls", "--limit", "500")
    assert (status, "JC_PAGE_INVALID" in err) == (2, True)


def test_show_prints_payload_lease_and_error_history(run: Run, driver: JobDriver, clock: ManualClock) -> None:
    """show lists every field, the live lease with its time left, and each error entry."""
    job = driver.enqueue("sync", {"account": 7}, key="acct-7", max_attempts=3)
    first = driver.claim(["default"], worker_id="w1", lease=LEASE).claimed[0]
    driver.nack(first.token, RuntimeError("upstream 503"))
    clock.advance(seconds=1)
    driver.claim(["default"], worker_id="w2", lease=LEASE)
    clock.advance(seconds=10)
    status, out, _ = run("show", job.id)
    assert status == 0
    assert f"job {job.id}" in out
    assert "running" in out
    assert "2 of 3" in out
    assert "acct-7" in out
    assert '{"account": 7}' in out
    assert "held by w2 (claim 2)" in out
    assert "20s left" in out
    assert "RuntimeError: upstream 503" in out
    clock.advance(seconds=45)
    assert "lapsed 25s ago" in run("show", job.id)[1]


def test_show_json_is_job_to_dict(run: Run, driver: JobDriver) -> None:
    """show --json prints job_to_dict of the stored job: ISO times, state names, error dicts."""
    job_id = _dead_job(driver)
    status, out, _ = run("show", job_id, "--json")
    assert status == 0
    data = _json(out)
    stored = driver.introspect.get(job_id)
    assert stored is not None
    assert data == {**job_to_dict(stored), "parents": [], "children": []}
    assert data["state"] == "dead"
    assert data["created_at"] == "2030-01-01T12:00:00.000+00:00"
    assert data["errors"] == [
        {"type": "ValueError", "message": "it broke", "at": "2030-01-01T12:00:00.000+00:00", "attempt": 1}
    ]


def test_show_ls_and_json_show_a_running_jobs_stored_progress(run: Run, driver: JobDriver, clock: ManualClock) -> None:
    """show prints a bar, the percent, the message and its age; --json carries it; ls adds a
    PROGRESS column for running jobs once one on the page reported (rules G)."""
    quiet = driver.enqueue("quiet", queue="other")
    job = driver.enqueue("import_rows", {"file": "a.csv"})
    token = driver.claim(["default"], worker_id="w1", lease=LEASE).claimed[0].token
    header = run("ls")[1].splitlines()[0]
    assert "PROGRESS" not in header  # nobody reported: the table is as it was
    assert driver.progress(token, 0.4, "row 400 of 1000")
    clock.advance(seconds=12)
    status, out, _ = run("show", job.id)
    assert status == 0
    line = next(li for li in out.splitlines() if li.strip().startswith("progress"))
    assert "[########------------]  40%" in line
    assert "row 400 of 1000" in line
    assert "(12s ago)" in line
    assert "progress     -" in run("show", quiet.id)[1]
    data = _json(run("show", job.id, "--json")[1])
    assert data["progress"] == {
        "value": 0.4, "message": "row 400 of 1000", "updated_at": "2030-01-01T12:00:00.000+00:00",
    }
    assert _json(run("show", quiet.id, "--json")[1])["progress"] is None
    listed = {j["id"]: j["progress"] for j in _json(run("ls", "--json")[1])["jobs"]}
    assert listed == {job.id: data["progress"], quiet.id: None}
    header, *rows = run("ls")[1].splitlines()
    assert header.split()[:6] == ["ID", "STATE", "QUEUE", "NAME", "ATTEMPT", "PROGRESS"]
    row = next(r for r in rows if r.startswith(job.id))
    assert "40% row 400 of 1000" in row
    assert header.index("PROGRESS") == row.index("40%")


@pytest.mark.requires("dependencies")
def test_show_lists_parents_and_children(run: Run, driver: JobDriver) -> None:
    """show names a job's parents and children with their states; --json lists their ids (rules D)."""
    a, b = driver.enqueue("part"), driver.enqueue("part")
    report = driver.enqueue("report", depends_on=[a, b])
    status, out, _ = run("show", report.id)
    assert status == 0
    assert f"parents      {a.id} (ready), {b.id} (ready)" in out
    assert "children     -" in out
    assert f"children     {report.id} (suspended)" in run("show", a.id)[1]
    data = _json(run("show", report.id, "--json")[1])
    assert (data["parents"], data["children"]) == ([a.id, b.id], [])
    assert _json(run("show", a.id, "--json")[1])["children"] == [report.id]


def test_show_unknown_id_exits_with_not_found_status(run: Run) -> None:
    """An unknown or malformed id is JC_JOB_NOT_FOUND, status 3."""
    for job_id in ("999", "not-an-id"):
        status, out, err = run("show", job_id)
        assert (status, out) == (3, "")
        assert err.startswith("error JC_JOB_NOT_FOUND: ")
        assert "\n  fix: " in err


def test_dead_lists_the_dead_letter_queue(run: Run, driver: JobDriver, clock: ManualClock) -> None:
    """dead lists dead jobs, most recently finished first, narrowed by --queue and --limit."""
    first = _dead_job(driver, queue="mail")
    clock.advance(seconds=5)
    second = _dead_job(driver, queue="reports")
    driver.enqueue("alive")

    def ids(*argv: str) -> list[str]:
        return [j["id"] for j in _json(run("dead", "--json", *argv)[1])["jobs"]]

    assert ids() == [second, first]
    assert ids("--queue", "mail") == [first]
    assert ids("--limit", "1") == [second]
    status, out, _ = run("dead")
    assert status == 0
    assert "FINISHED" in out.splitlines()[0]
    assert run("dead", "--queue", "nothing-here")[1] == "no dead jobs\n"


# -- single-job verbs ------------------------------------------------------------------


def test_single_job_verbs_move_the_job(run: Run, driver: JobDriver, clock: ManualClock) -> None:
    """cancel, requeue, promote, resume and remove by id each do their one transition."""
    job = driver.enqueue("j", delay=600)
    status, out, _ = run("promote", job.id)
    assert (status, out) == (0, f"promoted job {job.id} (j, queue default); state ready\n")
    status, out, _ = run("cancel", job.id, "--reason", "bad data", "--json")
    assert status == 0
    assert _json(out)["state"] == "cancelled"
    assert _json(out)["last_error"]["message"] == "bad data"
    assert _json(run("requeue", job.id, "--json")[1])["state"] == "ready"
    parked = driver.claim(["default"], worker_id="w", lease=LEASE).claimed[0]
    driver.nack(parked.token, "waiting for approval", park=True)
    assert run("resume", job.id)[0] == 0
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]
    status, out, _ = run("remove", job.id)
    assert (status, out) == (0, f"removed job {job.id} (j, queue default); state ready\n")
    assert driver.introspect.get(job.id) is None


@pytest.mark.parametrize(
    ("verb", "setup", "code", "status"),
    [
        ("promote", "ready", "JC_JOB_NOT_PROMOTABLE", 4),
        ("resume", "ready", "JC_JOB_NOT_RESUMABLE", 4),
        ("requeue", "ready", "JC_JOB_NOT_REQUEUEABLE", 4),
        ("cancel", "dead", "JC_JOB_NOT_CANCELLABLE", 4),
        ("remove", "running", "JC_JOB_NOT_REMOVABLE", 4),
        ("cancel", "unknown", "JC_JOB_NOT_FOUND", 3),
        ("remove", "unknown", "JC_JOB_NOT_FOUND", 3),
        ("promote", "unknown", "JC_JOB_NOT_FOUND", 3),
        ("requeue", "unknown", "JC_JOB_NOT_FOUND", 3),
        ("resume", "unknown", "JC_JOB_NOT_FOUND", 3),
    ],
)
def test_single_job_refusals_print_code_cause_fix_and_exit_with_the_class_status(
    run: Run, driver: JobDriver, verb: str, setup: str, code: str, status: int
) -> None:
    """A verb the job's state forbids exits 4 (JobStateConflict); an unknown id exits 3 (JobNotFound)."""
    if setup == "dead":
        job_id = _dead_job(driver)
    elif setup == "running":
        job_id = driver.enqueue("j").id
        driver.claim(["default"], worker_id="w", lease=LEASE)
    elif setup == "ready":
        job_id = driver.enqueue("j").id
    else:
        job_id = "424242"
    before = driver.introspect.get(job_id)
    got, out, err = run(verb, job_id)
    assert (got, out) == (status, "")
    first, fix = err.rstrip("\n").split("\n")
    assert first.startswith(f"error {code}: ")
    assert fix.startswith("  fix: ")
    assert driver.introspect.get(job_id) == before


def test_verbs_refuse_an_id_with_bulk_options_and_no_selection_at_all(run: Run, driver: JobDriver) -> None:
    """An id together with filters or --all is ambiguous, and no id nor filter selects nothing: both refused."""
    job = driver.enqueue("j")
    for argv in (("cancel", job.id, "--queue", "default"), ("cancel", job.id, "--all"), ("remove",)):
        status, _, err = run(*argv)
        assert (status, "JC_OPTION_INVALID" in err) == (2, True)
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]


# -- bulk verbs ------------------------------------------------------------------------


def test_bulk_all_calls_until_nothing_remains_and_shows_progress(run: Run, driver: JobDriver) -> None:
    """--all repeats the bulk verb until remaining == 0, printing progress after each call."""
    for _ in range(5):
        driver.enqueue("j", queue="mail")
    keep = driver.enqueue("j", queue="other")
    status, out, err = run("cancel", "--queue", "mail", "--limit", "2", "--all", "--yes")
    assert status == 0
    assert out == "cancelled 5 job(s) in 3 call(s); 0 remaining\n"
    assert err.splitlines() == [
        "cancel: 2 cancelled so far, 3 remaining",
        "cancel: 4 cancelled so far, 1 remaining",
        "cancel: 5 cancelled so far, 0 remaining",
    ]
    stats = driver.introspect.stats()
    assert stats.count("cancelled", "mail") == 5
    assert driver.introspect.get(keep.id).state is JobState.READY  # type: ignore[union-attr]


def test_bulk_without_all_makes_one_call_and_says_what_remains(run: Run, driver: JobDriver) -> None:
    """Without --all one call moves at most --limit rows and the rest is reported."""
    for _ in range(5):
        _dead_job(driver)
    status, out, _ = run("requeue", "--state", "dead", "--limit", "2", "--yes", "--json")
    assert status == 0
    assert _json(out) == {"verb": "requeue", "affected": 2, "remaining": 3, "calls": 1}
    status, out, _ = run("requeue", "--state", "dead", "--limit", "2", "--yes")
    assert out == "requeued 2 job(s) in 1 call(s); 1 remaining (run again, or pass --all)\n"


def test_bulk_promote_and_remove_follow_their_guards(run: Run, driver: JobDriver) -> None:
    """Bulk promote moves only scheduled jobs; bulk remove leaves running ones."""
    driver.enqueue("j", delay=60)
    driver.enqueue("j", delay=60)
    running = driver.enqueue("j", priority=5)
    driver.claim(["default"], worker_id="w", lease=LEASE)
    assert _json(run("promote", "--queue", "default", "--yes", "--json")[1])["affected"] == 2
    assert driver.introspect.stats().count("ready") == 2
    assert _json(run("remove", "--queue", "default", "--all", "--yes", "--json")[1])["remaining"] == 0
    assert [j.id for j in driver.introspect.list().jobs] == [running.id]


def test_bulk_without_a_terminal_needs_yes(run: Run, driver: JobDriver) -> None:
    """With stdin not a terminal and no --yes, a bulk verb is refused (status 2) and nothing moves."""
    driver.enqueue("j")
    status, out, err = run("cancel", "--state", "ready", "--all")
    assert (status, out) == (2, "")
    assert "JC_OPTION_INVALID" in err
    assert "--yes" in err
    assert driver.introspect.stats().count("ready") == 1


def test_bulk_on_a_terminal_asks_and_respects_the_answer(run: Run, driver: JobDriver) -> None:
    """On a terminal the operator sees how many match and must answer yes; anything else changes nothing."""
    for _ in range(3):
        driver.enqueue("j", queue="mail")
    status, out, err = run("cancel", "--queue", "mail", "--all", stdin=_Terminal("n\n"))
    assert (status, out) == (1, "")
    assert "cancel jobs where queue=mail (3 match now), until none remain? [y/N]" in err
    assert "not confirmed; nothing changed" in err
    assert driver.introspect.stats().count("ready") == 3
    status, _, err = run("cancel", "--name", "j", stdin=_Terminal("\n"))
    assert status == 1
    assert "cancel jobs where name=j, at most 1000? [y/N]" in err  # stats cannot count by name
    status, _, err = run("cancel", "--queue", "mail", "--all", stdin=_Terminal("y\n"))
    assert status == 0
    assert driver.introspect.stats().count("cancelled") == 3


def test_bulk_refuses_a_bad_limit_before_asking(run: Run, driver: JobDriver) -> None:
    """--limit outside 1..MAX_BULK_ROWS is refused with its code before any prompt."""
    driver.enqueue("j")
    status, _, err = run("cancel", "--state", "ready", "--limit", "0", stdin=_Terminal("y\n"))
    assert (status, "JC_OPTION_INVALID" in err, "[y/N]" in err) == (2, True, False)


# -- rescue, migrate, URL --------------------------------------------------------------


def test_rescue_requeues_lapsed_and_buries_final_attempts(run: Run, driver: JobDriver, clock: ManualClock) -> None:
    """rescue reports how many lapsed jobs went back to ready and which were buried."""
    driver.enqueue("retryable", max_attempts=3)
    final = driver.enqueue("last_try", max_attempts=1)
    driver.claim(["default"], worker_id="w", limit=2, lease=LEASE)
    clock.advance(seconds=31)
    status, out, _ = run("rescue", "--json")
    assert status == 0
    data = _json(out)
    assert data["requeued"] == 1
    assert [(j["id"], j["state"]) for j in data["buried"]] == [(final.id, "dead")]
    assert run("rescue")[1] == "requeued 0 job(s) whose lease lapsed; buried 0\n"


def test_migrate_says_what_it_did(run: Run, driver: JobDriver) -> None:
    """On a migrated store `migrate` says it is already at its version (memory: nothing to install),
    --dry-run and --sql find nothing to apply, and --json carries the same as fields."""
    status, out, _ = run("migrate")
    assert status == 0
    keeps_schema = "shared_store" in driver.capabilities
    if keeps_schema:
        assert re.fullmatch(r"schema of the given driver: already at version \d+\n", out), out
    else:
        assert out == "schema of the given driver: nothing to install: this store keeps no schema\n"
    data = _json(run("migrate", "--json")[1])
    assert data["changed"] is False
    assert data["statements"] == []
    assert data["before"] == data["after"] == data["latest"]
    assert run("migrate", "--dry-run")[1] == out
    sql = run("migrate", "--sql")[1]
    assert sql.endswith(": nothing to apply\n")
    assert sql.startswith(("-- ", "// "))


def test_without_url_or_env_the_command_is_refused_no_driver(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --url and no JOBCORE_URL: JC_NO_DRIVER, status 5 (ConfigurationError)."""
    monkeypatch.delenv("JOBCORE_URL", raising=False)
    assert cli.main(["stats"]) == 5
    assert capsys.readouterr().err.startswith("error JC_NO_DRIVER: no driver URL")
    monkeypatch.setenv("JOBCORE_URL", "memory://")
    assert cli.main(["stats", "--json"]) == 0


def test_a_reader_closing_the_pipe_early_ends_the_output_quietly(
    driver: JobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jobcore ls | head` closing stdout early is no error: status 0, no traceback."""
    driver.enqueue("j")
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w") as closed_pipe:
        monkeypatch.setattr(sys, "stdout", closed_pipe)
        assert cli.main(["ls", "--json"], driver=driver) == 0
        assert cli.main(["stats"], driver=driver) == 0


def test_exit_statuses_are_documented_in_the_cli_reference() -> None:
    """docs/cli.md's exit-status table lists every class of EXIT_CODES with its status."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for cls, code in cli.EXIT_CODES:
        assert f"| {code} | `{cls.__name__}` |" in text
    assert issubclass(errors.NoDriver, errors.ConfigurationError)


# -- the real CLI in a subprocess ------------------------------------------------------


def _cli(*argv: str, url: str | None = None, env_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: val for k, val in os.environ.items() if k != "JOBCORE_URL"}
    if env_url is not None:
        env["JOBCORE_URL"] = env_url
    args = [sys.executable, "-m", "jobcore.cli", *argv, *(("--url", url) if url else ())]
    return subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, timeout=120, check=False
    )


def test_subprocess_memory_reads_an_empty_store_and_refuses_with_class_statuses() -> None:
    """The installed CLI on memory://: empty reads succeed; each refusal class exits with its status."""
    stats = _cli("stats", "--json", env_url="memory://")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["dead"] == 0
    listing = _cli("ls", "--json", url="memory://")
    assert (listing.returncode, json.loads(listing.stdout)) == (0, {"jobs": [], "after": None, "before": None})
    assert json.loads(_cli("dead", "--json", url="memory://").stdout) == {"jobs": []}
    assert _cli("rescue", url="memory://").returncode == 0
    assert _cli("migrate", url="memory://").returncode == 0
    refusals = [
        (_cli("show", "1", url="memory://"), 3, "JC_JOB_NOT_FOUND"),
        (_cli("promote", "1", url="memory://"), 3, "JC_JOB_NOT_FOUND"),
        (_cli("stats"), 5, "JC_NO_DRIVER"),
        (_cli("stats", url="nosuch://x"), 2, "JC_URL_INVALID"),
        (_cli("cancel", "--state", "ready", "--all", url="memory://"), 2, "JC_OPTION_INVALID"),
        (_cli("ls", "--before", "nope", url="memory://"), 2, "JC_PAGE_INVALID"),
    ]
    for done, status, code in refusals:
        assert (done.returncode, done.stdout) == (status, ""), done.stderr
        assert done.stderr.startswith(f"error {code}: ")
        assert "\n  fix: " in done.stderr


def _url_of(driver: JobDriver) -> str:
    url = getattr(driver, "url", None)
    if not isinstance(url, str):
        pytest.fail(
            f"{type(driver).__name__} declares shared_store but has no str `url` attribute reaching its "
            "(isolated) store; the CLI subprocess tests need one"
        )
    return url


@pytest.mark.requires("shared_store")
def test_subprocess_cli_reads_and_repairs_a_shared_store(driver: JobDriver, clock: ManualClock) -> None:
    """Against a shared store the real CLI sees what the test wrote and its verbs change it."""
    clock.set(datetime.now(timezone.utc))  # the subprocess runs on wall time
    url = _url_of(driver)
    ready = driver.enqueue("send", {"to": "ada"}, queue="mail")
    later = driver.enqueue("send", queue="mail", delay=3600)
    dead = _dead_job(driver, queue="reports")

    listing = _cli("ls", "--json", "--queue", "mail", url=url)
    assert listing.returncode == 0, listing.stderr
    assert [j["id"] for j in json.loads(listing.stdout)["jobs"]] == [later.id, ready.id]
    paged = json.loads(_cli("ls", "--json", "--limit", "1", env_url=url).stdout)
    assert [j["id"] for j in paged["jobs"]] == [dead]
    older = json.loads(_cli("ls", "--json", "--limit", "2", "--after", paged["after"], env_url=url).stdout)
    assert [j["id"] for j in older["jobs"]] == [later.id, ready.id]
    table = _cli("ls", "--state", "dead", url=url)
    assert dead in table.stdout
    assert "ValueError: it broke" in table.stdout

    stats = json.loads(_cli("stats", "--json", url=url).stdout)
    assert stats["queues"]["mail"]["counts"]["ready"] == 1
    assert stats["queues"]["mail"]["counts"]["scheduled"] == 1
    assert stats["dead"] == 1

    shown = json.loads(_cli("show", dead, "--json", url=url).stdout)
    assert shown == {**job_to_dict(driver.introspect.get(dead)), "parents": [], "children": []}  # type: ignore[arg-type]
    assert [j["id"] for j in json.loads(_cli("dead", "--json", url=url).stdout)["jobs"]] == [dead]

    assert _cli("promote", later.id, url=url).returncode == 0
    assert driver.introspect.get(later.id).state is JobState.READY  # type: ignore[union-attr]
    refused = _cli("promote", later.id, url=url)
    assert refused.returncode == 4
    assert refused.stderr.startswith("error JC_JOB_NOT_PROMOTABLE: ")
    assert _cli("requeue", dead, url=url).returncode == 0
    assert driver.introspect.get(dead).state is JobState.READY  # type: ignore[union-attr]
    assert _cli("cancel", ready.id, "--reason", "operator", url=url).returncode == 0
    assert driver.introspect.get(ready.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert _cli("remove", ready.id, url=url).returncode == 0
    assert driver.introspect.get(ready.id) is None
    assert _cli("show", ready.id, url=url).returncode == 3

    parked = driver.enqueue("wait", queue="approvals")
    token = driver.claim(["approvals"], worker_id="w", lease=LEASE).claimed[0].token
    driver.nack(token, "needs approval", park=True)
    assert _cli("resume", parked.id, url=url).returncode == 0
    assert driver.introspect.get(parked.id).state is JobState.READY  # type: ignore[union-attr]

    for _ in range(3):
        driver.enqueue("bulk", queue="bulk")
    no_tty = _cli("cancel", "--queue", "bulk", "--all", url=url)
    assert no_tty.returncode == 2
    bulk = _cli("cancel", "--queue", "bulk", "--limit", "2", "--all", "--yes", "--json", url=url)
    assert bulk.returncode == 0, bulk.stderr
    assert json.loads(bulk.stdout) == {"verb": "cancel", "affected": 3, "remaining": 0, "calls": 2}
    assert bulk.stderr.splitlines()[-1] == "cancel: 3 cancelled so far, 0 remaining"
    assert driver.introspect.stats().count("cancelled", "bulk") == 3
    assert _cli("migrate", url=url).returncode == 0


@pytest.mark.requires("shared_store")
def test_subprocess_rescue_requeues_a_lease_that_lapsed_on_the_wall_clock(
    driver: JobDriver, clock: ManualClock
) -> None:
    """A lease that lapsed an hour ago by wall time is put back to ready by `jobcore rescue`."""
    clock.set(datetime.now(timezone.utc) - timedelta(hours=1))
    job = driver.enqueue("stuck", max_attempts=3)
    driver.claim(["default"], worker_id="gone", lease=LEASE)
    done = _cli("rescue", "--json", url=_url_of(driver))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"requeued": 1, "buried": []}
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]

"""``jobcore prune``: in-process on a memory store with a ManualClock, and as a real subprocess.

The in-process tests hand a :class:`MemoryDriver` to ``jobcore.cli.main(argv, driver=...)``;
the subprocess test runs the installed CLI against every driver that declares
``shared_store`` (PostgreSQL, MongoDB), reaching the test's isolated store by its URL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from jobcore.drivers.memory import MemoryDriver
from jobcore.parity._support import finished_job
from jobcore.parity.plugin import START

from jobcore import cli
from jobcore import validate as v
from jobcore.cli.prune import format_age, parse_age
from jobcore.clock import ManualClock
from jobcore.driver import JobDriver
from jobcore.errors import OptionInvalid

ROOT = Path(__file__).resolve().parents[1]
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def store(clock: ManualClock) -> MemoryDriver:
    return MemoryDriver(clock=clock)


@pytest.fixture
def run(store: MemoryDriver, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``run(*argv)`` -> (status, stdout, stderr), in-process on this test's memory store."""
    monkeypatch.delenv("JOBCORE_URL", raising=False)

    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = cli.main(list(argv), driver=store)
        out, err = capsys.readouterr()
        return status, out, err

    return call


def _count(driver: JobDriver) -> int:
    return sum(driver.introspect.stats().count(s) for s in ("done", "failed", "cancelled", "dead"))


def test_parse_age_reads_units_zero_and_never() -> None:
    """Ages are a number with a unit, 0 or never; format_age writes them back the same way."""
    assert parse_age("7d") == timedelta(days=7)
    assert parse_age(" 12H ") == timedelta(hours=12)
    assert parse_age("1d12h30m5s") == timedelta(days=1, hours=12, minutes=30, seconds=5)
    assert parse_age("2w") == timedelta(days=14)
    assert parse_age("0") == timedelta(0)
    assert parse_age("never") is None
    for text in ("1d", "7d", "12h", "30m", "45s", "1d12h", "0", "never"):
        assert format_age(parse_age(text)) == text
    for junk in ("", "7", "-1d", "1x", "d", "1.5d", "1d 2h", "7 days", "nan", f"{v.MAX_DELAY.days + 1}d"):
        with pytest.raises(OptionInvalid):
            parse_age(junk, "--done")


def test_prune_defaults_print_a_table_per_state(run: Run, store: MemoryDriver, clock: ManualClock) -> None:
    """Without options the default policy applies: after 2 days only done jobs go."""
    for state in ("done", "done", "failed", "dead"):
        finished_job(store, state)
    clock.advance(days=2)
    status, out, err = run("prune")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["STATE", "KEPT", "FOR", "REMOVED", "STILL", "ELIGIBLE"]
    assert lines[1].split() == ["done", "1d", "2", "0"]
    assert lines[2].split() == ["failed", "7d", "0", "0"]
    assert lines[4].split() == ["dead", "30d", "0", "0"]
    assert lines[5].split() == ["(all)", "2", "0"]
    assert _count(store) == 2


def test_prune_custom_ages_json_and_dry_run(run: Run, store: MemoryDriver, clock: ManualClock) -> None:
    """--dry-run counts without deleting; the same ages then delete exactly those rows."""
    for state in ("done", "failed", "cancelled", "dead"):
        finished_job(store, state)
    clock.advance(hours=13)
    argv = ("prune", "--json", "--done", "12h", "--failed", "0", "--cancelled", "1d", "--dead", "never")
    status, out, _ = run(*argv, "--dry-run")
    assert status == 0
    dry = json.loads(out)
    assert dry["dry_run"] is True
    assert dry["policy"] == {"done": "12h", "failed": "0", "cancelled": "1d", "dead": "never"}
    assert dry["removed"] == {"done": 0, "failed": 0, "cancelled": 0, "dead": 0}
    assert dry["remaining"] == {"done": 1, "failed": 1, "cancelled": 0, "dead": 0}
    assert _count(store) == 4
    status, out, _ = run(*argv)
    data = json.loads(out)
    assert (data["removed"], data["total_removed"], data["total_remaining"], data["calls"]) == (
        {"done": 1, "failed": 1, "cancelled": 0, "dead": 0},
        2,
        0,
        1,
    )
    assert _count(store) == 2


def test_prune_limit_stops_one_run_and_all_continues(run: Run, store: MemoryDriver, clock: ManualClock) -> None:
    """--limit bounds one run (and says what remains); --all calls again until nothing is eligible."""
    for _ in range(5):
        finished_job(store, "done")
    clock.advance(days=1)
    status, out, _ = run("prune", "--limit", "2", "--batch", "1")
    assert status == 0
    assert "3 eligible jobs remain" in out
    assert _count(store) == 3
    status, out, err = run("prune", "--limit", "2", "--all", "--json")
    assert status == 0
    data = json.loads(out)
    assert (data["total_removed"], data["total_remaining"], data["calls"]) == (3, 0, 2)
    assert err.splitlines() == ["prune: 2 removed so far, 1 remaining", "prune: 3 removed so far, 0 remaining"]
    status, out, _ = run("prune", "--json")
    assert json.loads(out)["total_removed"] == 0
    assert _count(store) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ("--done", "7"),
        ("--failed", "1x"),
        ("--dead=-1d",),
        ("--cancelled", ""),
        ("--limit", "0"),
        ("--limit", str(v.MAX_PRUNE_ROWS + 1)),
        ("--batch", str(v.MAX_BULK_ROWS + 1)),
    ],
)
def test_prune_refuses_junk_with_a_coded_error_and_deletes_nothing(
    run: Run, store: MemoryDriver, clock: ManualClock, argv: tuple[str, ...]
) -> None:
    """A junk age, limit or batch exits 2 with JC_OPTION_INVALID, its cause and fix; nothing is deleted."""
    finished_job(store, "done")
    clock.advance(days=40)
    status, out, err = run("prune", *argv)
    assert (status, out) == (2, "")
    assert err.startswith("error JC_OPTION_INVALID: ")
    assert "\n  fix: " in err
    assert _count(store) == 1


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: val for k, val in os.environ.items() if k != "JOBCORE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "jobcore.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


@pytest.mark.requires("shared_store")
def test_subprocess_prune_deletes_from_a_shared_store(driver: JobDriver, clock: ManualClock) -> None:
    """The real CLI prunes what the policy allows by wall time, and a dry run deletes nothing."""
    clock.set(datetime.now(timezone.utc) - timedelta(days=2))  # the subprocess runs on wall time
    old = finished_job(driver, "done")
    kept = finished_job(driver, "failed")
    clock.set(datetime.now(timezone.utc))
    young = finished_job(driver, "done")
    url = getattr(driver, "url", None)
    assert isinstance(url, str), "a shared_store driver needs a str `url` attribute"
    dry = _cli("prune", "--dry-run", "--json", "--url", url)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["remaining"] == {"done": 1, "failed": 0, "cancelled": 0, "dead": 0}
    done = _cli("prune", "--json", "--url", url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["removed"] == {"done": 1, "failed": 0, "cancelled": 0, "dead": 0}
    assert driver.introspect.get(old.id) is None
    assert driver.introspect.get(kept.id) is not None
    assert driver.introspect.get(young.id) is not None

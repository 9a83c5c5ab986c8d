"""``jobcore wait ID --timeout SECONDS``: the job once finished, as ``show`` prints it; exit 7 on a timeout."""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Callable

import pytest

from jobcore import cli
from jobcore.cli.ops import job_to_dict
from jobcore.driver import JobDriver
from jobcore.records import JobState

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(driver: JobDriver, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """``run(*argv)`` -> (status, stdout, stderr), in-process on this test's ``driver``."""
    monkeypatch.delenv("JOBCORE_URL", raising=False)

    def call(*argv: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
        capsys.readouterr()
        status = cli.main(list(argv), driver=driver)
        out, err = capsys.readouterr()
        return status, out, err

    return call


def test_wait_prints_the_job_once_acked(run: Run, driver: JobDriver) -> None:
    """wait blocks until the job is done, then prints it as show --json does; status 0."""
    job = driver.enqueue("report", {"month": 1})
    token = driver.claim(["default"], worker_id="w", lease=30).claimed[0].token
    timer = threading.Timer(0.3, lambda: driver.ack(token, {"rows": 9}))
    timer.start()
    status, out, _ = run("wait", job.id, "--timeout", "30", "--poll", "0.1", "--json")
    timer.join()
    assert status == 0
    stored = driver.introspect.get(job.id)
    assert stored is not None
    assert json.loads(out) == job_to_dict(stored)
    assert json.loads(out)["result"] == {"rows": 9}


def test_wait_timeout_exits_7_and_leaves_the_job_alone(run: Run, driver: JobDriver) -> None:
    """A job still live when --timeout passes: JC_WAIT_TIMEOUT on stderr, status 7, the job unchanged."""
    job = driver.enqueue("report")
    before = driver.introspect.get(job.id)
    status, out, err = run("wait", job.id, "--timeout", "0.2")
    assert (status, out) == (7, "")
    assert err.startswith("error JC_WAIT_TIMEOUT: ")
    assert "\n  fix: " in err
    assert driver.introspect.get(job.id) == before


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "999999999"])
def test_wait_bad_timeout_is_refused_with_status_2(run: Run, driver: JobDriver, timeout: str) -> None:
    """A timeout that is not a positive finite duration up to 7 days: JC_OPTION_INVALID, status 2."""
    job = driver.enqueue("report")
    status, _, err = run("wait", job.id, "--timeout", timeout)
    assert status == 2
    assert err.startswith("error JC_OPTION_INVALID: ")
    assert driver.introspect.get(job.id).state is JobState.READY  # type: ignore[union-attr]


def test_wait_unknown_id_is_not_found(run: Run) -> None:
    """An id no job has: JC_JOB_NOT_FOUND, status 3, at once."""
    status, _, err = run("wait", "999999", "--timeout", "30")
    assert status == 3
    assert err.startswith("error JC_JOB_NOT_FOUND: ")

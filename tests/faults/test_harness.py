"""tests.faults.harness: faketime is required loudly in CI, workers get the jobcore under test."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobcore
from tests.faults import harness as h


def test_missing_faketime_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under CI=true a missing libfaketime fails the clock-skew scenario instead of skipping it."""
    monkeypatch.setattr(h, "libfaketime", lambda: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install faketime"):
        h.require_faketime()


def test_missing_faketime_skips_with_the_reason_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside CI the scenario is skipped, naming the package to install."""
    monkeypatch.setattr(h, "libfaketime", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install faketime"):
        h.require_faketime()


def test_a_skewed_process_sees_its_wall_clock_off_and_monotonic_time_and_sleeps_real(tmp_path: Path) -> None:
    """Under skewed_env('+1h') the wall clock is an hour ahead; monotonic time and sleeps are real."""
    h.require_faketime()
    code = (
        "import time; w = time.time(); m = time.monotonic(); time.sleep(0.05); "
        "print(w, m, time.monotonic() - m)"
    )
    env = h.skewed_env(h.worker_env(tmp_path, skewed=True), "+1h")
    wall_before, mono_before = time.time(), time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    wall, mono, slept = (float(x) for x in out.split())
    assert 3590 < wall - wall_before < 3610
    assert 0 <= mono - mono_before < 10
    assert 0.04 < slept < 1.0


def test_workers_import_the_jobcore_this_process_imported(tmp_path: Path) -> None:
    """The workers' PYTHONPATH never puts another tree's jobcore ahead of the one under test."""
    env = h.worker_env(tmp_path)
    code = "import jobcore; print(jobcore.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.strip()
    assert Path(out).resolve() == Path(jobcore.__file__).resolve()

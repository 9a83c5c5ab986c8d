"""docs/tutorial.md runs as written, start to finish, on PostgreSQL (issue 20, item 7).

Every fenced block of the page is taken in order: a ``python title="PATH"`` block is
written to PATH in a scratch project; each line of an ``sh`` block is run there, as a
reader would type it, with ``JOBCORE_URL`` pointing at a fresh schema of the test
server. ``pip install 'jobcore-queue[EXTRA]'`` is checked against the extras the
package declares instead of being run (the test runs from this checkout); ``jobcore
worker`` runs until the jobs the page enqueued are finished, then gets the Ctrl-C the
page tells the reader to press, and must drain and exit 0. A block the harness does not
know how to run fails the test, so the page cannot grow a block nothing checks.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

import pytest
from jobcore.drivers.postgres import PostgresDriver

from fixtures import postgres as fx
from jobcore.records import JobState

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```$', re.S | re.M)


def blocks() -> list[tuple[str, str | None, str]]:
    return [(m.group(1), m.group(2), m.group(3)) for m in BLOCK.finditer(TUTORIAL.read_text(encoding="utf-8"))]


@pytest.fixture
def schema_url(pg_url: str, pool: Any) -> Iterator[str]:
    schema = fx.schema_name()
    sep = "&" if "?" in pg_url else "?"
    try:
        yield f"{pg_url}{sep}schema={schema}"
    finally:
        fx.drop_schema(pool, schema)


class Reader:
    """Types the page's commands in a scratch project."""

    def __init__(self, project: Path, url: str) -> None:
        self.project = project
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), *sys.path])}
        self.url = url
        self.outputs: list[tuple[str, str]] = []

    def command(self, words: list[str]) -> list[str]:
        head, rest = words[0], words[1:]
        if head == "jobcore":
            return [sys.executable, "-m", "jobcore.cli", *rest]
        if head == "python":
            return [sys.executable, *rest]
        if head == "pytest":
            return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *rest]
        raise AssertionError(f"the tutorial runs {head!r}, which this test does not know how to run")

    def run(self, line: str) -> None:
        words = shlex.split(line)
        if words[:2] == ["pip", "install"]:
            extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
            for spec in words[2:]:
                match = re.fullmatch(r"jobcore-queue(?:\[([\w,]+)\])?", spec)
                assert match, f"the tutorial installs {spec!r}, not jobcore-queue"
                assert set(filter(None, (match.group(1) or "").split(","))) <= extras, spec
            return
        if words[0] == "export":
            name, _, _value = words[1].partition("=")
            assert name == "JOBCORE_URL", line
            self.env[name] = self.url  # the reader's database is this test's fresh schema
            return
        if words[:2] == ["jobcore", "worker"]:
            self.worker(words)
            return
        done = subprocess.run(
            self.command(words), cwd=self.project, env=self.env, capture_output=True, text=True, timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        self.outputs.append((line, done.stdout))

    def worker(self, words: list[str]) -> None:
        with subprocess.Popen(
            self.command(words), cwd=self.project, env=self.env, stderr=subprocess.PIPE, text=True,
        ) as proc:
            log = self._until_done(proc)
        assert "started on emails,default" in log, log
        assert "stopped (drained)" in log, log

    def _until_done(self, proc: subprocess.Popen[str]) -> str:
        """Wait until the page's jobs are finished, press Ctrl-C, and answer the worker's log."""
        driver = PostgresDriver.from_url(self.url)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                counts = driver.introspect.stats().counts
                live = sum(n for states in counts.values() for s, n in states.items() if s not in _FINISHED)
                if counts and not live:
                    break
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
            else:
                raise AssertionError(f"the worker did not finish the tutorial's jobs: {counts}")
            proc.send_signal(signal.SIGINT)  # the reader presses Ctrl-C
            log = proc.communicate(timeout=30)[1]
            assert proc.returncode == 0, log
            return log
        finally:
            if proc.poll() is None:
                proc.kill()
            driver.close()

    def start_and_stop(self, module: str) -> None:
        """Run a long-running module of the page until it logs its start, then SIGTERM it: it must drain.

        The page's module configures no logging, so the reader's Python shows WARNING and
        above only; here a ``sitecustomize`` shows INFO too, so the test sees the worker's start
        line and sends the signal once the worker is running, however slowly a loaded machine
        started it, not after a fixed 3 s."""
        shim = self.project / "_shim"
        shim.mkdir(exist_ok=True)
        (shim / "sitecustomize.py").write_text("import logging\nlogging.basicConfig(level=logging.INFO)\n")
        env = {**self.env, "PYTHONPATH": os.pathsep.join([str(shim), self.env["PYTHONPATH"]])}
        lines: list[str] = []
        with subprocess.Popen(
            [sys.executable, "-m", module], cwd=self.project, env=env, stderr=subprocess.PIPE, text=True,
        ) as proc:
            assert proc.stderr is not None
            reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
            reader.start()
            try:
                deadline = time.monotonic() + 60
                while not any(" started on " in line for line in list(lines)):
                    assert proc.poll() is None, "".join(lines)
                    assert time.monotonic() < deadline, f"no start line in 60 s: {''.join(lines)}"
                    time.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
                reader.join(10)
            finally:
                if proc.poll() is None:
                    proc.kill()
        log = "".join(lines)
        assert proc.returncode == 0, log
        assert "SIGTERM received: draining" in log, log


_FINISHED = {JobState.DONE, JobState.DEAD, JobState.FAILED, JobState.CANCELLED}


def test_every_block_of_the_tutorial_runs_as_written(tmp_path: Path, schema_url: str) -> None:
    reader = Reader(tmp_path, schema_url)
    written: list[str] = []
    for language, title, text in blocks():
        if language == "python" and title:
            path = tmp_path / title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(title)
        elif language == "sh":
            for line in text.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    reader.run(line.split("  #")[0].strip())
        else:
            raise AssertionError(f"a {language} block without a title: the test cannot tell what it is for")
    assert "app/jobs.py" in written
    assert "app/run_worker.py" in written
    reader.start_and_stop("app.run_worker")
    # What the page says the reader sees: one job for two sign-ups, then done jobs listed.
    signups = [out for line, out in reader.outputs if line.startswith("python -m app.signup")]
    assert len(signups) == 2
    assert signups[0] == signups[1]
    assert re.fullmatch(r"job \d+ is (JobState\.)?ready\n", signups[0], re.I), signups[0]
    listed = next(out for line, out in reader.outputs if line.startswith("jobcore ls"))
    assert "send_welcome" in listed
    assert "audit" in listed

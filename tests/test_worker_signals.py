"""``worker.run()`` in a program's main thread drains on SIGTERM and SIGINT: each signal whose
handling the program left alone gets the drain, whatever was done to the other.

A shell script starts a background job (``python -m app.run_worker &``, in a container's
entry script say) with SIGINT ignored. The worker used to take the signals only when
both had their defaults, so such a worker took none, and SIGTERM killed it mid-job (found when
the tutorial's test ran from a background shell in CI).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest

PROGRAM = textwrap.dedent(
    """
    import logging, signal, sys, threading, time
    from jobcore import Worker, connect
    from jobcore.registry import Registry

    logging.basicConfig(level=logging.INFO)
    if sys.argv[1] == "own-sigterm":
        signal.signal(signal.SIGTERM, lambda *_: print("the program's own handler", flush=True))
    registry = Registry()

    @registry.job(name="slow")
    def slow(payload):
        print("handler running", file=sys.stderr, flush=True)
        time.sleep(0.5)
        return payload

    driver = connect("memory://")
    slow.enqueue(1, driver=driver)
    worker = Worker(
        ["default"], driver=driver, registry=registry, poll_interval=0.05, rescue_interval=None,
        retention=None, scheduler=False, summary_interval=None,
    )
    if sys.argv[1] == "own-sigterm":  # its own handler does not stop the worker: a timer does
        threading.Timer(3.0, worker.request_stop).start()
    worker.run()
    print("SIGINT ignored after run:", signal.getsignal(signal.SIGINT) == signal.SIG_IGN, flush=True)
    print("done:", driver.introspect.stats().count("done"), flush=True)
    """
)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # whatever the test process has (a CI shell may ignore it)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell does for a background job


def _run(mode: str, preexec: Callable[[], None]) -> tuple[int, str, str]:
    """Start the program, SIGTERM it once its job runs, and answer its exit code, stdout and stderr."""
    err: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-c", PROGRAM, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=preexec,  # noqa: PLW1509 - sets one signal's disposition before exec, as a shell does
    ) as proc:
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while not any("handler running" in line for line in list(err)):
                assert proc.poll() is None, "".join(err)
                assert time.monotonic() < deadline, "".join(err)
                time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            out = proc.stdout.read() if proc.stdout else ""
            proc.wait(timeout=30)
            reader.join(10)
        finally:
            if proc.poll() is None:
                proc.kill()
    return proc.returncode, out, "".join(err)


@pytest.mark.parametrize("preexec", [_default_sigint, _ignore_sigint], ids=["defaults", "sigint-ignored"])
def test_run_drains_on_sigterm(preexec: Callable[[], None]) -> None:
    """SIGTERM drains the worker (the running job finishes, exit 0), also when the process was
    started with SIGINT ignored, which then stays ignored."""
    code, out, err = _run("plain", preexec)
    assert code == 0, err
    assert "SIGTERM received: draining" in err, err
    assert "done: 1" in out, out
    assert f"SIGINT ignored after run: {preexec is _ignore_sigint}" in out, out


def test_run_leaves_a_programs_own_sigterm_handler_alone() -> None:
    """A program that handles SIGTERM itself keeps its handler: the worker does not drain on it."""
    code, out, err = _run("own-sigterm", _default_sigint)
    assert code == 0, err
    assert "the program's own handler" in out, out
    assert "SIGTERM received" not in err, err

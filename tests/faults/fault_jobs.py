"""The handlers the fault scenarios' worker processes run, writing a record of their executions.

Loaded by path (``jobcore worker tests/faults/fault_jobs.py``), it imports jobcore and the
standard library only. The record is independent of jobcore's tables (Jepsen's way): each
process appends lines to ``$FAULT_RECORD_DIR/exec-<pid>.log`` through a descriptor opened
with ``O_APPEND``, one ``os.write`` per line, so a SIGKILL loses nothing written before it::

    S <job> <claim_no> <pid> <monotonic>            an execution started
    X <job> <claim_no> <pid> <monotonic> applied    its effect, after ctx.check() passed
    X <job> <claim_no> <pid> <monotonic> refused    ... refused by the fence (a newer claim was seen)
    E <job> <claim_no> <pid> <monotonic> <outcome>  it ended: done, called_off, fenced_out, error, killed

``time.monotonic()`` is system-wide on Linux, so lines of different processes compare
(processes under faketime run with ``FAKETIME_DONT_FAKE_MONOTONIC=1``).

The effect stands for a write to another system, fenced by the claim number as a handler
should fence it (Kleppmann's fencing token): ``$FAULT_RECORD_DIR/fence/<job>`` keeps the
highest claim number the "other system" has seen for the job, from any execution's start
or effect, and an effect carrying a lower one is refused. A lease cannot stop a paused
process; the fence stops its write.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from typing import Any

from jobcore import Backoff, job
from jobcore.errors import JobTimeout, LeaseLost

RECORD_DIR = os.environ.get("FAULT_RECORD_DIR", ".")
FENCE_DIR = os.path.join(RECORD_DIR, "fence")
QUEUE = "faults"
QUICK = Backoff(base=0.2, factor=2, cap=1.0, jitter=0.2)

_fd: list[int] = []  # this process's record file, opened on first use


class FencedOut(RuntimeError):
    """The fence refused this execution's effect: a newer claim of the job was seen."""


def _line(kind: str, job_id: str, claim_no: int, extra: str = "") -> None:
    if not _fd:
        os.makedirs(RECORD_DIR, exist_ok=True)
        path = os.path.join(RECORD_DIR, f"exec-{os.getpid()}.log")
        _fd.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    text = f"{kind} {job_id} {claim_no} {os.getpid()} {time.monotonic():.6f}{' ' + extra if extra else ''}\n"
    os.write(_fd[0], text.encode())


def _fence(job_id: str, claim_no: int) -> bool:
    """Show ``claim_no`` to the fence; answers False when a higher one was seen before."""
    os.makedirs(FENCE_DIR, exist_ok=True)
    fd = os.open(os.path.join(FENCE_DIR, job_id), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 32, 0).decode().strip()
        highest = int(text) if text else 0
        if claim_no > highest:
            data = f"{claim_no}\n".encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        return claim_no >= highest
    finally:
        os.close(fd)  # releases the lock


@job(name="fault.work", queue=QUEUE, max_attempts=20, backoff=QUICK)
def work(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Sleeps ``ms`` in steps of ``step`` ms, checking between steps, then applies its fenced effect."""
    job_id, claim_no = ctx.job.id, ctx.job.claim_no
    _line("S", job_id, claim_no)
    _fence(job_id, claim_no)  # the other system sees this claim's token from its first call on
    try:
        remaining = float(payload.get("ms", 0)) / 1000
        step = float(payload.get("step", 50)) / 1000
        while remaining > 0:
            time.sleep(min(step, remaining))
            remaining -= step
            ctx.check()
        ctx.check()
    except (LeaseLost, JobTimeout):
        _line("E", job_id, claim_no, "called_off")
        raise
    except BaseException:
        _line("E", job_id, claim_no, "error")
        raise
    if not _fence(job_id, claim_no):
        _line("X", job_id, claim_no, "refused")
        _line("E", job_id, claim_no, "fenced_out")
        raise FencedOut(f"job {job_id}: claim {claim_no} is older than one the fence has seen")
    _line("X", job_id, claim_no, "applied")
    _line("E", job_id, claim_no, "done")
    return {"claim_no": claim_no}


@job(name="fault.poison", queue=QUEUE, max_attempts=2)
def poison(payload: dict[str, Any], ctx: Any) -> None:
    """SIGKILLs the worker running it (after recording its start and its end)."""
    job_id, claim_no = ctx.job.id, ctx.job.claim_no
    _line("S", job_id, claim_no)
    _line("E", job_id, claim_no, "killed")
    os.kill(os.getpid(), signal.SIGKILL)

"""A store client in another process whose wall clock is off (rule F01), driven over pipes.

:func:`skewed_client` starts ``python -m jobcore.parity._skewed URL`` under Debian's
``faketime`` (the whole process's wall clock shifted by an offset; its monotonic clock
left alone), connects with :func:`jobcore.connect` on the store's own clock (no clock
injected), and answers one JSON line per JSON command line:

* ``{"op": "wall"}``: the process's wall time (proves the shift took);
* ``{"op": "claim", "queue": q, "lease": s}``: claimed ``[id, claim_no]`` pairs and buried ids;
* ``{"op": "enqueue", "name": n, "delay": s}``: the job's id and ``run_at``;
* ``{"op": "rescue"}``: requeued count and buried ids;
* ``{"op": "acquire", "key": k, "limit": n, "holder": h, "ttl": s}``: ``true``/``false``.

Times travel as ISO strings. A scenario that needs ``faketime`` fails under ``CI=true``
when it is missing and is skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

__all__ = ["SkewedClient", "skewed_client"]


class SkewedClient:
    """The parent's end: :meth:`call` sends one command and answers its reply."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc

    def call(self, op: str, **args: Any) -> Any:
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise AssertionError(f"the skewed client exited ({self._proc.wait(5)}) during {op}")
        reply = json.loads(line)
        if "error" in reply:
            raise AssertionError(f"the skewed client failed {op}: {reply['error']}")
        return reply["answer"]

    def wall(self) -> datetime:
        return datetime.fromisoformat(self.call("wall"))


@contextlib.contextmanager
def skewed_client(url: str, offset: str) -> Iterator[SkewedClient]:
    """A client of the store at ``url`` in a process whose wall clock is off by ``offset``
    (faketime's syntax: ``"+1h"``, ``"-1h"``)."""
    faketime = shutil.which("faketime")
    if faketime is None:
        message = "Debian's faketime is needed to shift a client's clock (apt-get install faketime)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [faketime, "-f", offset, sys.executable, "-m", "jobcore.parity._skewed", url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        yield SkewedClient(proc)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _serve(url: str) -> None:
    from jobcore.current import connect  # noqa: PLC0415 - the child's import, not the plugin's

    driver = connect(url)
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command.pop("op")
            try:
                answer = _do(driver, op, command)
            except Exception as exc:  # reported to the scenario, which fails with it
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            else:
                print(json.dumps({"answer": answer}), flush=True)
    finally:
        driver.close()


def _do(driver: Any, op: str, args: dict[str, Any]) -> Any:
    if op == "wall":
        return datetime.now().astimezone().isoformat()
    if op == "claim":
        result = driver.claim([args["queue"]], worker_id="skewed", limit=10, lease=args["lease"])
        return {
            "claimed": [[c.job.id, c.token.claim_no] for c in result.claimed],
            "buried": [job.id for job in result.buried],
        }
    if op == "enqueue":
        job = driver.enqueue(args["name"], queue=args.get("queue", "default"), delay=args["delay"])
        return {"id": job.id, "run_at": job.run_at.isoformat()}
    if op == "rescue":
        rescued = driver.introspect.rescue()
        return {"requeued": rescued.requeued, "buried": [job.id for job in rescued.buried]}
    if op == "acquire":
        return driver.leases.acquire(args["key"], args["limit"], args["holder"], args["ttl"])
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    _serve(sys.argv[1])

"""A jobcore client for the clock-skew scenario, run under ``faketime`` (jobcore and stdlib only).

    python skew_client.py URL enqueue N_READY N_DELAYED MS   # N_READY due now, N_DELAYED with delay=30 min
    python skew_client.py URL rescue                         # one introspect.rescue()

Prints one JSON line: ``{"ready": [ids], "delayed": [ids]}`` or ``{"requeued": n, "buried": [ids]}``.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

from jobcore import connect
from jobcore.records import JobSpec

DELAY = timedelta(minutes=30)


def main(argv: list[str]) -> int:
    url, command, *rest = argv
    driver = connect(url)
    try:
        if command == "enqueue":
            ready, delayed, ms = (int(x) for x in rest)
            payload = {"ms": ms, "step": 50}
            now = driver.enqueue_many([JobSpec(name="fault.work", queue="faults", payload=payload)] * ready)
            later = driver.enqueue_many(
                [JobSpec(name="fault.work", queue="faults", payload=payload, delay=DELAY)] * delayed
            )
            print(json.dumps({"ready": [j.id for j in now], "delayed": [j.id for j in later]}))
        elif command == "rescue":
            rescued = driver.introspect.rescue()
            print(json.dumps({"requeued": rescued.requeued, "buried": [j.id for j in rescued.buried]}))
        else:
            print(f"unknown command {command}", file=sys.stderr)
            return 2
    finally:
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

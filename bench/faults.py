"""Fault bench: the fault scenarios of tests/faults at the sizes of issue 15, printed as a table.

    .venv/bin/python bench/faults.py                          # every fault, PostgreSQL and the MongoDB-wire server
    .venv/bin/python bench/faults.py --faults stall,restart --backends postgres
    OLD/.venv/bin/python bench/faults.py                      # measure an older tree: its own interpreter

It measures whatever jobcore the interpreter imports (an older tree's venv measures that
tree; its worker may lack ``--margin``, which is detected from ``jobcore worker --help``
and noted), runs each scenario of :mod:`tests.faults.scenarios` on servers of its own (a
throwaway PostgreSQL from the local binaries, a ``secantusd-py``), prints each report as
it ends, then a markdown table: fault, what was counted, one column per backend. The
scenarios are the tests' own; only the sizes differ (a 30 s stall, a 20 s outage over
20,000 jobs, a failover with the standby promoted 10 s after the primary is lost, ...).
The MongoDB-wire server is slow, so it gets fewer jobs, and it has no replica set, so no failover;
connection slots taken is PostgreSQL's (a role's ``CONNECTION LIMIT``), and so is the full disk
(a tablespace on a tmpfs the bench fills, as root; a trigger raising SQLSTATE 53100 otherwise)
and a job's row locked by another session's open transaction.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobcore  # the interpreter's own jobcore, imported before this tree's root joins the path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # appended: fixtures/ and tests/ come from here, jobcore stays the one imported

from tests.faults import harness as h  # noqa: E402
from tests.faults import scenarios as sc  # noqa: E402

FAULTS = ("stall", "skew", "pause", "restart", "failover", "standby", "slots", "disk", "rowlock", "kill")
BACKENDS = ("postgres", "mongo")

PLANS: dict[str, dict[str, Any]] = {
    "stall": {backend: sc.StallPlan(freeze=30.0, long_ms=40_000) for backend in BACKENDS},
    "skew": {"postgres": sc.SkewPlan(held=3), "mongo": sc.SkewPlan(held=3, ready=12, skewed_ready=3)},
    "pause": {
        "postgres": sc.PausePlan(warm=500, quick=5000),
        "mongo": sc.PausePlan(warm=30, quick=60, lease=4.0, margin=1.0, latency=0.0),
    },
    "restart": {
        "postgres": sc.RestartPlan(jobs=20_000, job_ms=10, outage=20.0, lease=30.0, margin=5.0),
        "mongo": sc.RestartPlan(
            jobs=300, workers=2, concurrency=2, outage=20.0, lease=30.0, margin=5.0, terminate_rounds=0
        ),
    },
    "failover": {"postgres": sc.FailoverPlan(jobs=20_000, job_ms=10, gap=10.0, lease=30.0, margin=5.0)},
    "standby": {"postgres": sc.StandbyLostPlan(jobs=20_000, job_ms=10, outage=20.0, lease=30.0, margin=5.0)},
    "slots": {"postgres": sc.SlotsPlan(jobs=20_000, job_ms=10, outage=20.0, lease=30.0, margin=5.0)},
    "disk": {"postgres": sc.DiskPlan(jobs=20_000, job_ms=10, outage=20.0, lease=30.0, margin=5.0)},
    "rowlock": {"postgres": sc.RowLockPlan(jobs=20_000, job_ms=10, outage=20.0, rows=1, lease=6.0, margin=1.5)},
    "kill": {
        "postgres": sc.KillPlan(warm=500, quick=2000),
        "mongo": sc.KillPlan(warm=30, quick=60, lease=4.0, margin=1.0, latency=0.0),
    },
}
RUNNERS: dict[str, Callable[..., sc.Report]] = {
    "stall": sc.run_stall, "skew": sc.run_skew, "pause": sc.run_pause, "restart": sc.run_restart,
    "failover": sc.run_failover, "standby": sc.run_standby_lost, "slots": sc.run_slots_taken,
    "disk": sc.run_disk_full, "rowlock": sc.run_row_locked,
    "kill": sc.run_kill,
}


def _figure(name: str) -> Callable[[sc.Report], Any]:
    return lambda report: getattr(report.figures, name)


def _measure(name: str) -> Callable[[sc.Report], Any]:
    return lambda report: report.measures.get(name, "-")


COMMON = [
    ("overlapping executions", _figure("overlapping")),
    ("completed jobs run again", _figure("completed_run_again")),
    ("effects applied twice", _figure("effects_twice")),
    ("lost jobs", _figure("lost")),
    ("jobs dead that never ran", _figure("dead_never_ran")),
]
ROWS: dict[str, list[tuple[str, Callable[[sc.Report], Any]]]] = {
    "stall": [
        ("freeze (s)", _measure("freeze s")),
        ("overlapping executions", _figure("overlapping")),
        ("longest overlap (s)", _figure("max_overlap")),
        ("A's handler ended, s after the freeze", _measure("A's handler ended, s after the freeze")),
        ("A's handler outcome", _measure("A's handler outcome")),
        ("B reclaimed the job, s after the freeze", _measure("B started the job, s after the freeze")),
        ("A claims again, s after the thaw", _measure("A claims again, s after the thaw")),
        *COMMON[1:],
    ],
    "skew": [
        ("live jobs requeued by a +1 h rescue()", _measure("rescue under +1h: live jobs requeued")),
        ("live jobs requeued by a -1 h rescue()", _measure("rescue under -1h: live jobs requeued")),
        ("held jobs whose live lease was taken", _measure("held jobs claimed again (live lease taken)")),
        ("runs before run_at (jobs due in 30 min)", _figure("early_runs")),
        *COMMON,
    ],
    "pause": [
        ("jobs the paused worker held", _measure("jobs W1 held when paused (running + claimed ahead)")),
        ("pause (s)", _measure("pause s")),
        ("jobs started after resuming, lease lost", _measure("W1 started after resuming under a lost lease")),
        ("in flight at the pause", _measure("W1 executions in flight at the pause")),
        *COMMON,
        ("writes refused by the fence", _figure("effects_refused")),
    ],
    "restart": [
        ("jobs", _figure("jobs")),
        ("outage (s, stop to accepting)", _measure("store gone s (until it takes writes)")),
        ("sessions killed per round", _measure("sessions killed per round")),
        ("slowest worker to claim again (s)", _measure("slowest worker to claim again s")),
        *COMMON,
    ],
    "failover": [
        ("jobs", _figure("jobs")),
        ("primary lost to standby promoted (s)", _measure("store gone s (until it takes writes)")),
        ("slowest worker to claim again after the promotion (s)", _measure("slowest worker to claim again s")),
        ("slowest worker to claim again after the old primary rejoined as a standby and sessions were killed (s)",
         _measure("slowest worker to claim again after their sessions were killed, s")),
        *COMMON,
    ],
    "standby": [
        ("jobs", _figure("jobs")),
        ("synchronous standby gone (s)", _measure("store gone s (until it takes writes)")),
        ("commits held for it when it came back", _measure("commits held for the standby when it came back")),
        ("an enqueue meanwhile", _measure("enqueue while the standby was gone")),
        ("slowest worker to claim again once it was back (s)", _measure("slowest worker to claim again s")),
        *COMMON,
    ],
    "slots": [
        ("jobs", _figure("jobs")),
        ("every slot of the workers' role taken (s)", _measure("store gone s (until it takes writes)")),
        ("connections a worker tried a second meanwhile, refused",
         _measure("connections refused for want of a slot, per worker per second")),
        ("slowest worker to claim again once slots were free (s)", _measure("slowest worker to claim again s")),
        *COMMON,
    ],
    "disk": [
        ("jobs", _figure("jobs")),
        ("the jobs' disk full (s)", _measure("store gone s (until it takes writes)")),
        ("filled by", _measure("disk filled by")),
        ("an enqueue meanwhile", _measure("enqueue while the disk was full")),
        ("slowest worker to claim again once there was room (s)", _measure("slowest worker to claim again s")),
        *COMMON,
    ],
    "rowlock": [
        ("jobs", _figure("jobs")),
        ("one running job's row held by another session (s)", _measure("store gone s (until it takes writes)")),
        ("completed jobs run again, the locked one aside", _measure("completed jobs run again, locked jobs aside")),
        ("executions called off, the locked one aside", _measure("executions called off, locked jobs aside")),
        *COMMON,
    ],
    "kill": [
        ("jobs the killed worker held", _measure("jobs K1 held when killed (running + claimed ahead)")),
        *COMMON,
        ("poison job state", _measure("poison job state")),
        ("poison job runs", _measure("poison job runs")),
    ],
}
TITLES = {
    "stall": "network stall", "skew": "clock skew (+/-1 h)", "pause": "paused worker (SIGSTOP 3 leases)",
    "restart": "database restart", "failover": "primary failover (PostgreSQL)",
    "standby": "synchronous standby lost (PostgreSQL)", "slots": "connection slots taken (PostgreSQL)",
    "disk": "full disk (PostgreSQL)", "rowlock": "a job's row locked by another session (PostgreSQL)",
    "kill": "killed worker (SIGKILL)",
}


def _own_store(fault: str, backend: str) -> h.Store:
    if fault in ("failover", "standby"):
        return h.own_postgres_pair()
    if fault == "slots":
        return h.own_postgres_as_app()
    if fault == "disk":
        return h.own_postgres_on_small_disk()
    return h.own_postgres() if backend == "postgres" else h.own_mongo()


def _tree() -> str:
    where = Path(jobcore.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
        ).stdout.strip()
    except OSError:
        rev = ""
    return f"{where} ({rev or 'no git'})"


def run_one(fault: str, backend: str, workdir: Path) -> sc.Report | str:
    """One scenario on a server of its own; its report, or why it did not run."""
    if fault == "skew" and h.faketime_missing():
        return f"skipped: {h.faketime_missing()}"
    if backend not in PLANS[fault]:
        return {
            "failover": "n/a: no replica set here (the MongoDB-wire server is one process)",
            "standby": "n/a: no replica set here (the MongoDB-wire server is one process)",
            "slots": "n/a: no per-role connection limit in MongoDB",
            "rowlock": "not measured: the MongoDB-wire test server blocks such a write for good",
        }.get(fault, "n/a: the MongoDB-wire test server's storage is not a real engine's")
    store = _own_store(fault, backend)
    try:
        return RUNNERS[fault](store, PLANS[fault][backend], workdir)
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {exc}"
    finally:
        store.close()


def table(results: dict[tuple[str, str], sc.Report | str], faults: list[str], backends: list[str]) -> str:
    names = {"postgres": "PostgreSQL", "mongo": "MongoDB-wire"}
    lines = [
        "| fault | counted | " + " | ".join(names[b] for b in backends) + " |",
        "|---|---|" + "---|" * len(backends),
    ]
    for fault in faults:
        for label, pick in ROWS[fault]:
            cells = []
            for backend in backends:
                result = results.get((fault, backend))
                cells.append(sc.fmt(pick(result)) if isinstance(result, sc.Report) else (result or "-").split(":")[0])
            lines.append(f"| {TITLES[fault]} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated subset of {','.join(FAULTS)}")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="postgres,mongo (default both)")
    parser.add_argument("--keep", action="store_true", help="keep the records and worker logs (printed at the end)")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    backends = [b for b in args.backends.split(",") if b]
    for name in faults + backends:
        if name not in FAULTS + BACKENDS:
            parser.error(f"unknown fault or backend {name!r}")
    print(f"jobcore under test: {_tree()}; worker --margin: {'yes' if h.margin_supported() else 'no'}")
    root = Path(tempfile.mkdtemp(prefix="jobcore-bench-faults-"))
    results: dict[tuple[str, str], sc.Report | str] = {}
    began = time.monotonic()
    for fault in faults:
        for backend in backends:
            result = run_one(fault, backend, root / f"{fault}-{backend}")
            results[(fault, backend)] = result
            print(result.text() if isinstance(result, sc.Report) else f"[{fault} / {backend}] {result}", flush=True)
    print(f"\nall scenarios: {time.monotonic() - began:.0f}s\n")
    print(table(results, faults, backends))
    if args.keep:
        print(f"\nrecords and logs kept in {root}")
    else:
        import shutil  # noqa: PLC0415

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


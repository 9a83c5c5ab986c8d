"""The mutation gate: curated semantic mutants of the drivers, each of which the suite must kill.

Each mutant replaces one exact snippet of one file with a broken variant (a fence
dropped, a flag ignored, a limit moved, a lock that excludes nothing) in a temporary
copy of the tree, never in the working tree, and runs the scenarios named for it with
``-x`` on the driver(s) it concerns. A failing run kills the mutant; a passing run
means the suite let that bug through. One command runs the gate and prints the kill
ratio::

    .venv/bin/python tools/mutants.py                      # every mutant
    .venv/bin/python tools/mutants.py --drivers memory     # only the memory driver's (and shared ones)
    .venv/bin/python tools/mutants.py mem-ack-unfenced pg-heartbeat-unfenced   # by name
    .venv/bin/python tools/mutants.py --list

PostgreSQL is started once for the whole gate (``JOBCORE_TEST_POSTGRES_URL``, when set,
is used instead); each MongoDB run starts the fixture's own server.
It takes minutes, so it is not part of CI's time budget; run it when changing the
parity suite or a driver's fences. Exit status 1 when any mutant survives.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("jobcore", "drivers", "parity_tests", "tests", "fixtures", "docs", "tools", "conftest.py", "pyproject.toml")
TIMEOUT = 600.0
"""Seconds one mutant's run may take; a run past it counts as killed (the suite hung on it)."""

MEM = "drivers/memory/__init__.py"
MEM_LEASES = "drivers/memory/_leases.py"
MEM_JOBS = "drivers/memory/_jobs.py"
MEM_INTRO = "drivers/memory/_introspect.py"
PG = "drivers/postgres/_sql/jobs.py"
MONGO = "drivers/mongo/_jobs.py"
VAL = "jobcore/validate.py"
VOCAB = "jobcore/vocabulary.py"
PT = "parity_tests"


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One bug planted in one file: ``old`` (exactly once in ``file``) becomes ``new``."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    """pytest arguments selecting the scenarios that must kill it (files, node ids, ``-k``)."""
    drivers: str
    """The ``--jobcore-drivers`` to run them on."""
    why: str


MUTANTS: tuple[Mutant, ...] = (
    # --- the memory driver -------------------------------------------------------------
    Mutant("mem-claim-no-exclusion", MEM_JOBS,
       "        with self._lock:\n            now = self._now()\n            expires = to_millis(now + span)\n",
       "        with threading.RLock():\n            now = self._now()\n            expires = to_millis(now + span)\n",
       (f"{PT}/test_concurrency.py", "-k", "interleaved"), "memory",
       "claim takes a fresh lock per call: no exclusion (C03)"),
    Mutant("mem-token-ignores-worker", MEM_JOBS,
       "            or row.worker_id != token.worker_id\n", "",
       (f"{PT}/test_lease.py", f"{PT}/test_settle.py"), "memory", "a token of another worker is current (L01)"),
    Mutant("mem-token-ignores-claim-no", MEM_JOBS,
       "            or row.claim_no != token.claim_no\n", "",
       (f"{PT}/test_lease.py", f"{PT}/test_settle.py"), "memory", "a token of an earlier claim is current (L02)"),
    Mutant("mem-ack-unfenced", MEM_JOBS,
       "            for token, text in items:\n                row = self._current(token)\n",
       "            for token, text in items:\n                row = self._rows.get(_seq_of(token.job_id) or 0)\n",
       (f"{PT}/test_settle.py", "-k", "S07"), "memory", "ack_many settles whatever job the token names (S07)"),
    Mutant("mem-heartbeat-unfenced", MEM_JOBS,
       "                row = self._current(token)\n                if row is not None:\n"
       "                    row.lease_expires_at = expires",
       "                row = self._rows.get(_seq_of(token.job_id) or 0)\n"
       "                if row is not None and row.state is not RUNNING:\n                    row = None\n"
       "                if row is not None:\n                    row.lease_expires_at = expires",
       (f"{PT}/test_lease.py",), "memory", "heartbeat renews any running job by id (L01-L03)"),
    Mutant("mem-progress-unfenced", MEM_JOBS,
       "            row = self._current(token)\n            if row is None:\n                return False\n"
       "            row.progress",
       "            row = self._rows.get(_seq_of(token.job_id) or 0)\n"
       "            if row is None:\n                return False\n            row.progress",
       (f"{PT}/test_progress.py", "-k", "G02"), "memory", "progress lands on whatever job the token names (G02)"),
    Mutant("mem-claim-keeps-progress", MEM_JOBS,
       "        row.progress = None  # progress belongs to an attempt",
       "        pass  # progress belongs to an attempt",
       (f"{PT}/test_progress.py", "-k", "G04"), "memory", "a claim keeps the previous attempt's progress (G04)"),
    Mutant("mem-dead-letter-ignored", MEM_JOBS,
       "self._finish(row, DEAD if dead_letter else FAILED, now)", "self._finish(row, DEAD, now)",
       (f"{PT}/test_settle.py", "-k", "S03"), "memory", "dead_letter=False still dead-letters (S03)"),
    Mutant("mem-give-back-counts", MEM_JOBS,
       "            if not counts_as_attempt:\n                row.attempt -= 1\n", "",
       (f"{PT}/test_settle.py", "-k", "S05"), "memory", "counts_as_attempt=False spends the attempt (S05)"),
    Mutant("mem-cross-queue-order", MEM_JOBS,
       "(-due.priority, due.run_at, due.seq) < (-best.priority, best.run_at, best.seq)",
       "(due.run_at, due.seq) < (best.run_at, best.seq)",
       (f"{PT}/test_claim.py", "-k", "C02"), "memory", "claims across queues ignore priority (C02)"),
    Mutant("mem-burial-ignores-drop", MEM_JOBS,
       "self._finish(row, FAILED if row.name in drop else DEAD, now)", "self._finish(row, DEAD, now)",
       (f"{PT}/test_claim.py", "-k", "C08"), "memory", "drop_exhausted jobs are buried dead (C08)"),
    Mutant("mem-reclaim-records-nothing", MEM_JOBS,
       "            self._error(row, LEASE_EXPIRED, LEASE_EXPIRED_TEXT, now)\n", "            pass\n",
       (f"{PT}/test_claim.py", "-k", "C07"), "memory", "a reclaim records no LeaseExpired (C07)"),
    Mutant("mem-lease-limit-off-by-one", MEM_LEASES,
       "if holder not in slots and len(slots) >= limit:", "if holder not in slots and len(slots) > limit:",
       (f"{PT}/test_fleet_leases.py",), "memory", "a lease key hands out one slot too many (K01)"),
    Mutant("mem-renew-revives-expired", MEM_LEASES,
       "            if slots.get(holder, now) <= now:\n", "            if holder not in slots:\n",
       (f"{PT}/test_fleet_leases.py", "-k", "K02"), "memory", "renew revives an expired slot (K02)"),
    Mutant("mem-cancel-finished", MEM_INTRO,
       "            if row is None or row.state not in states:\n                return None\n"
       "            self._cancel(row, message, self._d._now())",
       "            if row is None:\n                return None\n"
       "            self._cancel(row, message, self._d._now())",
       (f"{PT}/test_operator.py", "-k", "O01"), "memory", "cancel rewrites a finished job (O01)"),
    Mutant("mem-spread-ignored", MEM_INTRO,
       "self._requeue(row, now, now + offset)", "self._requeue(row, now, now)",
       (f"{PT}/test_operator.py", "-k", "O06"), "memory", "requeue_many ignores its spread (O06)"),
    Mutant("mem-prune-ignores-age", MEM_INTRO,
       " and r.finished_at <= cutoffs[r.state]\n", "\n",
       (f"{PT}/test_retention.py",), "memory", "prune deletes jobs younger than their state's age (R01)"),
    Mutant("mem-page-repeats-its-edge", MEM_INTRO,
       "if below is not None and row.seq >= below:", "if below is not None and row.seq > below:",
       (f"{PT}/test_operator.py", "-k", "O07"), "memory", "the next page repeats the last job (O07)"),
    Mutant("guard-remove-running", VOCAB,
       'Guard("remove", ALL_STATES - {JobState.RUNNING},', 'Guard("remove", ALL_STATES,',
       (f"{PT}/test_operator.py", "-k", "O03"), "memory", "remove deletes a running job (O03), via its guard"),
    # --- the PostgreSQL driver -----------------------------------------------------------
    Mutant("pg-heartbeat-unfenced", PG,
       "  AND j.id = %(id)s AND j.state = {_RUNNING} AND j.worker_id = %(worker)s AND j.claim_no = %(claim_no)s\n"
       "RETURNING j.id",
       "  AND j.id = %(id)s AND j.state = {_RUNNING} AND %(worker)s::text IS NOT NULL"
       " AND %(claim_no)s::bigint IS NOT NULL\nRETURNING j.id",
       (f"{PT}/test_lease.py",), "postgres", "heartbeat renews any running job by id (L01-L03)"),
    Mutant("pg-heartbeat-many-unfenced", PG,
       "UPDATE {{jobs}} AS j SET lease_expires_at = {NOW} + {ms(\"lease_ms\")}\nFROM {_TOKENS}\nWHERE {_FENCED}\n",
       "UPDATE {{jobs}} AS j SET lease_expires_at = {NOW} + {ms(\"lease_ms\")}\nFROM {_TOKENS}\n"
       "WHERE j.id = ANY({_IDS}) AND j.id = (t.item->>0)::bigint AND j.state = {_RUNNING}\n",
       (f"{PT}/test_lease.py", "-k", "heartbeat_many"), "postgres",
       "a batch of heartbeats renews any running job by id (L01-L03)"),
    Mutant("pg-heartbeat-ignores-claim-no", PG,
       " AND j.claim_no = %(claim_no)s\nRETURNING j.id", " AND %(claim_no)s::bigint IS NOT NULL\nRETURNING j.id",
       (f"{PT}/test_lease.py",), "postgres", "a heartbeat of an earlier claim of the same worker lands (L02)"),
    Mutant("pg-progress-unfenced", PG,
       "  AND j.id = %(id)s AND j.claim_no = %(claim_no)s AND j.worker_id = %(worker)s AND j.state = {_RUNNING}",
       "  AND j.id = %(id)s AND %(claim_no)s::bigint IS NOT NULL AND %(worker)s::text IS NOT NULL",
       (f"{PT}/test_progress.py", "-k", "G02"), "postgres", "progress lands on whatever job the token names (G02)"),
    Mutant("pg-claim-keeps-progress", PG,
       '{ms("lease_ms")}, progress = NULL,', '{ms("lease_ms")},',
       (f"{PT}/test_progress.py", "-k", "G04"), "postgres", "a claim keeps the previous attempt's progress (G04)"),
    Mutant("pg-ack-ignores-worker", PG,
       " AND j.worker_id = t.item->>1\n", "\n",
       (f"{PT}/test_settle.py", "-k", "S07"), "postgres", "ack_many lands another worker's token (S07)"),
    Mutant("pg-ack-ignores-claim-no", PG,
       "\n  AND j.claim_no = (t.item->>2)::bigint\"\"\"", "\"\"\"",
       (f"{PT}/test_settle.py", "-k", "S07"), "postgres", "ack_many lands an earlier claim's token (S07)"),
    Mutant("pg-dead-letter-ignored", PG,
       "THEN CASE WHEN %(dead_letter)s::boolean THEN {_DEAD} ELSE {_FAILED} END",
       "THEN CASE WHEN %(dead_letter)s::boolean OR true THEN {_DEAD} ELSE {_FAILED} END",
       (f"{PT}/test_settle.py", "-k", "S03"), "postgres", "dead_letter=False still dead-letters (S03)"),
    Mutant("pg-nack-ignores-claim-no", PG,
       "AND j.worker_id = %(worker)s AND j.claim_no = %(claim_no)s\n    FOR UPDATE",
       "AND j.worker_id = %(worker)s AND %(claim_no)s::bigint IS NOT NULL\n    FOR UPDATE",
       (f"{PT}/test_lease.py", f"{PT}/test_settle.py"), "postgres", "a nack of an earlier claim lands (L02)"),
    Mutant("pg-claim-no-row-lock", PG,
       "        LIMIT %(limit)s\n        FOR UPDATE SKIP LOCKED\n    ) AS d", "        LIMIT %(limit)s\n    ) AS d",
       (f"{PT}/test_concurrency.py", "-k", "interleaved"), "postgres",
       "concurrent claims read the same due rows unlocked (C03)"),
    Mutant("pg-claim-ignores-priority", PG,
       "        ORDER BY j.priority DESC, j.run_at, j.id\n        LIMIT %(limit)s\n"
       "        FOR UPDATE SKIP LOCKED\n    ) AS d",
       "        ORDER BY j.run_at, j.id\n        LIMIT %(limit)s\n        FOR UPDATE SKIP LOCKED\n    ) AS d",
       (f"{PT}/test_claim.py", "-k", "C02"), "postgres", "claims ignore priority (C02)"),
    Mutant("pg-reclaim-records-nothing", PG,
       "errors = CASE WHEN j.state = {_RUNNING} AND NOT j.held THEN {_LEASE_EXPIRED} ELSE j.errors END",
       "errors = j.errors",
       (f"{PT}/test_claim.py", "-k", "C07"), "postgres", "a reclaim records no LeaseExpired (C07)"),
    Mutant("pg-burial-ignores-drop", PG,
       "state = CASE WHEN j.name = ANY(%(drop)s::text[]) THEN {_FAILED} ELSE {_DEAD} END",
       "state = CASE WHEN j.name = ANY(%(drop)s::text[]) THEN {_DEAD} ELSE {_DEAD} END",
       (f"{PT}/test_claim.py", "-k", "C08"), "postgres", "drop_exhausted jobs are buried dead (C08)"),
    Mutant("pg-claims-early", PG,
       "WHERE j.state IN ({_CLAIMABLE}) AND j.queue = q.name AND j.run_at <= {NOW}",
       "WHERE j.state IN ({_CLAIMABLE}) AND j.queue = q.name AND j.run_at <= {NOW} + interval '1 second'",
       (f"{PT}/test_claim.py", "-k", "C01"), "postgres", "a job due in under a second is claimed now (C01)"),
    Mutant("pg-lease-limit-off-by-one", PG,
       "   OR (SELECT count(*) FROM {{leases}} AS o WHERE o.key = %(key)s) < %(limit)s",
       "   OR (SELECT count(*) FROM {{leases}} AS o WHERE o.key = %(key)s) <= %(limit)s",
       (f"{PT}/test_fleet_leases.py",), "postgres", "a lease key hands out one slot too many (K01)"),
    Mutant("pg-renew-revives-expired", PG,
       "WHERE l.key = %(key)s AND l.holder = %(holder)s AND l.expires_at > {NOW}\n",
       "WHERE l.key = %(key)s AND l.holder = %(holder)s\n",
       (f"{PT}/test_fleet_leases.py", "-k", "K02"), "postgres", "renew revives an expired slot (K02)"),
    # --- the MongoDB driver (small selections: the test server is slow) ---------------------
    Mutant("mongo-fence-ignores-claim-no", MONGO,
       "    return {\"_id\": seq, \"state\": RUNNING, \"worker_id\": token.worker_id, \"claim_no\": claim_no}",
       "    return {\"_id\": seq, \"state\": RUNNING, \"worker_id\": token.worker_id}",
       (f"{PT}/test_lease.py", "-k", "L02_same_worker or L03_retried or L03_requeued"), "mongo",
       "every settle of an earlier claim of the same worker lands (L02)"),
    Mutant("mongo-fence-ignores-worker", MONGO,
       "    return {\"_id\": seq, \"state\": RUNNING, \"worker_id\": token.worker_id, \"claim_no\": claim_no}",
       "    return {\"_id\": seq, \"state\": RUNNING, \"claim_no\": claim_no}",
       (f"{PT}/test_lease.py", "-k", "L01_only_the_exact"), "mongo", "another worker's forged token lands (L01)"),
    Mutant("mongo-ack-batch-unfenced", MONGO,
       "            ops.append(UpdateOne(fence, _ack_stages(text, now, mark)))",
       "            ops.append(UpdateOne({\"_id\": fence[\"_id\"]}, _ack_stages(text, now, mark)))",
       (f"{PT}/test_settle.py", "-k", "S07_reclaimed or S07_cancelled or S07_forged or S07_old_claim"), "mongo",
       "a batch ack settles whatever job its token names (S07)"),
    Mutant("mongo-heartbeat-unfenced", MONGO,
       "        found = self._jobs.update_one(fence, {\"$set\": {\"lease_expires_at\"",
       "        found = self._jobs.update_one({\"_id\": fence[\"_id\"], \"state\": RUNNING},"
       " {\"$set\": {\"lease_expires_at\"",
       (f"{PT}/test_lease.py", "-k", "L01_only_the_exact or L02_superseded or L03_retried"), "mongo",
       "heartbeat renews any running job by id (L01-L03)"),
    Mutant("mongo-heartbeat-many-unfenced", MONGO,
       "        ops = [UpdateOne(fence, update) for fence in fences if fence is not None]",
       "        ops = [UpdateOne({\"_id\": fence[\"_id\"], \"state\": RUNNING}, update) for fence in fences if fence]",
       (f"{PT}/test_lease.py", "-k", "heartbeat_many"), "mongo",
       "a batch of heartbeats (or starts) renews any running job by id (L01-L03)"),
    Mutant("mongo-dead-letter-ignored", MONGO,
       "\"state\": {\"$cond\": [final, DEAD if dead_letter else FAILED, SCHEDULED]},",
       "\"state\": {\"$cond\": [final, DEAD, SCHEDULED]},",
       (f"{PT}/test_settle.py", "-k", "S03_dead_letter"), "mongo", "dead_letter=False still dead-letters (S03)"),
    Mutant("mongo-give-back-counts", MONGO,
       "            stages.append({\"$set\": {\"attempt\": {\"$subtract\": [\"$attempt\", 1]}}})\n",
       "            pass\n",
       (f"{PT}/test_settle.py", "-k", "S05_give_back"), "mongo", "counts_as_attempt=False spends the attempt (S05)"),
    Mutant("mongo-burial-ignores-drop", MONGO,
       "    return {\"$cond\": [{\"$in\": [\"$name\", {\"$literal\": sorted(drop)}]}, FAILED, DEAD]}",
       "    return {\"$cond\": [{\"$in\": [\"$name\", {\"$literal\": sorted(drop)}]}, DEAD, DEAD]}",
       (f"{PT}/test_claim.py", "-k", "C08"), "mongo", "drop_exhausted jobs are buried dead (C08)"),
    # --- the shared checks every driver calls (run on memory) -------------------------------
    Mutant("validate-no-enqueue-batch-cap", VAL,
       "        if len(out) >= MAX_ENQUEUE_BATCH:\n", "        if False:\n",
       (f"{PT}/test_limits.py",), "memory", "enqueue_many stores more than MAX_ENQUEUE_BATCH specs (E05)"),
    Mutant("validate-batch-bytes-as-chars", VAL,
       "len(job.payload) if job.payload.isascii() else len(job.payload.encode(\"utf-8\"))", "len(job.payload)",
       (f"{PT}/test_limits.py", "-k", "enqueue_batch_bytes"), "memory",
       "enqueue_many counts the payloads' characters, not their UTF-8 bytes (E05)"),
    Mutant("validate-no-queue-cap", VAL,
       "    if len(names) > _MAX_QUEUES:\n", "    if False:\n",
       (f"{PT}/test_limits.py",), "memory", "a claim names any number of queues (C04)"),
    Mutant("validate-spread-raised", VOCAB,
       "MAX_SPREAD: Final = timedelta(hours=1)\n", "MAX_SPREAD: Final = timedelta(hours=1.5)\n",
       (f"{PT}/test_limits.py",), "memory", "requeue_many spreads over 1.5 h (O06)"),
    Mutant("validate-delay-raised", VOCAB,
       "MAX_DELAY: Final = timedelta(days=36_500)\n", "MAX_DELAY: Final = timedelta(days=36_501)\n",
       (f"{PT}/test_limits.py",), "memory", "a delay a day past 36500 days is taken (E04)"),
    Mutant("validate-payload-cap-off-by-one", VAL,
       "len(text.encode(\"utf-8\")) > MAX_PAYLOAD_BYTES:", "len(text.encode(\"utf-8\")) > MAX_PAYLOAD_BYTES + 1:",
       (f"{PT}/test_limits.py",), "memory", "a payload a byte over the cap is stored (E03)"),
)


@contextmanager
def _tree() -> Iterator[Path]:
    """A temporary copy of the tree that imports as ``jobcore`` (drivers and parity inside it)."""
    root = Path(tempfile.mkdtemp(prefix="jobcore-mutant-"))
    try:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
        for name in COPIED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, root / name, ignore=ignore)
            else:
                shutil.copy2(source, root / name)
        # The editable install maps jobcore.drivers and jobcore.parity onto the working tree;
        # in the copy, links inside the package make the copy's own files win.
        (root / "jobcore" / "drivers").symlink_to(root / "drivers")
        (root / "jobcore" / "parity").symlink_to(root / "parity_tests")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _servers(drivers: set[str]) -> Iterator[dict[str, str]]:
    """The URL of one PostgreSQL server for the whole gate. (Each MongoDB run starts its own
    MongoDB-wire test server: the fixture tunes its client for that slow server.)"""
    env: dict[str, str] = {}
    with ExitStack() as stack:
        sys.path.insert(0, str(ROOT))
        if "postgres" in drivers and not os.environ.get("JOBCORE_TEST_POSTGRES_URL"):
            from fixtures.postgres import LocalServer, find_binaries  # noqa: PLC0415 - only when needed

            bindir = find_binaries()
            if bindir is None:
                raise SystemExit("no PostgreSQL binaries found; set JOBCORE_TEST_POSTGRES_URL")
            server = LocalServer(bindir).start()
            stack.callback(server.stop)
            env["JOBCORE_TEST_POSTGRES_URL"] = server.url
        yield env


def _apply(root: Path, mutant: Mutant) -> None:
    path = root / mutant.file
    text = path.read_text(encoding="utf-8")
    found = text.count(mutant.old)
    if found != 1:
        raise SystemExit(f"mutant {mutant.name}: its snippet occurs {found} times in {mutant.file}, not once")
    path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")


def _run(root: Path, mutant: Mutant, env: dict[str, str], *, count: bool = False) -> tuple[str, float, str]:
    """``(outcome, seconds, last line)``: outcome is killed, survived or error (the run itself broke).

    With ``count`` the run goes on past the first failure, so its last line says how many
    scenarios the mutant fails (how thinly it is killed)."""
    command = [
        sys.executable, "-m", "pytest", *([] if count else ["-x"]), "-q", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--jobcore-drivers", mutant.drivers, *mutant.tests,
    ]
    began = time.monotonic()
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter on our own arguments
            command, cwd=root, env={**os.environ, **env, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired:
        return "killed", time.monotonic() - began, f"hung past {TIMEOUT:.0f}s"
    took = time.monotonic() - began
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if done.returncode == 1:
        return "killed", took, last
    if done.returncode == 0:
        return "survived", took, last
    return "error", took, f"pytest exit {done.returncode}: {last}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only these mutants")
    parser.add_argument("--drivers", default="memory,postgres,mongo", help="run mutants of these drivers only")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--count", action="store_true", help="run past the first failure: how many scenarios kill each")
    parser.add_argument("--select", nargs="+", metavar="PYTEST_ARG",
                        help="run these pytest selections instead of each mutant's own")
    parser.add_argument("--baseline", action="store_true",
                        help="run each mutant's scenarios on the unmutated copy instead (all must pass)")
    args = parser.parse_args(argv)
    wanted = set(args.drivers.split(","))
    chosen = [m for m in MUTANTS if (not args.names or m.name in args.names) and m.drivers in wanted]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"no mutants named {sorted(unknown)}")
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:34} {mutant.drivers:9} {mutant.why}")
        return 0
    results: list[tuple[Mutant, str]] = []
    began = time.monotonic()
    with _servers({m.drivers for m in chosen}) as env:
        for mutant in chosen:
            with _tree() as root:
                if not args.baseline:
                    _apply(root, mutant)
                run = dataclasses.replace(mutant, tests=tuple(args.select)) if args.select else mutant
                outcome, took, last = _run(root, run, env, count=args.count)
            results.append((mutant, outcome))
            print(f"{outcome:8} {took:6.1f}s  {mutant.name:34} {mutant.why}  [{last}]", flush=True)
    if args.baseline:
        failing = [m.name for m, outcome in results if outcome != "survived"]
        print(f"\nbaseline: {len(results) - len(failing)} of {len(results)} selections pass unmutated")
        if failing:
            print("failing unmutated:", ", ".join(failing))
        return 0 if not failing else 1
    killed = sum(1 for _, outcome in results if outcome == "killed")
    survived = [m.name for m, outcome in results if outcome == "survived"]
    broken = [m.name for m, outcome in results if outcome == "error"]
    print(f"\nkilled {killed} of {len(results)} mutants ({killed / max(len(results), 1):.0%}) "
          f"in {time.monotonic() - began:.0f}s")
    if survived:
        print("survived:", ", ".join(survived))
    if broken:
        print("could not run:", ", ".join(broken))
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

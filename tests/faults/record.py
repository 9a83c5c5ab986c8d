"""Reads the fault scenarios' independent record of executions and counts what went wrong.

The record is what :mod:`tests.faults.fault_jobs` writes (one file per worker process);
:func:`analyze` reads it beside the store's final job rows and counts, per the F rules:

* **overlapping**: pairs of executions of one job whose ``[start, end]`` intervals overlap
  (an execution with no end line ends when its process died, else never);
* **completed_run_again**: executions that started after another execution of the same
  job had ended with its effect applied;
* **lost**: enqueued jobs that never finished (no row, or a row still live), besides the
  ones the scenario expects to be still pending (due later);
* **dead_never_ran**: jobs ``dead`` (or ``failed`` by burial) with no start line at all;
* **effects_twice**: jobs whose effect was applied more than once;

and, for the report: ``stale_starts`` (an execution started after a newer claim of the
same job had started: a start under a lost lease), ``effects_refused`` (writes the
fence stopped), ``early_runs`` (executions that started before the job was due) and
``max_overlap`` (seconds of the longest overlap).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["Execution", "Figures", "analyze", "read_record"]

FINISHED = frozenset({"done", "failed", "dead", "cancelled"})


@dataclasses.dataclass
class Execution:
    """One run of a handler: a start line and whatever followed it for the same claim and process."""

    job_id: str
    claim_no: int
    pid: int
    start: float
    end: float | None = None
    outcome: str | None = None
    effect: str | None = None  # "applied", "refused" or None (never reached it)

    def until(self, deaths: Mapping[int, float]) -> float:
        """When it ended: its end line, else its process's death, else never."""
        if self.end is not None:
            return self.end
        return deaths.get(self.pid, math.inf)


def read_record(directory: Path | str) -> list[Execution]:
    """Every execution in ``directory``'s ``exec-*.log`` files, in start order."""
    executions: dict[tuple[str, int, int], Execution] = {}
    for path in sorted(Path(directory).glob("exec-*.log")):
        for raw in path.read_text().splitlines():
            parts = raw.split()
            if len(parts) < 5:
                continue  # a line cut by a kill mid-write (not expected: one write per line)
            kind, job_id, claim, pid, stamp = parts[:5]
            key = (job_id, int(claim), int(pid))
            if kind == "S":
                executions[key] = Execution(job_id, int(claim), int(pid), float(stamp))
                continue
            execution = executions.get(key)
            if execution is None:
                continue
            if kind == "X":
                execution.effect = parts[5]
            elif kind == "E":
                execution.end, execution.outcome = float(stamp), parts[5]
    return sorted(executions.values(), key=lambda e: e.start)


@dataclasses.dataclass
class Figures:
    """What :func:`analyze` counts (see the module docstring)."""

    jobs: int = 0
    executions: int = 0
    overlapping: int = 0
    completed_run_again: int = 0
    lost: int = 0
    dead_never_ran: int = 0
    effects_twice: int = 0
    stale_starts: int = 0
    effects_refused: int = 0
    early_runs: int = 0
    max_overlap: float = 0.0
    details: dict[str, list[str]] = dataclasses.field(default_factory=lambda: defaultdict(list))

    VIOLATIONS = ("overlapping", "completed_run_again", "lost", "dead_never_ran", "effects_twice")

    def violations(self) -> dict[str, int]:
        """The non-zero counts among :attr:`VIOLATIONS` (empty: the promise held)."""
        return {name: getattr(self, name) for name in self.VIOLATIONS if getattr(self, name)}

    def line(self) -> str:
        """The counts on one line."""
        return (
            f"jobs {self.jobs}, executions {self.executions}: overlapping {self.overlapping} "
            f"(longest {self.max_overlap:.1f}s), completed run again {self.completed_run_again}, "
            f"lost {self.lost}, dead never ran {self.dead_never_ran}, effects twice {self.effects_twice}; "
            f"stale starts {self.stale_starts}, effects refused by the fence {self.effects_refused}, "
            f"early runs {self.early_runs}"
        )

    def explain(self, limit: int = 5) -> str:
        """A few examples of each non-zero count, for an assertion message."""
        out = [self.line()]
        for name, items in self.details.items():
            if items:
                out.append(f"  {name}: {'; '.join(items[:limit])}{' ...' if len(items) > limit else ''}")
        return "\n".join(out)


def _state(job: Any) -> str:
    return str(getattr(job, "state", ""))


def analyze(
    executions: Iterable[Execution],
    final_jobs: Iterable[Any],
    enqueued: Iterable[str],
    *,
    pending: Iterable[str] = (),
    deaths: Mapping[int, float] | None = None,
    due: Mapping[str, float] | None = None,
) -> Figures:
    """Count the record's violations against the final rows.

    Args:
        executions: From :func:`read_record`.
        final_jobs: The store's rows at the end (objects with ``id`` and ``state``).
        enqueued: Ids of every job the scenario enqueued.
        pending: Ids expected to be still unfinished (due later): not lost when live.
        deaths: ``{pid: monotonic time}`` of worker processes that died (SIGKILL).
        due: ``{job id: monotonic time}`` before which the job must not start.
    """
    runs = list(executions)
    deaths = deaths or {}
    due = due or {}
    figures = Figures(executions=len(runs))
    by_job: dict[str, list[Execution]] = defaultdict(list)
    for run in runs:
        by_job[run.job_id].append(run)
    rows = {str(job.id): job for job in final_jobs}
    wanted = [str(i) for i in enqueued]
    figures.jobs = len(wanted)
    waiting = {str(i) for i in pending}

    for job_id, group in by_job.items():
        group.sort(key=lambda e: e.start)
        applied = [e for e in group if e.effect == "applied"]
        figures.effects_refused += sum(1 for e in group if e.effect == "refused")
        if len(applied) > 1:
            figures.effects_twice += 1
            figures.details["effects_twice"].append(f"job {job_id} claims {[e.claim_no for e in applied]}")
        for i, first in enumerate(group):
            for second in group[i + 1:]:
                overlap = min(first.until(deaths), second.until(deaths)) - second.start
                if overlap > 0:
                    figures.overlapping += 1
                    figures.max_overlap = max(figures.max_overlap, min(overlap, 1e9))
                    figures.details["overlapping"].append(
                        f"job {job_id} claim {first.claim_no} (pid {first.pid}) and claim {second.claim_no} "
                        f"(pid {second.pid}) for {overlap:.2f}s"
                    )
        for run in group:
            if any(done.end is not None and done.end <= run.start for done in applied if done is not run):
                figures.completed_run_again += 1
                figures.details["completed_run_again"].append(
                    f"job {job_id} claim {run.claim_no} (pid {run.pid}) after it completed"
                )
            if any(other.claim_no > run.claim_no and other.start <= run.start for other in group):
                figures.stale_starts += 1
                figures.details["stale_starts"].append(
                    f"job {job_id} claim {run.claim_no} (pid {run.pid}) started after a newer claim had"
                )
            if job_id in due and run.start < due[job_id]:
                figures.early_runs += 1
                figures.details["early_runs"].append(
                    f"job {job_id} claim {run.claim_no} (pid {run.pid}) {due[job_id] - run.start:.0f}s early"
                )

    for job_id in wanted:
        row = rows.get(job_id)
        if row is None:
            figures.lost += 1
            figures.details["lost"].append(f"job {job_id}: no row")
        elif _state(row) not in FINISHED and job_id not in waiting:
            figures.lost += 1
            figures.details["lost"].append(f"job {job_id}: still {_state(row)}")
        elif _state(row) in ("dead", "failed") and not by_job.get(job_id):
            figures.dead_never_ran += 1
            figures.details["dead_never_ran"].append(f"job {job_id}: {_state(row)} after attempt {row.attempt}")
    return figures

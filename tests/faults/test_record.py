"""tests.faults.record: the independent record is read back and each violation is counted as defined."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.faults.record import Execution, analyze, read_record


def _job(job_id: str, state: str = "done", attempt: int = 1) -> SimpleNamespace:
    return SimpleNamespace(id=job_id, state=state, attempt=attempt)


def _run(job_id: str, claim: int, pid: int, start: float, end: float | None, effect: str | None = "applied",
         outcome: str | None = "done") -> Execution:
    return Execution(job_id, claim, pid, start, end, outcome, effect)


def test_record_lines_of_several_processes_make_executions(tmp_path: Path) -> None:
    """Start, effect and end lines of one claim in one process make one execution; cut lines are skipped."""
    (tmp_path / "exec-10.log").write_text(
        "S 1 1 10 5.0\nX 1 1 10 6.0 applied\nE 1 1 10 6.1 done\nS 2 1 10 7.0\nE 2 1 10 7.5 called_off\nS 3"
    )
    (tmp_path / "exec-11.log").write_text("S 1 2 11 8.0\nX 1 2 11 8.5 refused\nE 1 2 11 8.6 fenced_out\n")
    runs = read_record(tmp_path)
    assert [(r.job_id, r.claim_no, r.pid, r.start, r.end, r.effect, r.outcome) for r in runs] == [
        ("1", 1, 10, 5.0, 6.1, "applied", "done"),
        ("2", 1, 10, 7.0, 7.5, None, "called_off"),
        ("1", 2, 11, 8.0, 8.6, "refused", "fenced_out"),
    ]


def test_a_clean_run_counts_nothing() -> None:
    """One execution per job, each done: no violation."""
    runs = [_run("1", 1, 10, 0.0, 1.0), _run("2", 1, 11, 0.5, 1.5)]
    figures = analyze(runs, [_job("1"), _job("2")], ["1", "2"])
    assert figures.violations() == {}
    assert (figures.jobs, figures.executions) == (2, 2)


def test_overlapping_executions_are_pairs_whose_intervals_meet() -> None:
    """Two executions of a job overlapping in time count once; back-to-back ones do not."""
    runs = [
        _run("1", 1, 10, 0.0, 5.0, effect=None, outcome="called_off"),
        _run("1", 2, 11, 3.0, 6.0),
        _run("2", 1, 10, 0.0, 1.0, effect=None, outcome="called_off"),
        _run("2", 2, 11, 1.5, 2.0),
    ]
    figures = analyze(runs, [_job("1"), _job("2")], ["1", "2"])
    assert figures.overlapping == 1
    assert figures.max_overlap == 2.0


def test_an_execution_without_an_end_ends_when_its_process_died_else_never() -> None:
    """A killed worker's open execution ends at its death; an open one with no known death overlaps all after."""
    runs = [_run("1", 1, 10, 0.0, None, effect=None, outcome=None), _run("1", 2, 11, 4.0, 5.0)]
    assert analyze(runs, [_job("1")], ["1"], deaths={10: 2.0}).overlapping == 0
    assert analyze(runs, [_job("1")], ["1"]).overlapping == 1


def test_completed_job_run_again_and_effect_twice() -> None:
    """A start after an execution applied its effect is a re-run; two applied effects count once per job."""
    runs = [_run("1", 1, 10, 0.0, 1.0), _run("1", 2, 11, 3.0, 4.0)]
    figures = analyze(runs, [_job("1")], ["1"])
    assert (figures.completed_run_again, figures.effects_twice, figures.overlapping) == (1, 1, 0)


def test_a_start_under_a_lost_lease_is_stale_and_its_refused_effect_is_not_twice() -> None:
    """An older claim starting after a newer one did is a stale start; the fence refused its effect."""
    runs = [_run("1", 2, 11, 0.0, 1.0), _run("1", 1, 10, 2.0, 2.1, effect="refused", outcome="fenced_out")]
    figures = analyze(runs, [_job("1")], ["1"])
    assert (figures.stale_starts, figures.completed_run_again, figures.effects_twice) == (1, 1, 0)
    assert figures.effects_refused == 1


def test_lost_dead_never_ran_pending_and_early_runs() -> None:
    """Missing or live rows are lost unless pending; dead rows without a start never ran; early starts count."""
    runs = [_run("3", 1, 10, 10.0, 11.0), _run("5", 1, 10, 1.0, 2.0)]
    jobs = [_job("2", "running"), _job("3", "dead"), _job("4", "dead"), _job("5", "scheduled"), _job("6", "scheduled")]
    figures = analyze(runs, jobs, ["1", "2", "3", "4", "5", "6"], pending=["5", "6"], due={"5": 100.0, "6": 100.0})
    assert figures.lost == 2  # 1 has no row, 2 is still running
    assert figures.dead_never_ran == 1  # 4; 3 ran before it died
    assert figures.early_runs == 1  # 5 started before it was due
    assert set(figures.violations()) == {"lost", "dead_never_ran"}

"""The generated documentation pages match the code they are generated from.

``docs/errors.md`` and the generated blocks of ``docs/cli.md`` come from
``tools/gen_docs.py``; when an error class, an exit status or a command's options
change, these tests fail until the generator is rerun. (The site itself is built,
failing on broken links, by ``tox -e docs``.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jobcore import errors, states
from tools import gen_docs

ROOT = Path(__file__).resolve().parents[1]


def test_error_code_table_matches_the_error_classes() -> None:
    """docs/errors.md is exactly what the generator makes from jobcore.errors."""
    assert gen_docs.ERRORS_PAGE.read_text(encoding="utf-8") == gen_docs.errors_page()


def test_error_code_table_has_one_row_per_code_with_its_fix() -> None:
    """Every class's code appears once, with its default fix when it has its own."""
    page = gen_docs.errors_page()
    for cls in errors.all_error_classes():
        assert page.count(f"`{cls.code}` |") == 1, cls.code
        if cls.default_fix != errors.JobcoreError.default_fix:
            assert gen_docs._cell(cls.default_fix) in page


def test_cli_reference_blocks_match_the_parser_and_exit_codes() -> None:
    """docs/cli.md's exit-status table and command help are what the generator makes now (up to wrapping)."""
    current = gen_docs.CLI_PAGE.read_text(encoding="utf-8")
    assert gen_docs.same_text(gen_docs.cli_page(current), current)


def test_generator_check_mode_reports_current_pages() -> None:
    """`python tools/gen_docs.py --check` (what a contributor runs) agrees and exits 0."""
    done = subprocess.run(
        [sys.executable, "tools/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_check_ignores_rewrapping_but_not_a_changed_word() -> None:
    """Python versions wrap argparse usage lines differently; a changed option is still stale."""
    wrapped_311 = "[--limit LIMIT]\n                  [--after CURSOR | --before CURSOR]"
    wrapped_313 = "[--limit LIMIT] [--after CURSOR |\n                  --before CURSOR]"
    assert gen_docs.same_text(wrapped_311, wrapped_313)
    assert not gen_docs.same_text(wrapped_311, wrapped_311.replace("--before", "--until"))


def test_concepts_state_diagram_draws_the_transition_table() -> None:
    """docs/concepts.md's state diagram has exactly the edges of jobcore.states, in table order."""
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    block = page.split("```mermaid\nstateDiagram-v2\n", 1)[1].split("```", 1)[0]
    assert [line.strip() for line in block.splitlines() if line.strip()] == states.diagram_edges()


def test_diagram_edges_join_the_labels_of_one_source_and_target() -> None:
    """Edges sharing source and target are drawn once; every table edge is on some drawn line."""
    lines = states.diagram_edges()
    pairs = [line.split(":", 1)[0] for line in lines]
    assert len(pairs) == len(set(pairs))
    for edge in states.TRANSITIONS:
        assert any(line.startswith(f"{edge.source} --> {edge.target}: ") and edge.label in line for line in lines)
    assert "running --> ready: rescue (lease lapsed, attempts left)" in lines
    assert "done --> scheduled: requeue_many (spread, due later)" in lines

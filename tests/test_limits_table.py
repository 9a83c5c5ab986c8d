"""Every row of the limits table on the rules page names an edge scenario that exists.

The table in ``docs/rules.md`` ("Limits") lists each constant of ``jobcore/validate.py``
with the parity scenario that takes it exactly and one step past it. Scenarios are found
by reading ``parity_tests/test_limits.py`` with :mod:`ast`; nothing is run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from jobcore.parity.test_limits import L

from tools.gen_docs import written

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
SCENARIOS = ROOT / "parity_tests" / "test_limits.py"
ROW = re.compile(r"^\| `([A-Z_]+)` \|.*\|\s*$", re.MULTILINE)
VALUE = re.compile(r"^\| `([A-Z_]+)` \| ([^|]+?) \|", re.MULTILINE)
LINK = re.compile(r"\[`(test_\w+)`\]\(\.\./parity_tests/test_limits\.py\)")


def limits_section(page: str) -> str:
    """The rules page's "## Limits" section."""
    return page.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]


def scenario_names() -> set[str]:
    tree = ast.parse(SCENARIOS.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def rows_without_scenario(section: str, names: set[str]) -> list[str]:
    """Constants of the table whose row links no existing edge scenario."""
    missing = []
    for line in section.splitlines():
        row = ROW.match(line)
        if row is None:
            continue
        linked = LINK.findall(line)
        if not linked or any(name not in names for name in linked):
            missing.append(row.group(1))
    return missing


def test_every_limit_row_links_an_existing_edge_scenario() -> None:
    """Each constant of the limits table links a scenario of parity_tests/test_limits.py that exists."""
    section = limits_section(PAGE)
    assert len(ROW.findall(section)) >= 20
    assert rows_without_scenario(section, scenario_names()) == []


def test_every_edge_scenario_is_linked() -> None:
    """Every scenario of parity_tests/test_limits.py is named on the limits section."""
    assert scenario_names() - set(LINK.findall(limits_section(PAGE))) == set()


def test_the_scenarios_use_the_published_limits() -> None:
    """The values the edge scenarios take (test_limits.L) are the table's, row by row, and the queue cap."""
    section = limits_section(PAGE)
    table = dict(VALUE.findall(section))
    ours = {name: written(value) for name, value in vars(L).items() if name.isupper() and name != "MAX_QUEUES"}
    assert ours == {name: text.strip() for name, text in table.items()}
    assert f"A claim names at most {L.MAX_QUEUES} queues" in section


def test_the_check_catches_a_row_without_scenario() -> None:
    """A row with no link, or a link to a missing test, is reported."""
    section = (
        "| `A` | 1 | x | [`test_E01_a`](../parity_tests/test_limits.py) |\n"
        "| `B` | 2 | y |\n"
        "| `C` | 3 | z | [`test_E01_gone`](../parity_tests/test_limits.py) |\n"
    )
    assert rows_without_scenario(section, {"test_E01_a"}) == ["B", "C"]

"""The rules page and the parity suite agree: every rule id has a scenario named after it.

``docs/rules.md`` has one ``### <ID> <title>`` heading per rule. These tests fail when a
heading has no scenario ``test_<ID>_...`` in ``parity_tests/`` (the meta-test pynenc
keeps for its suites), when a scenario of a documented section has no heading, when a
scenario link on the page names a test that does not exist or belongs to another rule,
and when the limits table disagrees with ``jobcore/validate.py``. Scenarios are found
by reading the source with :mod:`ast`, so nothing is imported or run.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

from jobcore import validate

ROOT = Path(__file__).resolve().parents[1]
RULES_PAGE = ROOT / "docs" / "rules.md"
SCENARIO_DIR = ROOT / "parity_tests"

HEADING = re.compile(r"^### ([A-Z]\d{2}) \S", re.MULTILINE)
RULE_PREFIX = re.compile(r"^test_((?:[A-Z]\d{2}_)+)")
SCENARIO_LINK = re.compile(r"\[`(test_\w+)`\]\(\.\./parity_tests/(\w+\.py)\)")
LIMIT_ROW = re.compile(r"^\| `([A-Z_]+)` \| ([^|]+?) \|", re.MULTILINE)


def documented_ids(page: str) -> list[str]:
    """Rule ids in heading order, as the rules page declares them."""
    return HEADING.findall(page)


def rule_ids_of(test_name: str) -> list[str]:
    """The rule ids a scenario name starts with: ``test_C03_L02_x`` -> ``["C03", "L02"]``."""
    match = RULE_PREFIX.match(test_name)
    return match.group(1).rstrip("_").split("_") if match else []


def scenario_functions(directory: Path = SCENARIO_DIR) -> dict[str, dict[str, ast.FunctionDef]]:
    """``{file name: {test name: node}}`` for every ``test_*`` function in the scenario files."""
    found: dict[str, dict[str, ast.FunctionDef]] = {}
    for path in sorted(directory.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found[path.name] = {
            node.name: node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        }
    return found


def scenarios_by_rule(functions: dict[str, dict[str, ast.FunctionDef]]) -> dict[str, list[str]]:
    """``{rule id: [test names]}`` from the scenario functions."""
    by_rule: dict[str, list[str]] = defaultdict(list)
    for tests in functions.values():
        for name in tests:
            for rule in rule_ids_of(name):
                by_rule[rule].append(name)
    return by_rule


def missing_scenarios(page: str, by_rule: dict[str, list[str]]) -> list[str]:
    """Documented rule ids that no scenario is named after."""
    return [rule for rule in documented_ids(page) if not by_rule.get(rule)]


def shown(value: object) -> str:
    """A limit as the rules page's table writes it."""
    if isinstance(value, timedelta):
        ms = value // timedelta(milliseconds=1)
        for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("second", 1000)):
            if ms % size == 0:
                count = ms // size
                return f"{count} {unit}{'s' if count != 1 else ''}"
        return f"{ms} ms"
    return str(value)


PAGE = RULES_PAGE.read_text(encoding="utf-8")
FUNCTIONS = scenario_functions()
BY_RULE = scenarios_by_rule(FUNCTIONS)


def test_rules_page_declares_each_id_once() -> None:
    """The page has headings for the E, C, L, S, O, K and F sections, no id twice."""
    ids = documented_ids(PAGE)
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert {i[0] for i in ids} >= set("ECLSOKF")
    for section, last in {"E": 5, "C": 10, "L": 4, "S": 7, "O": 9, "K": 3, "F": 7}.items():
        assert [i for i in ids if i[0] == section] == [f"{section}{n:02d}" for n in range(1, last + 1)]


def test_every_documented_rule_has_a_scenario() -> None:
    """Each rule id on the page has at least one parity scenario named test_<ID>_..."""
    assert missing_scenarios(PAGE, BY_RULE) == []


def test_every_scenario_of_a_documented_section_has_a_heading() -> None:
    """A scenario named after an id of a documented section points at a real heading."""
    ids = set(documented_ids(PAGE))
    sections = {i[0] for i in ids}
    stray = sorted(rule for rule in BY_RULE if rule[0] in sections and rule not in ids)
    assert stray == []


def test_scenarios_state_their_behaviour_in_one_line() -> None:
    """Every rule scenario has a one-line docstring."""
    bad = [
        name
        for tests in FUNCTIONS.values()
        for name, node in tests.items()
        if rule_ids_of(name) and len((ast.get_docstring(node) or "\n").strip().splitlines()) != 1
    ]
    assert bad == []


def test_scenario_links_name_existing_tests_of_their_rule() -> None:
    """Each scenario link under a heading names a test in that file, named after that rule."""
    sections = re.split(r"^### ", PAGE, flags=re.MULTILINE)[1:]
    assert sections
    for section in sections:
        rule = section[:3]
        links = SCENARIO_LINK.findall(section)
        assert links, f"{rule} links no scenario"
        for test_name, file_name in links:
            assert test_name in FUNCTIONS.get(file_name, {}), f"{rule}: {file_name} has no {test_name}"
            assert rule in rule_ids_of(test_name), f"{rule}: {test_name} is named after another rule"


def test_limits_table_matches_validate() -> None:
    """Every limit on the page shows the value jobcore.validate enforces."""
    rows = dict(LIMIT_ROW.findall(PAGE))
    assert len(rows) >= 15
    for name, value in rows.items():
        assert shown(getattr(validate, name)) == value.strip(), name


def test_completeness_check_catches_a_rule_without_scenario() -> None:
    """The check itself fails for a heading nobody wrote a scenario for."""
    page = "### Z98 Covered\n\n### Z99 Forgotten rule\n"
    assert missing_scenarios(page, {"Z98": ["test_Z98_x"]}) == ["Z99"]
    assert rule_ids_of("test_C03_L02_model") == ["C03", "L02"]
    assert rule_ids_of("test_helper") == []
    assert shown(timedelta(milliseconds=1)) == "1 ms"
    assert shown(timedelta(hours=1)) == "1 hour"

"""The rules page and the parity suite agree: every rule id has a scenario named after it.

``docs/rules.md`` has one ``### <ID> <title>`` heading per rule. These tests fail when a
heading has no scenario ``test_<ID>_...`` in ``parity_tests/`` (the meta-test pynenc
keeps for its suites), when a section's numbering has a gap or loses its last rule,
when a scenario of a documented section has no heading, when a scenario link on the
page names a test that does not exist or belongs to another rule, when a rule-named
scenario is not linked under every rule it is named after, when a rule-named scenario
asserts nothing (no ``assert``, no ``pytest.raises``/``fail``, no call of a helper that
asserts), and when the limits table disagrees with ``jobcore/validate.py``. Scenarios and
helpers are found by reading the source with :mod:`ast`, so nothing is imported or run.
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

PACKAGE_DIRS = {"jobcore.parity": SCENARIO_DIR, "jobcore": ROOT / "jobcore"}
"""Where imported helper modules live: ``jobcore.parity.x`` is ``parity_tests/x.py``."""
SECTION_SIZES = {
    "E": 5, "C": 10, "L": 4, "S": 7, "O": 10, "K": 4, "R": 2, "P": 5, "W": 7, "T": 3, "A": 4, "D": 5, "G": 4, "F": 7,
}
"""How many rules each section has: a rule that vanishes from the end of a section fails too."""

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


def scenario_functions_of(path: Path) -> dict[str, ast.FunctionDef]:
    """``{test name: node}`` for every ``test_*`` function in one file, in classes too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        node.name: node  # type: ignore[misc]  # async scenarios are read the same way
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


def scenario_functions(directory: Path = SCENARIO_DIR) -> dict[str, dict[str, ast.FunctionDef]]:
    """``{file name: {test name: node}}`` for every ``test_*`` function in the scenario files."""
    return {path.name: scenario_functions_of(path) for path in sorted(directory.glob("test_*.py"))}


def scenarios_by_rule(functions: dict[str, dict[str, ast.FunctionDef]]) -> dict[str, list[str]]:
    """``{rule id: [test names]}`` from the scenario functions."""
    by_rule: dict[str, list[str]] = defaultdict(list)
    for tests in functions.values():
        for name in tests:
            for rule in rule_ids_of(name):
                by_rule[rule].append(name)
    return by_rule


def numbering_faults(ids: list[str], sizes: dict[str, int]) -> list[str]:
    """What is wrong with the page's numbering: a section out of order, with a gap, a
    rule more or fewer than ``sizes`` pins, or a section ``sizes`` does not know."""
    faults = []
    for section in dict.fromkeys(i[0] for i in ids):
        got = [i for i in ids if i[0] == section]
        want = [f"{section}{n:02d}" for n in range(1, sizes.get(section, 0) + 1)]
        if got != want:
            faults.append(f"section {section}: {got} != {want}")
    faults.extend(f"section {s} has no rules on the page" for s in sizes if s not in {i[0] for i in ids})
    return faults


def unlinked_scenarios(page: str, functions: dict[str, dict[str, ast.FunctionDef]]) -> list[str]:
    """``ID: file::test`` for each rule-named scenario its rule's heading does not link."""
    linked = {
        (section[:3], test, file)
        for section in re.split(r"^### ", page, flags=re.MULTILINE)[1:]
        for test, file in SCENARIO_LINK.findall(section)
    }
    return [
        f"{rule}: {file}::{name}"
        for file, tests in functions.items()
        for name in tests
        for rule in rule_ids_of(name)
        if (rule, name, file) not in linked
    ]


class Assertions:
    """Decides by :mod:`ast` whether a function checks anything, following helper calls.

    A function asserts when its body holds an ``assert``, a ``raise AssertionError``, a
    ``pytest.raises``/``pytest.fail``/``pytest.warns``, or a call of a function that
    asserts: one defined in the same module or imported from a ``jobcore.parity`` or
    ``jobcore`` module (read from its source file, never imported).
    """

    PYTEST_CHECKS = frozenset({"raises", "fail", "warns"})

    def __init__(self, dirs: dict[str, Path] = PACKAGE_DIRS) -> None:
        self.dirs = dirs
        self._modules: dict[Path, tuple[dict[str, ast.AST], dict[str, tuple[Path, str]]]] = {}
        self._verdicts: dict[tuple[Path, str], bool] = {}

    def module(self, path: Path) -> tuple[dict[str, ast.AST], dict[str, tuple[Path, str]]]:
        """``(functions by name, imported names -> (file, name))`` of one module."""
        if path not in self._modules:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            functions: dict[str, ast.AST] = {
                node.name: node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            imported: dict[str, tuple[Path, str]] = {}
            for node in tree.body:
                if isinstance(node, ast.ImportFrom) and node.module:
                    file = self.file_of(node.module, path, node.level)
                    if file is not None:
                        for alias in node.names:
                            imported[alias.asname or alias.name] = (file, alias.name)
            self._modules[path] = (functions, imported)
        return self._modules[path]

    def file_of(self, module: str, importer: Path, level: int) -> Path | None:
        """The source file of ``module`` when it is one of ours, else ``None``."""
        if level:
            candidate = importer.parent / f"{module.replace('.', '/')}.py"
            return candidate if candidate.exists() else None
        for package, directory in self.dirs.items():
            if module.startswith(package + "."):
                candidate = directory / f"{module[len(package) + 1:].replace('.', '/')}.py"
                if candidate.exists():
                    return candidate
        return None

    def checks_directly(self, node: ast.AST) -> bool:
        """An ``assert``, a ``raise AssertionError`` or a ``pytest`` check anywhere in ``node``."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assert):
                return True
            if isinstance(sub, ast.Raise) and sub.exc is not None:
                exc = sub.exc.func if isinstance(sub.exc, ast.Call) else sub.exc
                if isinstance(exc, ast.Name) and exc.id == "AssertionError":
                    return True
            if (
                isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "pytest"
                and sub.func.attr in self.PYTEST_CHECKS
            ):
                return True
        return False

    def asserts(self, path: Path, name: str) -> bool:
        """Whether function ``name`` of module ``path`` (or a helper it calls) asserts."""
        key = (path, name)
        if key in self._verdicts:
            return self._verdicts[key]
        self._verdicts[key] = False  # while deciding: a recursive call alone proves nothing
        node = self.module(path)[0].get(name)
        verdict = node is not None and self.node_asserts(path, node)
        self._verdicts[key] = verdict
        return verdict

    def node_asserts(self, path: Path, node: ast.AST) -> bool:
        """Whether ``node`` (a function of module ``path``, nested or not) or a helper it calls asserts."""
        functions, imported = self.module(path)
        called = [
            (path, call.func.id) if call.func.id in functions else imported.get(call.func.id)
            for call in ast.walk(node)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        ]
        return self.checks_directly(node) or any(self.asserts(*t) for t in called if t is not None)


def silent_scenarios(directory: Path = SCENARIO_DIR, checker: Assertions | None = None) -> list[str]:
    """``file::test`` for each rule-named scenario that asserts nothing."""
    checker = checker or Assertions()
    return [
        f"{path.name}::{name}"
        for path in sorted(directory.glob("test_*.py"))
        for name, node in scenario_functions_of(path).items()
        if rule_ids_of(name) and not checker.node_asserts(path, node)
    ]


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
    """Every section numbers its rules 01..N without a gap, N as pinned, no id twice."""
    ids = documented_ids(PAGE)
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert numbering_faults(ids, SECTION_SIZES) == []


def test_every_rule_named_scenario_is_linked_under_its_rules() -> None:
    """A scenario named test_<ID>_... is linked from the heading of each rule it names."""
    assert unlinked_scenarios(PAGE, FUNCTIONS) == []


def test_every_rule_named_scenario_asserts_something() -> None:
    """No rule scenario passes by doing nothing: each asserts, or calls a helper that does."""
    assert silent_scenarios() == []


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


def test_completeness_check_catches_a_silent_scenario(tmp_path: Path) -> None:
    """The assertion check fails a docstring-only scenario and one calling a helper that checks nothing."""
    (tmp_path / "_helpers.py").write_text(
        "def checks(x):\n    if not x:\n        raise AssertionError('no')\n"
        "def quiet(x):\n    return x\n"
        "def deeper(x):\n    return checks(x)\n"
        "def loop(x):\n    return loop(x)\n",
        encoding="utf-8",
    )
    (tmp_path / "test_z.py").write_text(
        "import pytest\n"
        "from jobcore.parity._helpers import checks, quiet, deeper, loop\n"
        "def _local(x):\n    assert x\n"
        "def test_Z01_docstring_only():\n    'Nothing here.'\n"
        "def test_Z01_quiet_helper():\n    'Calls helpers that check nothing.'\n    quiet(1)\n    loop(1)\n"
        "def test_Z01_plain_assert():\n    'Asserts.'\n    assert 1\n"
        "def test_Z01_raises():\n    'Expects a refusal.'\n    with pytest.raises(ValueError):\n        int('x')\n"
        "def test_Z01_imported_helper():\n    'Through two helpers.'\n    deeper(1)\n"
        "def test_Z01_local_helper():\n    'A helper of the module.'\n    _local(1)\n"
        "def test_helper_not_a_scenario():\n    pass\n"
        "class TestGrouped:\n    def test_Z01_in_a_class(self):\n        'Silent too.'\n",
        encoding="utf-8",
    )
    checker = Assertions({"jobcore.parity": tmp_path})
    silent = [
        "test_z.py::test_Z01_docstring_only", "test_z.py::test_Z01_quiet_helper", "test_z.py::test_Z01_in_a_class"
    ]
    assert silent_scenarios(tmp_path, checker) == silent


def test_completeness_check_catches_gaps_and_unlinked_scenarios() -> None:
    """The numbering check fails a gap and a vanished last rule; the link check an unlinked scenario."""
    assert numbering_faults(["Z01", "Z03"], {"Z": 3}) != []
    assert numbering_faults(["Z01", "Z02"], {"Z": 3}) != []
    assert numbering_faults(["Z01", "Z02", "Y01"], {"Z": 2}) != []
    assert numbering_faults(["Z01", "Z02"], {"Z": 2, "Y": 1}) != []
    assert numbering_faults(["Z01", "Z02"], {"Z": 2}) == []
    page = "### Z01 One\n\n- [`test_Z01_a`](../parity_tests/test_z.py)\n\n### Z02 Two\n"
    node = ast.parse("def f(): pass").body[0]
    assert isinstance(node, ast.FunctionDef)
    functions = {"test_z.py": dict.fromkeys(["test_Z01_a", "test_Z01_Z02_b", "test_helper"], node)}
    assert unlinked_scenarios(page, functions) == ["Z01: test_z.py::test_Z01_Z02_b", "Z02: test_z.py::test_Z01_Z02_b"]


def test_completeness_check_catches_a_rule_without_scenario() -> None:
    """The check itself fails for a heading nobody wrote a scenario for."""
    page = "### Z98 Covered\n\n### Z99 Forgotten rule\n"
    assert missing_scenarios(page, {"Z98": ["test_Z98_x"]}) == ["Z99"]
    assert rule_ids_of("test_C03_L02_model") == ["C03", "L02"]
    assert rule_ids_of("test_helper") == []
    assert shown(timedelta(milliseconds=1)) == "1 ms"
    assert shown(timedelta(hours=1)) == "1 hour"

"""A third-party driver package runs the parity suite with a few lines of configuration.

Each test writes an outside driver into a temporary directory (the plain driver of
tests/third_party/minimal_driver.py, which implements only the backend protocols,
plus a context-manager factory) and runs ``pytest -p jobcore.parity.plugin --pyargs
jobcore.parity`` on it in a separate process, exactly as that package's CI would.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "parity_tests"
MINIMAL_DRIVER = Path(__file__).with_name("third_party") / "minimal_driver.py"

THIRD_PARTY_DRIVER = '''
"""A driver published outside jobcore: the minimal driver, copied beside this module."""

import contextlib
from pathlib import Path

from minimal_driver import MinimalDriver

MADE = Path(__file__).with_name("made.txt")


class ThirdPartyDriver(MinimalDriver):
    """The outside driver under test."""


class ForgetfulDriver(MinimalDriver):
    """A broken outside driver: it never reports duplicates (breaks E02)."""

    def enqueue(self, name, payload=None, **options):
        import attrs

        return attrs.evolve(super().enqueue(name, payload, **options), duplicate=False)


def _factory(cls):
    @contextlib.contextmanager
    def factory(clock):
        driver = cls(clock=clock)
        with MADE.open("a") as out:  # proof, across the process boundary, of which driver ran
            out.write(type(driver).__name__ + "\\n")
        try:
            yield driver
        finally:
            driver.close()

    return factory


factory = _factory(ThirdPartyDriver)
broken_factory = _factory(ForgetfulDriver)
'''

HOOK_PLUGIN = '''
"""The outside package's own pytest plugin, registering its driver by the hook."""

from third_party_driver import factory


def pytest_jobcore_driver_factories(config):
    return {"third": factory}
'''


def _scenarios(*rules: str) -> list[str]:
    """Names of the parity scenarios of ``rules``, read from the suite's source."""
    names = []
    for path in sorted(SCENARIO_DIR.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(node.name.startswith(f"test_{r}_") for r in rules):
                names.append(node.name)
    return names


@pytest.fixture
def outside(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A temporary project holding the third-party driver module."""
    monkeypatch.delenv("JOBCORE_TEST_DRIVERS", raising=False)  # tox sets it for jobcore's own run
    pytester.makepyfile(third_party_driver=THIRD_PARTY_DRIVER, minimal_driver=MINIMAL_DRIVER.read_text("utf-8"))
    return pytester


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "jobcore.parity.plugin", "--pyargs", "jobcore.parity", "-p", "no:cacheprovider", "-v", *args,
        timeout=240,
    )


def _made(pytester: pytest.Pytester) -> list[str]:
    made = pytester.path / "made.txt"
    return made.read_text().split() if made.exists() else []


def test_third_party_driver_runs_chosen_scenarios(outside: pytest.Pytester) -> None:
    """--jobcore-driver NAME=MODULE:FACTORY plus --jobcore-drivers runs the scenarios on that driver only."""
    expected = _scenarios("E01", "C08")
    assert len(expected) >= 8
    result = _run(
        outside,
        *("--jobcore-driver", "third=third_party_driver:factory"),
        *("--jobcore-drivers", "third", "-k", "E01 or C08"),
    )
    result.assert_outcomes(passed=len(expected))
    for name in expected:
        result.stdout.fnmatch_lines([f"*{name}[[]third[]] PASSED*"])
    result.stdout.no_fnmatch_line("*[[]memory[]]*")
    assert _made(outside) == ["ThirdPartyDriver"] * len(expected)


def test_memory_runs_beside_the_third_party_driver(outside: pytest.Pytester) -> None:
    """Without --jobcore-drivers the memory driver runs every scenario beside the outside one."""
    result = _run(outside, "--jobcore-driver", "third=third_party_driver:factory", "-k", "K03")
    count = len(_scenarios("K03"))
    result.assert_outcomes(passed=2 * count)
    result.stdout.fnmatch_lines(["*test_K03_*[[]memory[]] PASSED*", "*test_K03_*[[]third[]] PASSED*"])
    assert _made(outside) == ["ThirdPartyDriver"] * count


def test_third_party_plugin_registers_by_hook(outside: pytest.Pytester) -> None:
    """An outside plugin answering pytest_jobcore_driver_factories joins the suite the same way."""
    outside.makepyfile(third_party_plugin=HOOK_PLUGIN)
    result = _run(outside, "-p", "third_party_plugin", "--jobcore-drivers", "third", "-k", "E01")
    result.assert_outcomes(passed=len(_scenarios("E01")))
    result.stdout.fnmatch_lines(["*test_E01_*[[]third[]] PASSED*"])


def test_suite_fails_a_driver_that_breaks_a_rule(outside: pytest.Pytester) -> None:
    """A driver that breaks E02 fails the E02 scenarios that check duplicates, on that driver only."""
    result = _run(
        outside, "--jobcore-driver", "broken=third_party_driver:broken_factory", "-k", "E02_live_key_holder",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_E02_live_key_holder_answers_duplicate[[]broken[]] FAILED*"])


def test_unknown_driver_name_is_a_usage_error(outside: pytest.Pytester) -> None:
    """Narrowing to a driver nobody registered stops the run with a usage error."""
    result = _run(outside, "--jobcore-drivers", "nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown jobcore drivers*nosuch*"])

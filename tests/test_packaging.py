"""The package users install: its name, what every install line says, and the wheel check."""

from __future__ import annotations

import importlib.util
import re
import sys
import zipfile
from pathlib import Path

import pytest
from jobcore.drivers.mongo import PYMONGO_FLOOR
from jobcore.drivers.postgres import PSYCOPG_FLOOR

ROOT = Path(__file__).resolve().parent.parent
DIST = "jobcore-queue"
# "pip install jobcore" or "pip install 'jobcore[postgres]'": the unrelated PyPI project.
WRONG_INSTALL = re.compile(r"pip install\s+['\"]?jobcore(?![-\w])")


def _load_check_wheel():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("check_wheel", ROOT / "tools" / "check_wheel.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _project_name() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(r'^name = "([^"]+)"$', text, re.M)
    assert match, "pyproject.toml has no [project] name"
    return match.group(1)


def test_the_distribution_is_jobcore_queue_and_the_import_stays_jobcore() -> None:
    assert _project_name() == DIST
    assert (ROOT / "jobcore" / "__init__.py").exists()
    assert 'jobcore = "jobcore.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_no_doc_or_fix_text_installs_the_unrelated_jobcore() -> None:
    """Every install line names the free distribution, in docs, README and fix texts."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "jobcore").rglob("*.py"),
             *(ROOT / "drivers").rglob("*.py")]
    wrong = [f"{path.relative_to(ROOT)}:{n}" for path in files
             for n, line in enumerate(path.read_text().splitlines(), 1) if WRONG_INSTALL.search(line)]
    assert wrong == []
    assert f"pip install {DIST}" in (ROOT / "README.md").read_text()


def test_py_typed_ships() -> None:
    assert (ROOT / "jobcore" / "py.typed").exists()
    assert re.search(r'jobcore = \[[^]]*"py.typed"', (ROOT / "pyproject.toml").read_text())


def test_the_wheel_check_refuses_a_wheel_missing_a_file(tmp_path: Path) -> None:
    """tools/check_wheel.py fails CI when a module or py.typed is left out of the wheel."""
    check_wheel = _load_check_wheel()
    wanted = sorted(check_wheel.expected_files())
    assert "jobcore/py.typed" in wanted
    assert "jobcore/drivers/postgres/__init__.py" in wanted
    assert "jobcore/parity/plugin.py" in wanted
    assert {"jobcore/cli/__init__.py", "jobcore/cli/__main__.py", "jobcore/cli/_store.py"} <= set(wanted)
    whole = tmp_path / "whole.whl"
    with zipfile.ZipFile(whole, "w") as archive:
        for name in wanted:
            archive.writestr(name, "")
    check_wheel.check_contents(whole)
    lacking = tmp_path / "lacking.whl"
    with zipfile.ZipFile(lacking, "w") as archive:
        for name in wanted:
            if name != "jobcore/py.typed":
                archive.writestr(name, "")
    with pytest.raises(SystemExit, match="lacks 1 file"):
        check_wheel.check_contents(lacking)
    stray = tmp_path / "stray.whl"
    with zipfile.ZipFile(stray, "w") as archive:
        for name in [*wanted, "drivers/__init__.py"]:
            archive.writestr(name, "")
    with pytest.raises(SystemExit, match="top-level"):
        check_wheel.check_contents(stray)


def test_tox_covers_python_310_to_313() -> None:
    envs = re.search(r"^env_list = (.+)$", (ROOT / "tox.ini").read_text(), re.M)
    assert envs
    assert {"py310", "py311", "py312", "py313", "wheel"} <= {e.strip() for e in envs.group(1).split(",")}
    assert sys.version_info >= (3, 10)


def test_every_package_folder_is_listed_in_pyproject() -> None:
    """A sub-package (``jobcore/cli/``...) left out of pyproject's ``packages`` would be missing from the wheel."""
    check_wheel = _load_check_wheel()
    text = (ROOT / "pyproject.toml").read_text()
    listed = set(re.findall(r'^    "([\w.]+)",$', text.split("packages = [", 1)[1].split("]", 1)[0], re.M))
    folders = {
        ".".join([target.replace("/", "."), *init.parent.relative_to(ROOT / folder).parts])
        for folder, target in check_wheel.INSTALLED_AS.items()
        for init in (ROOT / folder).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert "jobcore.cli" in folders
    assert folders - listed == set()


def test_the_wheel_check_covers_both_ends_of_the_promised_pythons() -> None:
    """check_wheel runs the wheel on the classifiers' oldest and newest Pythons, from requires-python up."""
    check_wheel = _load_check_wheel()
    versions = check_wheel.supported_pythons()
    floor = re.search(r'^requires-python = ">=(3\.\d+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert floor
    assert versions[0] == floor.group(1)
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))))
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = check_wheel.find_python(here)
    assert found is not None
    assert check_wheel.find_python("3.1") is None  # no such Python: passed over, or a CI failure


def test_the_floors_installed_on_the_oldest_python_are_the_ones_the_drivers_check() -> None:
    """pyproject's floors, as check_wheel pins them, agree with what the drivers refuse below."""
    pins = _load_check_wheel().floor_constraints()
    assert f"psycopg=={PSYCOPG_FLOOR}" in pins
    assert f"pymongo=={PYMONGO_FLOOR}" in pins
    assert {p.split("==")[0] for p in pins} >= {"attrs", "cronsim", "tzdata", "psycopg-pool"}

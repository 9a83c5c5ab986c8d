"""The mutation gate (tools/mutants.py) stays runnable: each mutant's snippet is in its file, once.

The gate itself takes minutes and runs by hand; a driver edit that moves a fenced line
would otherwise leave a mutant that no longer applies until someone runs it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mutants() -> tuple[Any, ...]:
    spec = importlib.util.spec_from_file_location("jobcore_tools_mutants", ROOT / "tools" / "mutants.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return tuple(module.MUTANTS)


MUTANTS = _mutants()


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_snippet_stands_once_in_its_file_and_the_mutant_changes_it(mutant: Any) -> None:
    text = (ROOT / mutant.file).read_text(encoding="utf-8")
    assert text.count(mutant.old) == 1, f"{mutant.name}: snippet found {text.count(mutant.old)} times in {mutant.file}"
    assert mutant.new != mutant.old


def test_mutant_names_are_unique() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)) >= 40

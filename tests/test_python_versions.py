"""Code that means the same on every Python the package promises (3.10 to 3.13).

CI's own venv is one Python; ``tools/check_wheel.py`` runs the wheel's memory suite on the
oldest and newest others. What differs between them where no memory scenario looks is checked
here, on the source, so it fails on any Python.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("jobcore", "drivers", "parity_tests", "fixtures", "tests", "bench", "tools")

# Calls whose timeout is not the builtin TimeoutError before Python 3.11: asyncio.wait_for raises
# asyncio.TimeoutError, a Future's result(timeout) concurrent.futures.TimeoutError.
_TIMED = {"wait_for", "result"}


def _calls_timed(nodes: list[ast.stmt]) -> bool:
    for node in nodes:
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            name = call.func.attr
            if name == "wait_for" and isinstance(call.func.value, ast.Name) and call.func.value.id == "asyncio":
                return True
            if name == "result" and (call.args or any(k.arg == "timeout" for k in call.keywords)):
                return True
    return False


def _names_builtin_timeout(node: ast.expr | None) -> bool:
    """``TimeoutError`` alone or in a tuple (``asyncio.TimeoutError`` is an attribute: fine)."""
    if node is None:
        return False
    if isinstance(node, ast.Tuple):
        return any(_names_builtin_timeout(n) for n in node.elts)
    return isinstance(node, ast.Name) and node.id == "TimeoutError"


def _suppresses_builtin_timeout(item: ast.withitem) -> bool:
    call = item.context_expr
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in {"suppress", "raises"} and any(_names_builtin_timeout(a) for a in call.args)


def builtin_timeout_catches(source: str) -> list[int]:
    """Lines where the builtin ``TimeoutError`` is caught around a timed asyncio or futures call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try) and _calls_timed(node.body):
            found += [h.lineno for h in node.handlers if _names_builtin_timeout(h.type)]
        elif isinstance(node, ast.With | ast.AsyncWith) and _calls_timed(node.body):
            found += [node.lineno for item in node.items if _suppresses_builtin_timeout(item)]
    return found


def test_the_check_finds_what_python_3_10_would_let_through() -> None:
    caught = builtin_timeout_catches(
        "async def f(pool, fut):\n"
        "    try:\n"
        "        await asyncio.wait_for(pool.get(), 1)\n"
        "    except TimeoutError:\n"
        "        pass\n"
        "    with contextlib.suppress(OSError, TimeoutError):\n"
        "        fut.result(timeout=1)\n"
        "    with pytest.raises(asyncio.TimeoutError):\n"
        "        await asyncio.wait_for(pool.get(), 1)\n"
        "    try:\n"
        "        sock.recv(1)\n"
        "    except TimeoutError:\n"  # socket.timeout is TimeoutError from 3.10: fine
        "        pass\n"
    )
    assert caught == [4, 6]


def test_no_timed_asyncio_or_futures_call_is_guarded_by_the_builtin_timeout_error() -> None:
    """Before 3.11 ``except TimeoutError`` does not catch ``asyncio.wait_for``'s timeout: a
    pool wait leaked a raw ``asyncio.TimeoutError`` instead of JC_DB_UNAVAILABLE on 3.10.
    Spell it ``asyncio.TimeoutError`` (the same class from 3.11)."""
    offending = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in builtin_timeout_catches(path.read_text(encoding="utf-8"))
    ]
    assert offending == []

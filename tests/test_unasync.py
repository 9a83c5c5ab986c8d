"""The sync flavour of every module written once as async is generated, never hand-kept.

``tools/unasync.py`` makes ``X.py`` from ``X_async.py`` (issue #18: one source for each
verb's checks, statements and fencing). A stale or hand-edited generated module fails here.
"""

from __future__ import annotations

import subprocess
import sys

from tools import unasync


def test_every_generated_module_matches_its_async_source() -> None:
    pairs = unasync.pairs()
    assert pairs, "no *_async.py source found"
    for source, target in pairs:
        wanted = unasync.unasync(source.read_text(encoding="utf-8"), source.name)
        assert target.read_text(encoding="utf-8") == wanted, f"{target} is stale: run python tools/unasync.py"


def test_the_check_command_agrees() -> None:
    done = subprocess.run(
        [sys.executable, "tools/unasync.py", "--check"], cwd=unasync.ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_transform_drops_async_renames_and_unwraps() -> None:
    source = '''"""See :class:`AsyncFrontDoor` and ``_jobs_async``."""
import asyncio  # sync: import time
from collections.abc import Awaitable, Callable

Move = Callable[[int], Awaitable[list[int]]]


class AsyncBox:
    async def __aenter__(self) -> AsyncBox:
        await asyncio.sleep(0)
        async with self.lock:
            got = [await self.read(i) for i in range(2)]
        return (await self.aclose())

    async def open_async(self) -> None:
        print("async only")  # sync: drop
'''
    made = unasync.unasync(source, "box_async.py")
    assert made.splitlines()[0].startswith("# Generated from box_async.py")
    body = made.split("\n", 1)[1]
    assert body == '''"""See :class:`FrontDoor` and ``_jobs``."""
import time
from collections.abc import Callable

Move = Callable[[int], list[int]]


class Box:
    def __enter__(self) -> Box:
        time.sleep(0)
        with self.lock:
            got = [self.read(i) for i in range(2)]
        return (self.close())

    def open(self) -> None:
'''


def test_the_sync_door_is_the_generated_one() -> None:
    from jobcore.door import FrontDoor, _jobs  # noqa: PLC0415

    assert FrontDoor.__module__ == "jobcore.door._jobs"
    assert _jobs.__file__ is not None
    with open(_jobs.__file__, encoding="utf-8") as f:
        assert f.readline().startswith("# Generated from _jobs_async.py")


def test_f_strings_are_renamed_on_every_python() -> None:
    # Python 3.12 and later split an f-string into tokens: its literal runs must be renamed as a
    # whole string is before 3.12, escaped braces included, and the names in braces as code.
    source = (
        'def name_async(self) -> str:\n'
        '    return f"AsyncBox({{AsyncLid}}) {self.open_async()!r} {len(x):>{w}} AsyncEnd"\n'
    )
    body = unasync.unasync(source, "box_async.py").split("\n", 1)[1]
    assert body == 'def name(self) -> str:\n    return f"Box({{Lid}}) {self.open()!r} {len(x):>{w}} End"\n'

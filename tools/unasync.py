"""Generate the sync flavour of every module written once as async (``X_async.py`` makes ``X.py``).

jobcore keeps one source for each verb's checks, statements and fencing: the async
flavour is written by hand and its sync twin is generated from it, as psycopg does
(its ``tools/async_to_sync.py``). The transform works on tokens, so the generated file
keeps the source's layout, comments and docstrings:

- ``async`` before ``def``/``with``/``for`` and every ``await`` go;
- names are renamed: ``AsyncFoo`` becomes ``Foo``, ``foo_async`` becomes ``foo``, and the
  few in :data:`RENAMES` (``__aenter__``, ``aclose``, ``asyncio.sleep``...) their sync
  counterparts; in strings and comments too, so docstrings name the sync classes;
- ``Awaitable[T]`` becomes ``T``, and ``Awaitable`` leaves the imports;
- a line ending in ``# sync: CODE`` becomes ``CODE`` (same indent); ``# sync: drop``
  drops it. That is the only way to say something different in the sync file.

    python tools/unasync.py          # rewrite every generated module
    python tools/unasync.py --check  # exit 1 if a committed one is stale (tests run this)
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("jobcore", "drivers")
HEADER = "# Generated from {source} by tools/unasync.py: edit that file, then run the tool.\n"

RENAMES = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "StopAsyncIteration": "StopIteration",
    "asyncio.sleep": "time.sleep",
}
"""Names (and dotted names) whose sync counterpart is not found by the two patterns."""

_ASYNC_CLASS = re.compile(r"\bAsync([A-Z]\w*)")
_ASYNC_SUFFIX = re.compile(r"\b(\w+?)_async\b")
_DIRECTIVE = re.compile(r"#\s*sync:\s*(.*)$")
_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", -1)
"""Before Python 3.12 an f-string is one ``STRING`` token, renamed whole."""


def _rename_text(text: str) -> str:
    """Rename in free text (strings, comments): the patterns and the plain-word renames."""
    text = _ASYNC_CLASS.sub(r"\1", text)
    text = _ASYNC_SUFFIX.sub(r"\1", text)
    for old, new in RENAMES.items():
        if new and "." not in old:
            text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def _rename_name(name: str) -> str:
    if RENAMES.get(name):
        return RENAMES[name]
    match = _ASYNC_CLASS.fullmatch(name)
    if match:
        return match.group(1)
    match = _ASYNC_SUFFIX.fullmatch(name)
    if match:
        return match.group(1)
    return name


def unasync(source: str, origin: str) -> str:
    """The sync module made from the async ``source`` (named ``origin`` in the header)."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    edits: list[tuple[int, int, str]] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for index, tok in enumerate(tokens):
        start, end = offset(tok.start), offset(tok.end)
        if tok.type == tokenize.NAME:
            nxt = tokens[index + 1] if index + 1 < len(tokens) else None
            if tok.string == "await" or (
                tok.string == "async" and nxt is not None and nxt.string in ("def", "with", "for")
            ):
                stop = end
                while stop < len(source) and source[stop] == " ":
                    stop += 1
                edits.append((start, stop, ""))
                continue
            if tok.string == "Awaitable":  # ``Awaitable[T]`` is ``T``; the import goes
                edits.extend(_unwrap_awaitable(tokens, index, offset, source))
                continue
            # dotted renames: ``asyncio.sleep`` as three tokens
            if nxt is not None and nxt.string == "." and index + 2 < len(tokens):
                dotted = f"{tok.string}.{tokens[index + 2].string}"
                if dotted in RENAMES:
                    edits.append((start, offset(tokens[index + 2].end), RENAMES[dotted]))
                    tokens[index + 2] = tokens[index + 2]._replace(type=tokenize.OP)  # consumed
                    continue
            renamed = _rename_name(tok.string)
            if renamed != tok.string:
                edits.append((start, end, renamed))
        elif tok.type == tokenize.STRING:
            renamed = _rename_text(tok.string)
            if renamed != tok.string:
                edits.append((start, end, renamed))
        elif tok.type == _FSTRING_MIDDLE:
            # Python 3.12+ splits an f-string into tokens: this is a run of its literal text. Its
            # own end is off where the text has ``{{`` or ``}}``; the next token's start is not.
            stop = offset(tokens[index + 1].start)
            literal = source[start:stop]
            renamed = _rename_text(literal)
            if renamed != literal:
                edits.append((start, stop, renamed))
        elif tok.type == tokenize.COMMENT:
            directive = _DIRECTIVE.search(tok.string)
            if directive:
                row = tok.start[0]
                line = lines[row - 1]
                indent = line[: len(line) - len(line.lstrip())]
                code = directive.group(1).strip()
                # the whole line is replaced: drop the edits already made on it
                line_start, line_end = starts[row - 1], starts[row]
                edits = [e for e in edits if not (line_start <= e[0] < line_end)]
                edits.append((line_start, line_end, "" if code == "drop" else f"{indent}{code}\n"))
                continue
            renamed = _rename_text(tok.string)
            if renamed != tok.string:
                edits.append((start, end, renamed))
    text = source
    taken_from = len(text) + 1
    for start, stop, new in sorted(edits, key=lambda e: e[0], reverse=True):
        if stop > taken_from:  # inside a replaced line
            continue
        text = text[:start] + new + text[stop:]
        taken_from = start
    return HEADER.format(source=origin) + text


def _unwrap_awaitable(
    tokens: list[tokenize.TokenInfo], index: int, offset: Callable[[tuple[int, int]], int], source: str
) -> list[tuple[int, int, str]]:
    """The edits that make ``Awaitable[T]`` read ``T``, or drop ``Awaitable`` (and its comma) from an import."""
    tok = tokens[index]
    start = offset(tok.start)
    nxt = tokens[index + 1]
    if nxt.string == "[":
        depth = 0
        for close in tokens[index + 1 :]:
            depth += {"[": 1, "]": -1}.get(close.string, 0) if close.type == tokenize.OP else 0
            if depth == 0:
                return [(start, offset(nxt.end), ""), (offset(close.start), offset(close.end), "")]
        raise ValueError(f"unbalanced Awaitable[ at line {tok.start[0]}")
    stop = offset(tok.end)
    if nxt.string == ",":
        stop = offset(nxt.end)
        while stop < len(source) and source[stop] in " \n":
            stop += 1
    return [(start, stop, "")]


def pairs() -> list[tuple[Path, Path]]:
    """Every ``(async source, sync target)`` in the trees."""
    found = []
    for tree in TREES:
        for source in sorted((ROOT / tree).rglob("?*_async.py")):
            found.append((source, source.with_name(source.name[: -len("_async.py")] + ".py")))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated module is stale")
    args = parser.parse_args(argv)
    stale = []
    for source, target in pairs():
        wanted = unasync(source.read_text(encoding="utf-8"), source.name)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == wanted:
            continue
        stale.append(target.relative_to(ROOT))
        if not args.check:
            target.write_text(wanted, encoding="utf-8")
    if args.check and stale:
        print("stale (run python tools/unasync.py):", *stale, sep="\n  ", file=sys.stderr)
        return 1
    for target in stale:
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

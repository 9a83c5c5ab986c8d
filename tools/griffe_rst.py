"""A griffe extension for the docs build: the reStructuredText habits of jobcore's docstrings, as Markdown.

jobcore's docstrings are written to read well in ``help()`` and in an editor, so they use
a few Sphinx conventions that mkdocstrings (which reads docstrings as Markdown) would
print raw. This extension rewrites, in every docstring of the loaded package:

* roles (``:class:`~jobcore.errors.InvalidInput```, ``:meth:`stop```) into autorefs links
  (``[`InvalidInput`][jobcore.errors.InvalidInput]``), resolving a relative name the way
  Sphinx does (from the citing object outwards to its module) and following imports to
  the defining module. A name that resolves to nothing is left as a link to itself, so
  ``mkdocs build --strict`` fails on it: a broken reference in a docstring breaks the
  build like a broken link in a page;
* the literal-block marker (a paragraph ending in ``::``) into a plain colon, the block
  itself being indented code already;
* doctest lines (``>>> ...`` and their output) into a ``pycon`` code block, instead of
  Markdown quotes.

Enabled in ``mkdocs.yml`` under the python handler's ``extensions``.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj|const):`(~?)([\w.]+)(?:\(\))?`")
LITERAL_MARKER = re.compile(r"^(?P<indent>[ \t]*)::[ \t]*$|(?<=\S)::[ \t]*$", flags=re.MULTILINE)
DOCTEST = re.compile(r"^(?P<indent>[ \t]*)>>> .*(?:\n(?P=indent)(?:>>> |\.\.\. |(?![ \t]*$)).*)*", flags=re.MULTILINE)


def _lookup(loader: griffe.GriffeLoader, path: str) -> str | None:
    try:
        found = loader.modules_collection[path]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    if isinstance(found, griffe.Alias):
        return found.target_path
    if found.is_attribute and found.docstring is None and found.parent is not None:
        # Rendered only in its class's "Attributes:" table, which has no anchor per row.
        return found.parent.path
    return found.path


def _resolve(loader: griffe.GriffeLoader, obj: griffe.Object, name: str) -> str | None:
    scope: griffe.Object | None = obj
    while scope is not None:  # innermost scope first, as Sphinx resolves a short name
        found = _lookup(loader, f"{scope.path}.{name}")
        if found is not None:
            return found
        scope = scope.parent
    return _lookup(loader, name)


def _literal_marker(match: re.Match[str]) -> str:
    return "" if match.group("indent") is not None else ":"


def _doctest(match: re.Match[str]) -> str:
    indent = match.group("indent")
    return f"{indent}```pycon\n{match.group(0)}\n{indent}```"


class RstToMarkdown(griffe.Extension):
    """Rewrite roles, literal markers and doctests in every docstring of the loaded package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        pending: list[griffe.Object] = [pkg]
        while pending:
            obj = pending.pop()
            pending.extend(m for m in obj.members.values() if not isinstance(m, griffe.Alias))
            if obj.docstring is not None:
                text = ROLE.sub(lambda m, o=obj: self._link(loader, o, m), obj.docstring.value)
                text = LITERAL_MARKER.sub(_literal_marker, text)
                obj.docstring.value = DOCTEST.sub(_doctest, text)

    @staticmethod
    def _link(loader: griffe.GriffeLoader, obj: griffe.Object, match: re.Match[str]) -> str:
        short, name = match.group(1), match.group(2)
        target = _resolve(loader, obj, name) or name
        text = name.rsplit(".", 1)[-1] if short else name
        return f"[`{text}`][{target}]"

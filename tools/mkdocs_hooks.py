"""mkdocs hooks for jobcore's site: links from a page to a repository file outside ``docs/``.

Pages such as ``docs/rules.md`` link to the scenarios that prove each rule
(``[test_C01_...](../parity_tests/test_claim.py)``). Those links work when the Markdown is
read in the repository, but the file is not part of the site, so mkdocs would report
them as broken. Before mkdocs checks a page, this hook rewrites each such link whose
target exists: into a link to the file in the repository when ``repo_url`` is set in
``mkdocs.yml``, else into plain text naming the file. A link to a repository file that
does not exist is left alone, so ``mkdocs build --strict`` still fails on it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

BRANCH = "main"  # the branch repository links point at
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<url>[^)\s]+)\)")


def _rewrite(match: re.Match[str], page_dir: Path, docs_dir: Path, root: Path, repo_url: str | None) -> str:
    url = match.group("url")
    if "://" in url or url.startswith(("#", "/", "mailto:")):
        return match.group(0)
    path, _, fragment = url.partition("#")
    target = Path(os.path.normpath(page_dir / path))
    if target.is_relative_to(docs_dir) or not target.is_relative_to(root) or not target.exists():
        return match.group(0)  # a page, or a broken link: mkdocs' own checks decide
    rel = target.relative_to(root).as_posix()
    text = match.group("text")
    if repo_url:
        anchor = f"#{fragment}" if fragment else ""
        return f"[{text}]({repo_url.rstrip('/')}/blob/{BRANCH}/{rel}{anchor})"
    return text if Path(rel).name in text else f"{text} (`{rel}`)"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """Rewrite links to repository files outside docs/ before mkdocs validates the page."""
    docs_dir = Path(os.path.abspath(config["docs_dir"]))
    root = Path(os.path.abspath(config["config_file_path"])).parent
    page_dir = (docs_dir / page.file.src_uri).parent
    repo_url = config.get("repo_url")
    return LINK.sub(lambda m: _rewrite(m, page_dir, docs_dir, root, repo_url), markdown)

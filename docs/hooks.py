"""mkdocs hooks: README.md is the site's home page and bench/README.md its benchmarks page.

Both live outside docs/ (GitHub shows them at the repository's top), so they are added as
generated pages, and links between the repository's Markdown files are rewritten to site
pages. A README link to a path that does not exist fails the build; one to a repository
path that is not a page (``deploy/``) keeps its text and loses the link.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
PAGES = {"README.md": "index.md", "bench/README.md": "benchmarks.md"}  # repository path -> site page
_LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)\s#]+)(#[^)\s]*)?\)")
_MARKER = re.compile(r"^<!--.*-->\n", re.MULTILINE)


def site_markdown(source: str, text: str) -> str:
    """``text`` of the repository file ``source`` with its relative links pointing at site pages."""
    base = (ROOT / source).parent

    def rewrite(match: re.Match[str]) -> str:
        target, anchor = match[1], match[2] or ""
        path = (base / target).resolve()
        if not path.exists():
            raise ValueError(f"{source} links to {target}, which does not exist")
        rel = path.relative_to(ROOT).as_posix()
        if rel in PAGES:
            return f"]({PAGES[rel]}{anchor})"
        if rel.startswith("docs/") and rel.endswith(".md"):
            return f"]({rel.removeprefix('docs/')}{anchor})"
        return f"](<{_REPO_ONLY}{rel}>)"

    return _LINK.sub(rewrite, text)


_REPO_ONLY = "repo:"  # a link mkdocs cannot follow: reduced to its text by on_page_markdown


def on_files(files: Files, config: Any) -> Files:
    for source, page in PAGES.items():
        files.append(File.generated(config, page, content=site_markdown(source, (ROOT / source).read_text())))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Pages under docs/ may link to repository files (``../bench/README.md``); point them at their pages."""
    src = page.file.src_uri
    if src not in PAGES.values():
        markdown = site_markdown(f"docs/{src}", markdown)
    return re.sub(r"\[([^\]]*)\]\(<" + _REPO_ONLY + r"[^>]*>\)", r"\1", markdown)

"""MkDocs hooks of the documentation site (mkdocs.yml): README.md is the home page and CHANGELOG.md the changelog,
each kept in one place at the repository's root and brought into the site as generated pages, with their links
rewritten to the site's layout; LICENSE and CITATION.cff, which they link to, are copied beside them. The links
are then checked like every page's (strict validation)."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}  # site page: its source at the root
COPIED = ("LICENSE", "CITATION.cff")  # root files the pages link to, served as they are
LINK = re.compile(r"(\]\()([^)#\s]+)")


def site_links(text: str) -> str:
    """A root page's relative links as the site lays it out: docs/X -> X, a root page -> its site page."""

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if "://" in target or target.startswith("mailto:"):
            return m.group(0)
        if target.startswith("docs/"):
            target = target.removeprefix("docs/")
        else:
            target = {src: page for page, src in PAGES.items()}.get(target, target)
        return m.group(1) + target

    return LINK.sub(fix, text)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for page, src in PAGES.items():
        files.append(File.generated(config, page, content=site_links((ROOT / src).read_text(encoding="utf-8"))))
    for name in COPIED:
        files.append(File.generated(config, name, abs_src_path=str(ROOT / name)))
    return files


def on_serve(server, config: MkDocsConfig, builder):  # noqa: ANN001 (mkdocs' livereload server)
    for src in (*PAGES.values(), *COPIED):
        server.watch(str(ROOT / src))
    return server

"""README.md stays a short front page, and what it points at exists.

The documentation lives in docs/ and is built by MkDocs (mkdocs.yml); `make test` builds it with
--strict, which checks the links between the pages. These tests check what that build does not read:
README.md itself, and the sections of it that docs/index.md includes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# [text](target) and [text](target "title"); images too.
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(text: str) -> list[str]:
    """The link targets of a Markdown text that lead into the repository (no URL, no bare anchor)."""
    without_code = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return [
        target
        for target in LINK.findall(without_code)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")
    ]


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub and MkDocs give a Markdown file's headings (they agree on plain headings)."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
        anchors.add(slug.replace(" ", "-"))
    return anchors


def test_the_readme_is_at_most_200_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail to a page under docs/"


def test_the_readme_links_somewhere():
    assert relative_links(README.read_text()), "README.md links no page of docs/"


@pytest.mark.parametrize("target", relative_links(README.read_text()))
def test_each_relative_link_in_the_readme_points_at_a_file_that_exists(target):
    path, _, anchor = target.partition("#")
    assert (ROOT / path).exists(), f"README.md links {target}, and {path} does not exist"
    if anchor and path.endswith(".md"):
        anchors = heading_anchors((ROOT / path).read_text())
        assert anchor in anchors, f"README.md links {target}, and {path} has no heading #{anchor}"


def test_every_docs_page_is_in_the_sites_navigation():
    navigation = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md"))
    missing = [page for page in pages if not re.search(rf":\s+{re.escape(page)}\s*$", navigation, re.M)]
    assert not missing, f"pages of docs/ not in mkdocs.yml's nav: {missing}"


def test_the_readme_sections_the_docs_include_are_marked_in_the_readme():
    readme = README.read_text()
    included = {
        name
        for page in DOCS.rglob("*.md")
        for name in re.findall(r'^--8<-- "README\.md:([\w-]+)"', page.read_text(), re.M)
    }
    assert included, "docs/index.md includes the README's pitch, commands and clients"
    for name in sorted(included):
        assert f"--8<-- [start:{name}]" in readme, f"README.md has no section {name!r} (start marker)"
        assert f"--8<-- [end:{name}]" in readme, f"README.md has no section {name!r} (end marker)"

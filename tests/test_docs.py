"""The documents stay true to the code and to themselves: every app setting is documented with
its environment variable, every relative link of README.md and docs/ reaches a file and heading
of this repository, and nothing points outside the repository or at a ticket number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from iris_consolidation import conf

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Settings without an environment variable (a dict of dotted paths).
NO_VARIABLE = {"JUDGE_CLIENTS"}


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of ``page``: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_app_setting_is_documented_with_its_variable() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    project = (ROOT / "project" / "settings.py").read_text()
    for name in conf.DEFAULTS:
        assert f"IRIS_CONSOLIDATION_{name}" in page, f"docs/configuration.md lacks IRIS_CONSOLIDATION_{name}"
        if name not in NO_VARIABLE:
            assert f'"{name}":' in project, f"project/settings.py does not read IRIS_CONSOLIDATION_{name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_reach_a_file_and_heading(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file() and ROOT in linked.parents, f"{page.name}: {target} is no file of the repository"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name}: {target} names no heading of {linked.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_reference_outside_the_repository_or_to_a_ticket(page: Path) -> None:
    text = page.read_text()
    assert "DESIGN.md" not in text
    assert not re.search(r"\bissues? \d+", text, flags=re.I), re.search(r".{40}\bissues? \d+.{20}", text, flags=re.I)

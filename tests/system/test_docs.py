"""The documentation holds together: every relative link reaches a file (and a heading, when it names one), every
developer tool is listed where developers look for it, and every dated result file is in the results table."""

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT


PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "scripts" / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "model_cards").glob("*.md"),
    ]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TOOLS = sorted(path.stem for path in (ROOT / "scripts").glob("*.py") if path.name != "__init__.py")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page):
    for target in links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.relative_to(ROOT)}: {target} does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.relative_to(ROOT)}: {target} names no heading of {linked.name}"


@pytest.mark.parametrize("page", ["scripts/README.md", "docs/development.md"])
def test_every_developer_tool_is_listed(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    missing = [
        tool
        for tool in TOOLS
        if f"scripts.{tool}" not in text and f"`{tool}`" not in text and tool + ".py" not in text
    ]
    assert not missing, f"{page} does not list {missing}"


def test_every_dated_result_file_is_in_the_results_table():
    results = ROOT / "docs" / "results"
    table = (results / "README.md").read_text(encoding="utf-8")
    for path in results.glob("20*.md"):
        assert f"]({path.name})" in table, f"docs/results/README.md does not list {path.name}"

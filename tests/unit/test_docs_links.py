"""Links between the docs land on a heading that exists (issue 19: figures live in
docs/benchmarks.md and the prose links to them, so a renamed heading must not strand a
link)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
LINK = re.compile(r"\]\(([a-z_]+\.md)?#([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    lines = page.read_text().splitlines()
    return {slug(line.lstrip("#")) for line in lines if re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_anchor_link_lands_on_a_heading(page: Path) -> None:
    broken = []
    for target, anchor in LINK.findall(page.read_text()):
        linked = DOCS / target if target else page
        if linked.exists() and anchor not in anchors(linked):
            broken.append(f"{target or page.name}#{anchor}")
    assert not broken, f"{page.name}: links to missing headings: {broken}"


def test_slug_follows_github() -> None:
    assert slug(" CLI start-up (`bench/bench_cli.py`)") == "cli-start-up-benchbench_clipy"
    assert slug(" 1a. Single-job enqueue: 8,816 jobs/s (target ≥ 5,000)") == (
        "1a-single-job-enqueue-8816-jobss-target--5000"
    )

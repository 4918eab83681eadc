"""The kit's documentation and its class agree: every test is listed, under one clause."""

from __future__ import annotations

import re
from pathlib import Path

from rdq_compliance import StorageSuite
from rdq_compliance.catalog import catalog, markdown

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "writing-a-backend.md"


def test_every_test_of_the_suite_belongs_to_exactly_one_clause() -> None:
    listed = [test for _, _, tests in catalog() for test in tests]
    assert len(listed) == len(set(listed)), "two clause groups define a test of the same name"
    suite = sorted(name for name in dir(StorageSuite) if name.startswith("test_"))
    assert sorted(listed) == suite


def test_the_backend_guide_lists_every_test_of_the_kit() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("<!-- catalog:start -->") + len("<!-- catalog:start -->")
    end = text.index("<!-- catalog:end -->")
    assert text[start:end].strip() == markdown().strip(), (
        "docs/writing-a-backend.md is out of date: paste `python -m rdq_compliance.catalog` "
        "between its catalog markers"
    )


CHANGELOG = GUIDE.parent / "backend-changelog.md"


def test_the_backend_changelog_names_every_clause_of_the_kit_once() -> None:
    """A clause added to (or removed from) the kit without an entry in the changelog for
    backend authors fails here: every clause is listed once, under the change that added
    it."""
    listed = re.findall(r"^- `(test_[a-z0-9_]+)`", CHANGELOG.read_text(encoding="utf-8"), re.M)
    assert len(listed) == len(set(listed)), "a clause is listed twice in the changelog"
    suite = {name for name in dir(StorageSuite) if name.startswith("test_")}
    unlisted = sorted(suite - set(listed))
    assert not unlisted, (
        "docs/backend-changelog.md does not list these kit clauses; add them to the entry of "
        f"the change that brings them: {unlisted}"
    )
    gone = sorted(set(listed) - suite)
    assert not gone, f"docs/backend-changelog.md lists clauses the kit no longer has: {gone}"

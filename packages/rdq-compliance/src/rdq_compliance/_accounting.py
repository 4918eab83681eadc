"""What the kit ran, per ``StorageSuite`` subclass — and a red session when it ran nothing.

A suite whose ``storage`` fixture skips (a test server missing, a fixture that depends on an
optional one) would otherwise skip every test and leave pytest green. This plugin counts, for each
subclass of :class:`~rdq_compliance.StorageSuite` in the session, the tests that passed, failed and
skipped (with their reasons); at the end it prints that account and fails the session when more than
half of a suite's tests (of at least ``MIN_TESTS`` selected) skipped. Clauses of capabilities or
contract versions the store does not implement are counted apart, as "not implemented", with what
the store therefore lacks. ``--rdq-allow-skipped-suites`` turns the failure into a warning line.

Under pytest-xdist the tests are collected and run by the workers, and only their reports
reach the session that prints the account: each kit test therefore carries its suite and the
store's contract version as user properties of its reports, and the account is kept from
those.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from rdq.spi import CONTRACT_VERSION
from rdq_compliance._gates import NOT_IMPLEMENTED

__all__ = ["MIN_TESTS", "UNPINNED", "KitAccounting"]

MIN_TESTS = 10
"""Selections smaller than this (``-k fencing``) are reported but never failed for skips."""

_SUITE = ("rdq_compliance.suite", "StorageSuite")
SUITE_PROPERTY = "rdq-kit-suite"
"""The user property naming a kit test's suite (``module::class``) on its reports."""
VERSION_PROPERTY = "rdq-kit-contract-version"
"""The user property of the contract version the store under test states."""
UNPINNED_PROPERTY = "rdq-kit-capabilities-unpinned"
"""The user property of a test that took the store's capabilities for the expected ones (its
suite defines no ``expected_capabilities``)."""
UNPINNED = (
    "capabilities not pinned: the suite defines no expected_capabilities fixture, so the kit "
    "takes what the store declares (a capability lost skips its clauses instead of failing)"
)


@dataclass
class _Account:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    not_implemented: int = 0
    """Skips for a capability or contract version the store does not implement."""
    reasons: Counter[str] = field(default_factory=Counter)
    lacking: Counter[str] = field(default_factory=Counter)
    contract_version: int | None = None
    unpinned: bool = False

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped + self.not_implemented

    def too_many_skipped(self) -> bool:
        """More than half of the clauses that apply to the store skipped."""
        applicable = self.passed + self.failed + self.skipped
        return applicable >= MIN_TESTS and self.skipped * 2 > applicable


def _is_suite(cls: type | None) -> bool:
    return cls is not None and any(
        (base.__module__, base.__qualname__) == _SUITE for base in cls.__mro__[1:]
    )


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class KitAccounting:
    """The pytest plugin (registered by ``rdq_compliance.pytest_plugin``)."""

    def __init__(self, allow_skips: bool) -> None:
        self.allow_skips = allow_skips
        self.suite_of: dict[str, str] = {}
        self.accounts: dict[str, _Account] = {}
        self.done: set[str] = set()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            cls = getattr(item, "cls", None)
            if _is_suite(cls):
                name = f"{item.module.__name__}::{cls.__qualname__}"  # type: ignore[attr-defined, union-attr]
                self.suite_of[item.nodeid] = name
                self.accounts.setdefault(name, _Account())
                item.user_properties.append((SUITE_PROPERTY, name))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        properties = dict(report.user_properties)
        suite = properties.get(SUITE_PROPERTY) or self.suite_of.get(report.nodeid)
        if not isinstance(suite, str) or report.nodeid in self.done:
            return
        account = self.accounts.setdefault(suite, _Account())
        version = properties.get(VERSION_PROPERTY)
        if isinstance(version, int):
            account.contract_version = version
        if properties.get(UNPINNED_PROPERTY):
            account.unpinned = True
        if report.skipped:
            reason = _reason(report)
            if reason.startswith(NOT_IMPLEMENTED):
                account.not_implemented += 1
                account.lacking[reason.removeprefix(NOT_IMPLEMENTED)] += 1
            else:
                account.skipped += 1
                account.reasons[reason] += 1
        elif report.failed:
            account.failed += 1
        elif report.when == "call":
            account.passed += 1
        else:
            return
        self.done.add(report.nodeid)

    def note_version(self, item: pytest.Item, version: int) -> None:
        """The contract version the store of ``item``'s suite states (on its reports)."""
        if item.nodeid in self.suite_of:
            item.user_properties.append((VERSION_PROPERTY, version))

    def note_unpinned(self, item: pytest.Item) -> None:
        """``item``'s suite defines no ``expected_capabilities`` (on its reports)."""
        if item.nodeid in self.suite_of:
            item.user_properties.append((UNPINNED_PROPERTY, True))

    def hollow_suites(self) -> list[str]:
        return [name for name, a in self.accounts.items() if a.too_many_skipped()]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.hollow_suites() and not self.allow_skips and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def summary_lines(self) -> list[tuple[str, bool]]:
        """The account, as ``(line, alarming)`` pairs."""
        lines: list[tuple[str, bool]] = []
        for name, a in self.accounts.items():
            counts = f"{a.passed} passed, {a.failed} failed, {a.skipped} skipped"
            if a.not_implemented:
                counts += f", {a.not_implemented} not implemented"
            lines.append((f"{name}: {counts}", False))
            if a.contract_version is not None:
                lines.append(
                    (
                        f"    implements contract version {a.contract_version} of "
                        f"{CONTRACT_VERSION}",
                        False,
                    )
                )
            if a.unpinned:
                lines.append((f"    {UNPINNED}", False))
            for reason, count in a.reasons.most_common():
                lines.append((f"    skipped {count}: {reason}", False))
            for reason, count in sorted(a.lacking.items()):
                lines.append((f"    not implemented ({count} clauses): {reason}", False))
        for name in self.hollow_suites():
            a = self.accounts[name]
            verdict = "allowed by --rdq-allow-skipped-suites" if self.allow_skips else "FAILED"
            lines.append(
                (
                    f"{name} skipped {a.skipped} of its {a.total - a.not_implemented} tests: "
                    f"the kit tested almost nothing ({verdict})",
                    not self.allow_skips,
                )
            )
        return lines

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.accounts:
            return
        terminalreporter.section("rdq compliance kit")
        for line, alarming in self.summary_lines():
            terminalreporter.write_line(line, red=alarming, bold=alarming)

"""The kit's pytest plugin, registered through the ``pytest11`` entry point.

- fixtures for real test servers: ``postgres_url``, ``redis_url`` and ``mongo_url`` are
  session-scoped (one server per test session, each test using its own queue names or
  database; see :mod:`rdq_compliance.servers`);
- the account of every ``StorageSuite`` run, which fails a session whose suite skipped most
  of its tests (see :mod:`rdq_compliance._accounting`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest

from rdq_compliance._accounting import KitAccounting
from rdq_compliance.servers import ServerUnavailable, in_ci


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("rdq").addoption(
        "--rdq-allow-skipped-suites",
        action="store_true",
        default=False,
        help="do not fail the session when a StorageSuite skipped most of its tests",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long-running tests (chaos, restarts)")
    config.addinivalue_line(
        "markers", "rdq_needs(capabilities, since): a kit clause's extra requirements"
    )
    allow = bool(config.getoption("rdq_allow_skipped_suites", default=False))
    config.pluginmanager.register(KitAccounting(allow), "rdq-kit-accounting")


def _serve(kind: str) -> Iterator[str]:
    try:
        module = importlib.import_module(f"rdq_compliance.servers.{kind}")
        manager = module.server_url()
        url = manager.__enter__()
    except (ServerUnavailable, ImportError) as exc:
        if in_ci():
            pytest.fail(f"no {kind} test server (CI never skips a backend): {exc}", pytrace=False)
        pytest.skip(f"no {kind} test server: {exc}")
    try:
        yield url
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a real PostgreSQL server for this test session."""
    yield from _serve("postgres")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis server for this test session."""
    yield from _serve("redis")


@pytest.fixture(scope="session")
def mongo_url() -> Iterator[str]:
    """URL of a real MongoDB-protocol server for this test session."""
    yield from _serve("mongo")

"""A kit run that tests (almost) nothing is red, and says why.

Each test runs pytest on a small generated module in a fresh process directory with
``pytester``, the way a backend author runs the kit.
"""

from __future__ import annotations

import pytest

# imported here, so each in-process run reuses them instead of importing them again
import rdq_compliance.suite  # noqa: F401
import rdq_memory  # noqa: F401

pytest_plugins = ["pytester"]

_HEADER = """
import pytest
import pytest_asyncio
from rdq import open_storage
from rdq_compliance import StorageSuite
from rdq_memory import MemoryStorage
"""

_INI = """
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
"""


def _run(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makeini(_INI)
    pytester.makepyfile(test_backend=_HEADER + body)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


SKIPPING_STORE = """
class TestStoreWithoutAServer(StorageSuite):
    @pytest_asyncio.fixture
    async def storage(self):
        pytest.skip("no test server on this machine")
        yield
"""


def test_a_suite_whose_storage_skips_fails_the_session_and_says_why(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, SKIPPING_STORE, "-k", "claim")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == 0 and outcomes["skipped"] > 20
    result.stdout.fnmatch_lines(
        [
            "*rdq compliance kit*",
            "*TestStoreWithoutAServer: 0 passed, 0 failed, * skipped",
            "*skipped *: no test server on this machine",
            "*TestStoreWithoutAServer skipped * of its * tests: the kit tested almost nothing*",
        ]
    )


def test_skips_can_be_allowed_explicitly_and_are_still_reported(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, SKIPPING_STORE, "-k", "claim", "--rdq-allow-skipped-suites")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*tested almost nothing (allowed by --rdq-allow-skipped-suites)"])


def test_the_storage_fixture_built_on_an_absent_storage_url_errors_instead_of_skipping(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        """
class TestStoreThatForgotItsUrl(StorageSuite):
    @pytest_asyncio.fixture
    async def storage(self, storage_url):
        async with open_storage(storage_url) as store:
            yield store
""",
        "-x",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes().get("errors", 0) >= 1
    result.stdout.fnmatch_lines(["*not a storage URL: None*"])


def test_a_suite_without_a_storage_fixture_errors_naming_it(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "\nclass TestNothing(StorageSuite):\n    pass\n", "-x")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*must define a `storage` fixture*"])


def test_a_small_selection_that_skips_is_reported_but_not_failed(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, SKIPPING_STORE, "-k", "fencing")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*TestStoreWithoutAServer: 0 passed, 0 failed, * skipped"])


WORKING_STORE = """
class TestWorkingStore(StorageSuite):
    @pytest_asyncio.fixture
    async def storage(self):
        async with open_storage("memory://") as store:
            await store.migrate()
            yield store

    @pytest.fixture
    def peer_storage_url(self):
        return None
"""


def test_under_xdist_the_account_is_kept_from_the_workers_reports(
    pytester: pytest.Pytester,
) -> None:
    """With ``-n 2`` the tests run in worker processes: the account, the contract version
    and the red verdict of a suite that skipped are the same as in one process."""
    pytester.makeini(_INI)
    pytester.makepyfile(test_backend=_HEADER + SKIPPING_STORE + WORKING_STORE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "-k", "claim and not corrupt"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines_random(
        [
            "*TestStoreWithoutAServer: 0 passed, 0 failed, * skipped",
            "*TestWorkingStore: * passed, 0 failed, * skipped",
            "*implements contract version * of *",
            "*TestStoreWithoutAServer skipped * of its * tests: the kit tested almost nothing*",
        ]
    )
    assert "TestWorkingStore skipped" not in result.stdout.str()

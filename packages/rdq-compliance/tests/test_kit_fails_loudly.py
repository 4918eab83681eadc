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

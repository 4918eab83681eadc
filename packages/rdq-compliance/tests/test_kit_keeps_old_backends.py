"""A backend written for an earlier contract keeps working with this release: it imports, the
engine adapts to it, and the kit runs every clause of its version and reports the newer ones
as "not implemented" skips that name the capability or version it lacks.

The kit runs in a nested pytest session over a generated module with one ``StorageSuite``
subclass per old backend (``kit_old_contract``), like a third party's ``test_kit.py``, and one
for the backend written before the contract had versions (``kit_before_versions``), installed
as a plugin of its own scheme and tested with the guide's test class of that time: a
``storage_url``, a ``storage`` opened from it, nothing else.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import rdq
from rdq.errors import Unsupported
from rdq.plugins import reload_plugins
from rdq.spi import (
    CONTRACT_VERSION,
    FEATURES,
    Attempt,
    Completion,
    Envelope,
    Outcome,
    Status,
    adapt,
)
from rdq_compliance._accounting import UNPINNED
from rdq_compliance._gates import NOT_IMPLEMENTED
from rdq_compliance.suite import StorageSuite

HERE = Path(__file__).parent
MODULE = "test_generated_old_backends.py"
STORES = ("VersionOneStore", "BareVersionOneStore")

_spec = importlib.util.spec_from_file_location("kit_old_contract", HERE / "kit_old_contract.py")
assert _spec is not None and _spec.loader is not None
old = importlib.util.module_from_spec(_spec)
sys.modules["kit_old_contract"] = old
_spec.loader.exec_module(old)

_SUITE = """
class Test{name}(StorageSuite):
    stateful_derandomize = True

    @pytest_asyncio.fixture
    async def storage(self):
        async with adapt({name}()) as store:
            yield store

    @pytest.fixture
    def expected_capabilities(self):
        return VERSION_1_CAPABILITIES
"""

BEFORE_VERSIONS = "BeforeVersionsStore"
_SUITE_BEFORE_VERSIONS = """
class TestBeforeVersionsStore(StorageSuite):
    # the guide's test class before contract versions: no expected_capabilities, no
    # corrupt_task, nothing but the URL and the store

    @pytest.fixture
    def storage_url(self):
        return {url!r}

    @pytest_asyncio.fixture
    async def storage(self, storage_url):
        async with open_storage(storage_url) as store:
            await store.migrate()
            yield store
"""

VERSION_2_FLAGS = {name for name, feature in FEATURES.items() if feature.since == 2}


class Outcomes:
    """Each test's outcome and skip reason, by node id."""

    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}
        self.reason: dict[str, str] = {}
        self.details: dict[str, str] = {}
        self.summary: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.outcome[report.nodeid] = "failed"
            self.details[report.nodeid] = report.longreprtext[-2000:]
        elif report.skipped:
            self.outcome[report.nodeid] = "skipped"
            longrepr = report.longrepr
            if isinstance(longrepr, tuple):
                self.reason[report.nodeid] = str(longrepr[2]).removeprefix("Skipped: ")
        elif report.when == "call":
            self.outcome.setdefault(report.nodeid, "passed")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        kit = terminalreporter.config.pluginmanager.get_plugin("rdq-kit-accounting")
        self.summary = [line for line, _ in kit.summary_lines()] if kit is not None else []


@pytest.fixture(scope="module")
def before_versions_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A URL of the backend of ``kit_before_versions``, its plugin installed for this process
    and the processes it starts (the chaos test's workers): a distribution's metadata with its
    ``rdq.storage`` entry point, on ``sys.path`` and ``PYTHONPATH``."""
    site = tmp_path_factory.mktemp("site")
    info = site / "kit_before_versions-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kit-before-versions\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[rdq.storage]\nbeforeversions = kit_before_versions\n", encoding="utf-8"
    )
    paths = [str(site), str(HERE)]
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *([saved_env] if saved_env else [])])
    importlib.invalidate_caches()
    reload_plugins()
    try:
        database = tmp_path_factory.mktemp("before-versions") / "kit.db"
        yield f"beforeversions:///{database}"
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env
        reload_plugins()


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory: pytest.TempPathFactory, before_versions_url: str) -> Outcomes:
    workdir = tmp_path_factory.mktemp("old-backends")
    source = [
        "import pytest",
        "import pytest_asyncio",
        "from rdq import open_storage",
        "from rdq.spi import adapt",
        "from rdq_compliance import StorageSuite",
        f"from kit_old_contract import VERSION_1_CAPABILITIES, {', '.join(STORES)}",
        *(_SUITE.format(name=name) for name in STORES),
        _SUITE_BEFORE_VERSIONS.format(url=before_versions_url),
    ]
    (workdir / MODULE).write_text("\n".join(source))
    (workdir / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
    )
    outcomes = Outcomes()
    pytest.main(
        ["-q", "-p", "no:cacheprovider", "--rootdir", str(workdir), str(workdir / MODULE)],
        plugins=[outcomes],
    )
    return outcomes


def _tests() -> list[str]:
    return sorted(name for name in dir(StorageSuite) if name.startswith("test_"))


@pytest.mark.parametrize("store", STORES)
def test_an_old_backend_passes_every_clause_of_its_version(kit_run: Outcomes, store: str) -> None:
    nodes = {n: o for n, o in kit_run.outcome.items() if f"::Test{store}::" in n}
    failed = {n: kit_run.details[n] for n, o in nodes.items() if o == "failed"}
    assert not failed, f"{store} failed clauses of its own version: {failed}"
    passed = [n for n, o in nodes.items() if o == "passed"]
    assert len(passed) >= 120, f"only {len(passed)} clauses ran for {store}"
    for test in (
        "test_no_double_claim_under_concurrent_claimants",
        "test_now_is_the_clock_the_store_claims_and_resolves_by",
    ):
        node = next((n for n in nodes if n.endswith(f"::{test}")), None)
        assert node is None or nodes[node] == "passed", f"{store}: {test} {nodes.get(node)}"


@pytest.mark.parametrize("store", STORES)
def test_each_newer_clause_skips_naming_the_capability_or_version_it_lacks(
    kit_run: Outcomes, store: str
) -> None:
    skipped = {
        n.rsplit("::", 1)[1]: kit_run.reason.get(n, "")
        for n, o in kit_run.outcome.items()
        if f"::Test{store}::" in n and o == "skipped"
    }
    not_implemented = {t: r for t, r in skipped.items() if r.startswith("not implemented: ")}
    others = {t: r for t, r in skipped.items() if t not in not_implemented}
    # what a store without storage_url or corrupt_task skips, and nothing else
    assert all("storage_url" in r for r in others.values()), others
    named = {flag for flag in VERSION_2_FLAGS for r in not_implemented.values() if f"'{flag}'" in r}
    # version 1 had none of these: every one must show up as the reason of some skip
    lacking = {"priorities", "claim_holder", "cancel", "task_listing", "import_tasks", "audit"}
    assert lacking <= named, f"never named as missing: {lacking - named}"
    assert "test_cancel_makes_a_pending_task_cancelled_and_it_is_never_claimed" in not_implemented
    assert (
        "'cancel'"
        in not_implemented["test_cancel_makes_a_pending_task_cancelled_and_it_is_never_claimed"]
    )
    version_skips = [r for r in not_implemented.values() if "contract version 2 (the store" in r]
    assert version_skips, "the version-2 behaviours (lifecycle, corrupt tasks) must skip"


def test_a_backend_written_before_versions_passes_with_capability_skips_only(
    kit_run: Outcomes,
) -> None:
    """Public overrides and the guide's test class of that time: every clause of version 1
    passes (the chaos test across processes, the clauses later added to ``enqueue``, which
    hold through the template, the capabilities taken as declared); every other skips as
    not implemented."""
    nodes = {n: o for n, o in kit_run.outcome.items() if f"::Test{BEFORE_VERSIONS}::" in n}
    failed = {n: kit_run.details[n] for n, o in nodes.items() if o == "failed"}
    assert not failed, f"the backend written before versions failed: {failed}"
    skipped = {n: kit_run.reason.get(n, "") for n, o in nodes.items() if o == "skipped"}
    others = {n: r for n, r in skipped.items() if not r.startswith(NOT_IMPLEMENTED)}
    assert not others, f"skips that are not capability or version skips: {others}"
    for test in (
        "test_chaos_kill9_worker_mid_handler_is_recovered_without_double_claims",
        "test_enqueue_sets_the_fields_the_store_owns",
        "test_enqueue_with_a_negative_or_too_long_delay_raises_validation_error",
        "test_capabilities_are_exactly_the_ones_the_backend_declares",
        "test_no_double_claim_across_separate_connections",
        "test_no_double_claim_under_concurrent_claimants",
    ):
        ran = {n: o for n, o in nodes.items() if n.endswith(f"::{test}")}
        assert ran and set(ran.values()) == {"passed"}, f"{test}: {ran}"
    passed = [n for n, o in nodes.items() if o == "passed"]
    assert len(passed) >= 120, f"only {len(passed)} clauses ran"
    assert any(UNPINNED in line for line in kit_run.summary), "the account says nothing pinned"


def test_the_summary_says_which_features_the_backend_lacks(kit_run: Outcomes) -> None:
    text = "\n".join(kit_run.summary)
    assert "not implemented" in text
    assert "cancel" in text and FEATURES["cancel"].without in text
    assert f"contract version 1 of {CONTRACT_VERSION}" in text


@pytest.mark.asyncio
async def test_the_engine_refuses_what_an_old_backend_lacks_and_runs_the_rest() -> None:
    store = adapt(old.BareVersionOneStore())
    async with store:
        client = rdq.Client(store)
        submitted = await client.submit("job", {"n": 1}, queue="q")
        assert (await store.get(submitted.id)).status == Status.PENDING
        assert (await store.now()).tzinfo is not None  # the default, through a probe task
        with pytest.raises(Unsupported) as caught:
            await store.cancel("q", [submitted.id])
        assert caught.value.capability == "cancel" and "BareVersionOneStore" in str(caught.value)
        with pytest.raises(Unsupported, match="priorities"):
            await client.submit("job", None, queue="q", priority=5)


@pytest.mark.asyncio
async def test_an_old_backend_completes_as_it_always_did_and_refuses_a_discard() -> None:
    """A bare store of version 1 takes no ``discard``: a plain completion reaches it as
    before (one and many), a discarding one is refused naming the capability, unchanged."""
    store = adapt(old.BareVersionOneStore())
    async with store:
        for n in range(3):
            await store.enqueue(Envelope(id=f"old-{n}", queue="q", handler_ref="job"))
        kept, many, left = await store.claim_due("q", 3, timedelta(minutes=5))
        done = Attempt(number=1, outcome=Outcome.SUCCEEDED)
        await store.complete(kept.task.id, kept.token, done)
        assert await store.complete_many([Completion(many.task.id, many.token, done)]) == [None]
        with pytest.raises(Unsupported) as caught:
            await store.complete(left.task.id, left.token, done, discard=True)
        assert caught.value.capability == "discard_succeeded"
        with pytest.raises(Unsupported, match="discard_succeeded"):
            await store.complete_many([Completion(left.task.id, left.token, done, True)])
        assert (await store.get(left.task.id)).status == Status.IN_FLIGHT
        assert {(await store.get(c.task.id)).status for c in (kept, many)} == {Status.SUCCEEDED}

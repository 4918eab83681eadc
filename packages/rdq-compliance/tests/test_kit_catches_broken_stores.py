"""The kit tested itself: every deliberately broken store fails the kit on the test named for
the clause it breaks, and the intact reference store passes those same tests.

The kit runs in a nested pytest session (in this process) over a generated test module with
one ``StorageSuite`` subclass per store, restricted to the named tests.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rdq_compliance.clauses.corrupt import CorruptTaskClauses
from rdq_compliance.suite import CLAUSES

HERE = Path(__file__).parent
MODULE = "test_generated_broken_suites.py"


BROKEN_MODULES = (
    "kit_broken_stores",
    "kit_broken_revision",
    "kit_broken_leases",
    "kit_broken_promises",
    "kit_broken_flow",
    "kit_broken_order",
    "kit_broken_payloads",
    "kit_broken_scope",
    "kit_broken_controls",
    "kit_broken_changes",
    "kit_broken_fleet",
    "kit_broken_retention",
    "kit_broken_dedup",
    "kit_broken_payload_refs",
    "kit_broken_discard",
)
"""The modules beside this file that hold broken stores (``BROKEN_STORES`` in each)."""


def _import_beside(name: str) -> ModuleType:
    """Import a module beside this file under its own name (the generated module imports
    it too); tests are imported with --import-mode=importlib."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from {HERE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


BROKEN_STORES: dict[type, list[str]] = {}
for _name in BROKEN_MODULES:
    BROKEN_STORES |= _import_beside(_name).BROKEN_STORES

_SUITE = """
class Test{name}(StorageSuite):
    stateful_derandomize = True
    stateful_shrink = False

    @pytest_asyncio.fixture
    async def storage(self):
        async with {name}() as store:
            yield store

    @pytest.fixture
    def corrupt_task(self, storage):
        return functools.partial(put_corrupt_task, storage)

    @pytest.fixture
    def expected_capabilities(self):
        return MemoryStorage().capabilities()

    @pytest.fixture
    def open_peer_storage(self):
        url = f"memory://kit-broken-{{uuid.uuid4().hex}}"

        def opener(**options):
            query = "&".join(f"{{k}}={{v}}" for k, v in options.items())
            return {name}.from_url(url + ("?" + query if query else ""))

        return opener
"""


SLIPS = ("AttributeError", "NameError", "TypeError", "UnboundLocalError")
"""Errors that say a broken store's own code is wrong, whatever clause it was meant to break."""


class Outcomes:
    """A pytest plugin recording each test's outcome (and failure text) by node id."""

    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}
        self.details: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.outcome[report.nodeid] = "failed" if report.when == "call" else "error"
            self.details[report.nodeid] = report.longreprtext[-3000:]
        elif report.skipped:
            self.outcome[report.nodeid] = "skipped"
        elif report.when == "call":
            self.outcome.setdefault(report.nodeid, "passed")


WITHOUT_HOOK = "WithoutTheCorruptTaskFixture"
_WITHOUT_HOOK = f"""
class Test{WITHOUT_HOOK}(StorageSuite):
    @pytest_asyncio.fixture
    async def storage(self):
        async with MemoryStorage() as store:
            yield store
"""
CORRUPT_TESTS = [name for name in vars(CorruptTaskClauses) if name.startswith("test_")]


def _node(store: str, test: str) -> str:
    return f"{MODULE}::Test{store}::{test}"


def _selected() -> list[str]:
    nodes = []
    for store, tests in BROKEN_STORES.items():
        for test in tests:
            nodes.append(_node(store.__name__, test))
            nodes.append(_node("MemoryStorage", test))
    return list(dict.fromkeys(nodes))


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Run the named tests of the kit once against every broken store and the intact one."""
    workdir = tmp_path_factory.mktemp("broken-suites")
    names = ["MemoryStorage", *(store.__name__ for store in BROKEN_STORES)]
    imports = [f"from {store.__module__} import {store.__name__}" for store in BROKEN_STORES]
    source = [
        "import functools",
        "import uuid",
        "import pytest",
        "import pytest_asyncio",
        "from rdq_compliance import StorageSuite",
        "from rdq_memory import MemoryStorage",
        "from rdq_memory.testing import put_corrupt_task",
        *imports,
        *(_SUITE.format(name=name) for name in names),
        _WITHOUT_HOOK,
    ]
    (workdir / MODULE).write_text("\n".join(source))
    (workdir / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
    )
    outcomes = Outcomes()
    pytest.main(
        [
            "-q",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
            "--rootdir",
            str(workdir),
            "-c",
            str(workdir / "pytest.ini"),
            *(str(workdir / node) for node in _selected()),
            *(str(workdir / _node(WITHOUT_HOOK, test)) for test in CORRUPT_TESTS),
        ],
        plugins=[outcomes],
    )
    return outcomes


def _cases(kit_run: Outcomes, node: str) -> dict[str, str]:
    """The outcome of ``node``, or of each of its cases for a parametrized test."""
    return {n: o for n, o in kit_run.outcome.items() if n == node or n.startswith(node + "[")}


@pytest.mark.parametrize(
    ("store", "test"),
    [(store.__name__, test) for store, tests in BROKEN_STORES.items() for test in tests],
)
def test_the_kit_fails_the_broken_store_on_the_named_clause(
    kit_run: Outcomes, store: str, test: str
) -> None:
    node = _node(store, test)
    cases = _cases(kit_run, node)
    failed = [n for n, o in cases.items() if o == "failed"]
    assert failed, f"{store} should fail {test}, but it {sorted(set(cases.values())) or 'not run'}"
    # failed on the promise it breaks, not on a slip of the broken store's own code
    for case in failed:
        slip = next((e for e in SLIPS if f"{e}:" in kit_run.details.get(case, "")), None)
        assert slip is None, (
            f"{store} fails {case} with a {slip} of its own:\n{kit_run.details[case]}"
        )


@pytest.mark.parametrize("test", sorted({t for tests in BROKEN_STORES.values() for t in tests}))
def test_the_intact_reference_store_passes_the_same_clause(kit_run: Outcomes, test: str) -> None:
    node = _node("MemoryStorage", test)
    cases = _cases(kit_run, node)
    assert cases, f"{test}: not run"
    for case, outcome in cases.items():
        assert outcome == "passed", f"{case}: {outcome}\n{kit_run.details.get(case, '')}"


@pytest.mark.parametrize("test", CORRUPT_TESTS)
def test_a_suite_without_the_corrupt_task_fixture_fails_those_clauses_naming_it(
    kit_run: Outcomes, test: str
) -> None:
    node = _node(WITHOUT_HOOK, test)
    ran = [n for n in kit_run.outcome if n == node or n.startswith(node + "[")]  # each case
    assert ran, f"{test} did not run"
    for run in ran:
        assert kit_run.outcome[run] == "error", f"{run}: {kit_run.outcome[run]}"
        assert "must define a `corrupt_task` fixture" in kit_run.details[run]


GROWN = [clause for clause in CLAUSES if getattr(clause, "since", 1) >= 3]
"""The clause groups of contract versions 3 and 4 (flow control, the fleet, the claim order)."""


def test_every_clause_of_contracts_3_and_4_has_a_broken_store_it_catches() -> None:
    """Each clause of what contracts 3 and 4 added is named by a broken store above (and the
    test above proves the clause fails it)."""
    named = {test for tests in BROKEN_STORES.values() for test in tests}
    unnamed = sorted(
        f"{clause.__name__}.{test}"
        for clause in GROWN
        for test in vars(clause)
        if test.startswith("test_") and test not in named
    )
    assert not unnamed, f"clauses no broken store proves: {unnamed}"

"""The rdq storage compliance kit.

A backend runs the whole kit from one test module by subclassing :class:`StorageSuite` and
providing a ``storage`` fixture (see its docstring). :func:`run_contract_machine` runs the
Hypothesis state machine alone; :mod:`rdq_compliance.catalog` lists every test by clause.

The names are imported on first use: the package also hosts the test-server pytest plugin,
which every pytest session loads.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

# The clauses are assertions: under pytest (which loads this package through its plugin before
# any clause), let it explain them like those of a test module. Outside pytest, importing
# pytest is only start-up time: the chaos test's worker processes, started again and again,
# import this package.
if "pytest" in sys.modules:
    sys.modules["pytest"].register_assert_rewrite(
        "rdq_compliance.clauses",
        "rdq_compliance._support",
        "rdq_compliance._flow_support",
        "rdq_compliance.stateful",
        "rdq_compliance._machine_base",
        "rdq_compliance.model",
    )

if TYPE_CHECKING:
    from rdq_compliance._fixtures import CorruptTaskWriter, StorageOpener
    from rdq_compliance.stateful import ContractMachine, run_contract_machine
    from rdq_compliance.suite import StorageSuite

__all__ = [
    "ContractMachine",
    "CorruptTaskWriter",
    "StorageOpener",
    "StorageSuite",
    "run_contract_machine",
]

_HOMES = {
    "CorruptTaskWriter": "rdq_compliance._fixtures",
    "StorageOpener": "rdq_compliance._fixtures",
    "ContractMachine": "rdq_compliance.stateful",
    "run_contract_machine": "rdq_compliance.stateful",
    "StorageSuite": "rdq_compliance.suite",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rdq_compliance' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)

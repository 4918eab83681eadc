"""``StorageSuite``: the whole compliance kit as one class to subclass."""

from __future__ import annotations

from rdq_compliance._fixtures import SuiteFixtures
from rdq_compliance.clauses.admission import AdmissionClauses
from rdq_compliance.clauses.aging import AgingClauses
from rdq_compliance.clauses.audit import AuditClauses
from rdq_compliance.clauses.cancel import CancelClauses
from rdq_compliance.clauses.capabilities import CapabilityClauses
from rdq_compliance.clauses.claim_holder import ClaimHolderClauses
from rdq_compliance.clauses.claiming import ClaimingClauses
from rdq_compliance.clauses.control import ControlClauses
from rdq_compliance.clauses.control_changes import ControlChangeClauses
from rdq_compliance.clauses.control_leases import ControlLeaseClauses
from rdq_compliance.clauses.control_scope import ControlScopeClauses
from rdq_compliance.clauses.corrupt import CorruptTaskClauses
from rdq_compliance.clauses.crash import CrashClauses
from rdq_compliance.clauses.dedup import DedupClauses
from rdq_compliance.clauses.discard import DiscardClauses
from rdq_compliance.clauses.dlq import DLQClauses, DLQFilterClauses
from rdq_compliance.clauses.due_earlier import DueEarlierClauses
from rdq_compliance.clauses.fairness import FairShareClauses
from rdq_compliance.clauses.fencing import FencingClauses
from rdq_compliance.clauses.fleet import CountClauses, WorkerRegistryClauses
from rdq_compliance.clauses.groups import DLQGroupClauses
from rdq_compliance.clauses.imports import ImportClauses
from rdq_compliance.clauses.lifecycle import ClockClauses, LifecycleClauses
from rdq_compliance.clauses.listing import TaskListingClauses
from rdq_compliance.clauses.operations import OperationClauses
from rdq_compliance.clauses.payload_refs import PayloadRefClauses
from rdq_compliance.clauses.priority import PriorityClauses
from rdq_compliance.clauses.recovery import RecoveryClauses
from rdq_compliance.clauses.redrive_purge import RedrivePurgeClauses
from rdq_compliance.clauses.retention import RetentionClauses
from rdq_compliance.clauses.retry_now import RetryNowClauses
from rdq_compliance.clauses.roundtrip import RoundTripClauses
from rdq_compliance.clauses.stateful import StatefulClauses
from rdq_compliance.clauses.transitions import TransitionClauses
from rdq_compliance.clauses.validation import ValidationClauses

__all__ = ["CLAUSES", "StorageSuite"]


class StorageSuite(
    ClaimingClauses,
    PriorityClauses,
    DueEarlierClauses,
    ClaimHolderClauses,
    FencingClauses,
    RecoveryClauses,
    TransitionClauses,
    AdmissionClauses,
    DedupClauses,
    RoundTripClauses,
    RedrivePurgeClauses,
    CancelClauses,
    RetentionClauses,
    DiscardClauses,
    PayloadRefClauses,
    DLQClauses,
    DLQFilterClauses,
    DLQGroupClauses,
    TaskListingClauses,
    ImportClauses,
    AuditClauses,
    ControlClauses,
    ControlScopeClauses,
    ControlLeaseClauses,
    ControlChangeClauses,
    RetryNowClauses,
    FairShareClauses,
    AgingClauses,
    WorkerRegistryClauses,
    CountClauses,
    OperationClauses,
    ClockClauses,
    LifecycleClauses,
    CorruptTaskClauses,
    ValidationClauses,
    CapabilityClauses,
    StatefulClauses,
    CrashClauses,
    SuiteFixtures,
):
    """The rdq storage compliance kit. Subclass it in a test module and provide fixtures::

        from rdq import open_storage
        from rdq_compliance import StorageSuite

        class TestMyStore(StorageSuite):
            @pytest.fixture
            def storage_url(self, my_server):     # optional: enables cross-process tests
                return my_server.url

            @pytest_asyncio.fixture
            async def storage(self, storage_url):  # required
                async with open_storage(storage_url) as store:
                    await store.migrate()
                    yield store

    ``storage`` yields a connected, migrated store; it may hold other tests' data, since every
    test uses its own queue names and ids. Without ``storage_url`` the cross-connection and
    chaos tests skip, saying so. ``peer_storage_url`` (default: ``storage_url``) is what the
    cross-connection test opens in other threads of this process.

    Every test is named for the clause it checks; a test that needs a capability the store
    does not advertise skips with the capability's name. Override a test in the subclass to
    adapt it, as with any pytest class.
    """


CLAUSES: tuple[type, ...] = tuple(
    base for base in StorageSuite.__bases__ if base is not SuiteFixtures
)
"""The clause groups, in the order the documentation lists them (the suite's bases)."""

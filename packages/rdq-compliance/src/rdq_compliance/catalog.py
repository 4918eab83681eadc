"""Every test of the kit, grouped by the clause it checks, for documentation.

``python -m rdq_compliance.catalog`` prints the list as Markdown (the "Every test of the kit"
section of ``docs/writing-a-backend.md`` is this output).
"""

from __future__ import annotations

import inspect

from rdq_compliance.suite import CLAUSES

__all__ = ["TITLES", "Clause", "cases", "catalog", "markdown"]

Clause = tuple[str, str, list[str]]
"""(group title, what the group promises, its test names in source order)."""


TITLES = {
    "ClaimingClauses": "No double claim; due-ness by the storage clock; claim order",
    "PriorityClauses": "Priorities",
    "DueEarlierClauses": "A task made due before the tasks claims already took",
    "ClaimHolderClauses": "The claim holder and the LEASE_EXPIRED record",
    "FencingClauses": "Fencing",
    "RecoveryClauses": "Lease recovery counts",
    "TransitionClauses": "Atomic transitions",
    "AdmissionClauses": "Idempotent enqueue and IDConflict",
    "DedupClauses": "Dedup keys: admit (capability dedup)",
    "RoundTripClauses": "Lossless envelope round-trip",
    "RedrivePurgeClauses": "Redrive resets, history persists; purge",
    "CancelClauses": "Cancel",
    "RetentionClauses": "Retention: expire_tasks (capability retention)",
    "DiscardClauses": "Discarding succeeded tasks: complete with discard "
    "(capability discard_succeeded)",
    "PayloadRefClauses": "Payload references: held_payload_refs (capability payload_refs)",
    "DLQClauses": "Stable DLQ pagination",
    "DLQFilterClauses": "DLQ filters (capability filter_pushdown)",
    "DLQGroupClauses": "DLQ groups",
    "TaskListingClauses": "Every task findable: list_tasks and list_queues",
    "ImportClauses": "Import",
    "AuditClauses": "The audit trail",
    "ControlClauses": "Control records: pauses, gates, limits (capability control)",
    "ControlScopeClauses": "Whose a control is: its queue's, every store's, every worker's",
    "ControlLeaseClauses": "Controls and leases: reclaims, extensions, cancels, batches",
    "ControlChangeClauses": "Controls that change: read-modify-write, rates, limits, orders",
    "RetryNowClauses": "Retry now (capability control)",
    "FairShareClauses": "Fair shares among a queue's groups (capability fair_shares)",
    "AgingClauses": "Priority aging (capability priority_aging)",
    "WorkerRegistryClauses": "The worker registry (capability worker_registry)",
    "CountClauses": "Counts per queue and minute (capability counters)",
    "OperationClauses": "get, stats and purge_succeeded",
    "ClockClauses": "The storage clock: now()",
    "LifecycleClauses": "Lifecycle and the operation timeout",
    "CorruptTaskClauses": "Corrupt stored tasks (fixture corrupt_task)",
    "ValidationClauses": "Bad input",
    "CapabilityClauses": "Capabilities: pinned, and each one as documented",
    "StatefulClauses": "Random operation sequences (Hypothesis state machine)",
    "CrashClauses": "kill -9 chaos (needs storage_url)",
}


def catalog() -> list[Clause]:
    """Each clause group of :class:`~rdq_compliance.StorageSuite` with its tests."""
    groups = []
    for clause in CLAUSES:
        tests = [
            name
            for name, member in vars(clause).items()
            if name.startswith("test_") and inspect.isfunction(member)
        ]
        promise = " ".join((inspect.getdoc(clause) or "").split())
        groups.append((TITLES.get(clause.__name__, clause.__name__), promise, tests))
    return groups


def cases(clause: type, test: str) -> list[str]:
    """The parameter ids of a parametrized test (empty for a plain test)."""
    out: list[str] = []
    for mark in getattr(getattr(clause, test), "pytestmark", []):
        if mark.name != "parametrize":
            continue
        ids = mark.kwargs.get("ids")
        values = mark.args[1]
        out += [str(i) for i in ids] if ids else [str(v) for v in values]
    return out


def markdown() -> str:
    """The catalog as Markdown: a heading per group, its promise, then its tests."""
    by_name = {TITLES.get(c.__name__, c.__name__): c for c in CLAUSES}
    lines: list[str] = []
    for name, promise, tests in catalog():
        lines += [f"### {name}", "", promise, ""]
        for test in tests:
            params = cases(by_name[name], test)
            suffix = f" — one case each: {', '.join(params)}" if params else ""
            lines.append(f"- `{test}`{suffix}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())

"""The contract's versions and the capabilities that grew it.

Every operation or promise added after the first published contract (version 1) arrives in
one of two ways, so that a store written for an earlier version keeps working unchanged:

- with a working **default** in :class:`~rdq.spi.StorageBase`, built on the older operations
  (correct, if slow): ``now``, ``dlq_groups``, ``complete_many``;
- behind a **capability** flag in :class:`~rdq.spi.Capabilities` (default ``False``): the
  engine checks the flag before it uses the operation, and what needs a missing one fails
  with :class:`~rdq.errors.Unsupported` naming the store and the flag (:func:`require`).

:data:`FEATURES` lists every flag with the version that brought it and what the engine does
without it; ``docs/backend-changelog.md`` lists every change of promise, version by version.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from rdq.errors import Unsupported
from rdq.spi._models import Capabilities

__all__ = ["CONTRACT_VERSION", "FEATURES", "Feature", "require", "supports"]

CONTRACT_VERSION = 5
"""The contract version this release of rdq defines."""


class Feature(NamedTuple):
    """One flag of :class:`~rdq.spi.Capabilities`."""

    name: str
    since: int
    kind: Literal["acceleration", "feature"]
    operations: tuple[str, ...]
    without: str
    """What the engine does with a store that lacks it."""


FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("notify", 1, "acceleration", ("wait_due",), "workers poll"),
        Feature(
            "filter_pushdown",
            1,
            "acceleration",
            ("dlq_list", "redrive", "purge"),
            "the engine filters DLQ pages and acts on id sets",
        ),
        Feature("batch_enqueue", 1, "acceleration", ("enqueue_batch",), "one enqueue per task"),
        Feature("batch_complete", 1, "acceleration", ("complete_many",), "one complete per task"),
        Feature(
            "group_pushdown",
            2,
            "acceleration",
            ("dlq_groups",),
            "StorageBase pages through the DLQ to count groups",
        ),
        Feature(
            "priorities",
            2,
            "feature",
            ("claim_due",),
            "claims oldest due first; a submit with a priority other than 0 is refused",
        ),
        Feature(
            "claim_holder",
            2,
            "feature",
            ("claim_due",),
            "claims name no worker: the console cannot say who holds a task",
        ),
        Feature(
            "cancel",
            2,
            "feature",
            ("cancel",),
            "cancelling tasks is refused",
        ),
        Feature(
            "task_listing",
            2,
            "feature",
            ("list_tasks",),
            "only DEAD tasks can be listed (through dlq_list)",
        ),
        Feature(
            "queue_listing",
            2,
            "feature",
            ("list_queues",),
            "overviews show the queues the application names",
        ),
        Feature("import_tasks", 2, "feature", ("import_tasks",), "rdq copy is refused"),
        Feature(
            "audit",
            2,
            "feature",
            ("append_audit", "list_audit"),
            "audit records are logged only; the audit trail cannot be listed",
        ),
        Feature(
            "control",
            3,
            "feature",
            ("list_controls", "put_control", "delete_control", "retry_now"),
            "breakers are each worker's own, pauses, limits and retry-now are refused",
        ),
        Feature(
            "worker_registry",
            3,
            "feature",
            ("heartbeat_worker", "list_workers", "remove_worker", "purge_workers"),
            "the fleet is not shown: no worker list, no silent-worker or unserved-queue flags",
        ),
        Feature(
            "counters",
            3,
            "feature",
            ("add_counts", "read_counts", "purge_counts"),
            "no rates over time (counts only)",
        ),
        Feature(
            "fair_shares",
            4,
            "feature",
            ("claim_due", "put_control"),
            "a queue cannot be made fair: claims follow priority and due time only",
        ),
        Feature(
            "priority_aging",
            4,
            "feature",
            ("claim_due", "put_control"),
            "priorities are strict: a steady stream of higher ones holds lower ones back",
        ),
        Feature(
            "overlapping_completions",
            4,
            "acceleration",
            ("complete_many",),
            "a worker keeps one complete_many call in flight",
        ),
        Feature(
            "retention",
            5,
            "feature",
            ("expire_tasks",),
            "archives, then deletes by get, purge and purge_succeeded: a task redriven and "
            "dead-lettered again between two of those calls can leave unarchived",
        ),
        Feature(
            "dedup",
            5,
            "feature",
            ("admit",),
            "serves mode skip only, by a task id derived from the key (held while that task "
            "exists, or for the fixed period of the window it falls in); refuses the others",
        ),
        Feature(
            "payload_refs",
            5,
            "feature",
            ("held_payload_refs",),
            "keeps every payload inline: one above the inline limit (1 MiB) is refused",
        ),
        Feature(
            "discard_succeeded",
            5,
            "feature",
            ("complete", "complete_many"),
            "a worker refuses to serve a queue with keep_succeeded = False (tasks are kept)",
        ),
        Feature(
            "reopen",
            2,
            "feature",
            ("reopen",),
            "leases are renewed on the worker's own event loop only",
        ),
        Feature(
            "transactional_enqueue",
            2,
            "feature",
            ("enqueue_in",),
            "submitting inside the application's transaction is refused",
        ),
        Feature("backup", 3, "feature", ("backup",), "rdq backup is refused"),
    )
}
"""Every capability flag, in the order :class:`~rdq.spi.Capabilities` declares them."""


def supports(capabilities: Capabilities, name: str) -> bool:
    """True if ``capabilities`` advertises the flag ``name``."""
    if name not in FEATURES:
        raise KeyError(f"no capability named {name!r}")
    return bool(getattr(capabilities, name))


def require(store: object, name: str, needed_for: str | None = None) -> None:
    """Raise :class:`~rdq.errors.Unsupported` unless ``store`` (a :class:`~rdq.spi.Storage`)
    advertises the capability ``name``; the error names the store a
    :class:`~rdq.spi.ForwardingStorage` forwards to, not the wrapper."""
    capabilities = store.capabilities()  # type: ignore[attr-defined]
    if not supports(capabilities, name):
        named = store
        while hasattr(named, "inner") and hasattr(named, "_forward"):  # a ForwardingStorage
            named = named.inner
        raise Unsupported(type(named).__name__, name, needed_for)

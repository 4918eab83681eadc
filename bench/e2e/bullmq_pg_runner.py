"""BullMQ 6 on PostgreSQL (its ``createPostgresBackend``, docs.bullmq.io/guide/postgresql)
through its documented API, in ``node/bullmq.mjs``: a ``Queue`` (``add``, ``addBulk``) and a
``Worker`` with ``concurrency`` set to the harness's ``--concurrency``, the same code as
``bullmq_runner`` on the PostgreSQL database the harness made for it (logged tables, the
server's ``synchronous_commit``). BullMQ's job defaults: one attempt, completed jobs kept.

Completion records: the job row's state and ``finishedOn``, which BullMQ stamps with the host's
clock, so a drain is timed on that clock; verification reads every completed job back
(``attemptsMade`` 1, ``attemptsStarted`` 1) beside the workers' ledger (``_node``).
"""

from __future__ import annotations

from typing import ClassVar

from bench.e2e._node import NodeSystem, NodeWorker

__all__ = ["System", "Worker"]


class System(NodeSystem):
    name = "bullmq_pg"
    host_clock = True
    harness_statements: ClassVar[dict[str, int] | None] = {
        "completed": 1,
        "db_now": 0,
        "last_completion": 1,
    }
    """BullMQ's ``getCompletedCount`` and ``getCompleted(0, 0)`` on its PostgreSQL backend: one
    commit each (measured: 50 of either, 51 commits in the 11 s around them)."""


Worker = NodeWorker

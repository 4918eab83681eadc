"""graphile-worker with the batching of its performance page
(https://worker.graphile.org/docs/performance): ``localQueue: { size: 500 }`` (each worker
process fetches and locks up to 500 jobs at once and hands them out locally) and
``completeJobBatchDelay: 0`` / ``failJobBatchDelay: 0`` (completions and failures of one tick
written in one statement). Everything else is ``graphile_worker_runner``'s."""

from __future__ import annotations

from bench.e2e._node import NodeSystem, NodeWorker

__all__ = ["System", "Worker"]


class System(NodeSystem):
    name = "graphile_worker_batched"


Worker = NodeWorker

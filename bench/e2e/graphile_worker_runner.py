"""graphile-worker 0.18 (Node.js, PostgreSQL) through its documented API, in
``node/graphile.mjs``: ``makeWorkerUtils`` with ``addJob`` / ``addJobs`` to add jobs, ``run`` with
a ``taskList`` as the worker.

Settings are graphile-worker's defaults (LISTEN/NOTIFY, polling every 2 s, its console logger,
which writes a line per job to the workers' log) except ``concurrentJobs``, set to the
harness's ``--concurrency`` (its default of 1 runs one job at a time). Each worker process
connects its ``pg.Pool`` (``pgPool``; pg's default size 10, graphile-worker's ``maxPoolSize``
default) before it reports ready, as the other systems connect before the drain's clock
starts. graphile-worker has no switch to turn LISTEN/NOTIFY off.

Completion records: none; a successful job is deleted. Completions are counted as the jobs
added since the reset minus the jobs left, a drain is timed on the harness's clock, and the
workers' ledger (``_node``) proves each task ran exactly once.
"""

from __future__ import annotations

from bench.e2e._node import NodeSystem, NodeWorker

__all__ = ["System", "Worker"]


class System(NodeSystem):
    name = "graphile_worker"


Worker = NodeWorker

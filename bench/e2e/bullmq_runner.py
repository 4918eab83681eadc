"""BullMQ 6 on Redis, its default backend, through its documented API, in ``node/bullmq.mjs``:
a ``Queue`` (``add``, ``addBulk``) and a ``Worker`` with ``concurrency`` set to the harness's
``--concurrency`` (docs.bullmq.io/guide/workers/concurrency), on a durable redis-server started
for the run (``_redis_server.DurableRedis``: AOF with an fsync before every reply, no
snapshots). BullMQ's job defaults: one attempt, completed jobs kept.

Completion records: the ``completed`` set and each job's ``finishedOn`` (the host's clock, which
times the drain); verification reads every completed job back (``attemptsMade`` 1,
``attemptsStarted`` 1) beside the workers' ledger (``_node``).
"""

from __future__ import annotations

from bench.e2e._node import NodeSystem, NodeWorker
from bench.e2e._redis_server import DurableRedis

__all__ = ["System", "Worker"]


class System(NodeSystem):
    name = "bullmq"
    host_clock = True

    def store_url(self, database_url: str) -> str:
        self._server = DurableRedis(self.name)
        return self._server.url

    def server_cpu(self) -> float | None:
        """CPU seconds the run's redis-server has used so far."""
        return self._server.cpu_seconds()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self._server.stop()


Worker = NodeWorker

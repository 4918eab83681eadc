"""rdq on Redis (``rdq-redis``): the same producer and worker as ``rdq_runner``, on a durable
redis-server of its own instead of the PostgreSQL cluster.

The server is started when the system picks its URL (``_redis_server.DurableRedis``: an fsync
before every reply, what rdq's at-least-once promise needs; docs/redis.md). Admin work reads
the documented keys (docs/redis.md): the queue's ``succeeded`` sorted set for the last
completion, the server's ``TIME`` for its clock; the verification reads every task back
through the store.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import redis.asyncio as aioredis

from bench.e2e import rdq_runner
from bench.e2e._redis_server import DurableRedis
from bench.e2e.systems import QUEUE

__all__ = ["System", "Worker"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PREFIX = "rdq"


class System(rdq_runner.System):
    """The rdq producer on a durable redis-server started for it."""

    name = "rdq_redis"

    def store_url(self, database_url: str) -> str:
        self._server = DurableRedis(self.name)
        self._url = self._server.url
        return f"{self._url}?prefix={_PREFIX}"

    def server_cpu(self) -> float | None:
        """CPU seconds the run's redis-server has used so far."""
        return self._server.cpu_seconds()

    async def open(self, url: str) -> None:
        await super().open(url)
        self._redis = aioredis.from_url(self._url)

    async def reset(self) -> None:
        self._ids = []
        await self._redis.flushdb()
        await self._storage.migrate()  # the key layout's version marker

    async def db_now(self) -> datetime | None:
        seconds, micros = await self._redis.time()
        return _EPOCH + timedelta(seconds=seconds, microseconds=micros)

    async def last_completion(self) -> datetime | None:
        last = await self._redis.zrange(
            f"{_PREFIX}:{{{QUEUE}}}:succeeded", 0, 0, desc=True, withscores=True
        )
        return _EPOCH + timedelta(microseconds=int(last[0][1])) if last else None

    async def close(self) -> None:
        try:
            await super().close()
            await self._redis.aclose()
        finally:
            self._server.stop()


Worker = rdq_runner.Worker

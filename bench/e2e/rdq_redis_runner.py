"""rdq on Redis (``rdq-redis``): the same producer and worker as ``rdq_runner``, on a durable
redis-server of its own instead of the PostgreSQL cluster.

The server is started when the system picks its URL: ``--appendonly yes --appendfsync
always`` (an fsync before every reply, what rdq's at-least-once promise needs; docs/redis.md),
no RDB snapshots, a temporary directory on the machine's local disk, so every acknowledged
write is as durable as the PostgreSQL systems' are. Admin work reads the documented keys
(docs/redis.md): the queue's ``succeeded`` sorted set for the last completion, the server's
``TIME`` for its clock; the verification reads every task back through the store.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis.asyncio as aioredis

from bench.e2e import rdq_runner
from bench.e2e.systems import QUEUE

__all__ = ["System", "Worker"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PREFIX = "rdq"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class System(rdq_runner.System):
    """The rdq producer on a durable redis-server started for it."""

    name = "rdq_redis"

    def store_url(self, database_url: str) -> str:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("rdq_redis needs redis-server (apt-get install redis-server)")
        self._dir = Path(tempfile.mkdtemp(prefix="rdq-bench-redis-"))
        port = _free_port()
        self._server = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self._dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._server.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        self._url = f"redis://127.0.0.1:{port}/0"
        return f"{self._url}?prefix={_PREFIX}"

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
            self._server.terminate()
            self._server.wait(30)
            shutil.rmtree(self._dir, ignore_errors=True)


Worker = rdq_runner.Worker

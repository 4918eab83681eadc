"""The redis-py client of a store: one server, a Cluster, or the master named by Sentinels.

On one server or behind Sentinels its connections send commands the cheaper way of
:mod:`rdq_redis._sending`; on Cluster they are redis-py's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from rdq_redis._errors import translate_errors
from rdq_redis._sending import cheap_send
from rdq_redis._url import RedisConfig

__all__ = ["Client", "Connection", "LiveClient", "open_connection"]

Client = Redis | RedisCluster
LiveClient = Callable[[], Client]
"""An open store's client, looked up at each use (``NotConnected`` once the store closed)."""


class Connection:
    """A connected client, and the Sentinel clients behind it (closed with it)."""

    def __init__(self, client: Client, sentinel: Any = None) -> None:
        self.client = client
        self._sentinel = sentinel

    async def aclose(self) -> None:
        await self.client.aclose()
        if self._sentinel is not None:
            for node in self._sentinel.sentinels:
                await node.aclose()


async def open_connection(config: RedisConfig) -> Connection:
    """Build the client ``config`` describes and check that the server answers;
    ``StorageUnavailable`` (naming the address) when it does not."""
    # No driver-level retries: a retried EVALSHA whose first reply was lost could run a
    # script twice. Errors surface as StorageUnavailable and the engine backs off.
    retry = Retry(NoBackoff(), 0)
    sentinel: Any = None
    client: Client
    if config.sentinel_master:
        from redis.asyncio.sentinel import Sentinel

        sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis-py 8.2
            config.sentinels, sentinel_kwargs=config.sentinel_options
        )
        client = sentinel.master_for(
            config.sentinel_master, redis_class=Redis, retry=retry, **config.client_options
        )
    elif config.cluster:
        client = RedisCluster.from_url(config.url, retry=retry, **config.client_options)
    else:
        client = Redis.from_url(config.url, retry=retry, **config.client_options)
    if isinstance(client, Redis):
        pool = client.connection_pool
        pool.connection_class = cheap_send(pool.connection_class)
    connection = Connection(client, sentinel)
    try:
        with translate_errors(config.address):
            if isinstance(client, RedisCluster):
                await client.initialize()
            await client.ping()
    except BaseException:
        await connection.aclose()
        raise
    return connection

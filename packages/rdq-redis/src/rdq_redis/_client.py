"""The redis-py client of a store (one server, a Cluster, or the master named by Sentinels)
and the server checks ``migrate()`` makes."""

from __future__ import annotations

import logging
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from rdq.errors import StorageError
from rdq_redis._config import RedisConfig
from rdq_redis._errors import translate_errors

__all__ = ["Client", "Connection", "check_server", "open_connection"]

Client = Redis | RedisCluster
_log = logging.getLogger("rdq_redis")


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

        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            config.sentinels, sentinel_kwargs=config.sentinel_options
        )
        client = sentinel.master_for(
            config.sentinel_master, redis_class=Redis, retry=retry, **config.client_options
        )
    elif config.cluster:
        client = RedisCluster.from_url(config.url, retry=retry, **config.client_options)
    else:
        client = Redis.from_url(config.url, retry=retry, **config.client_options)
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


async def check_server(client: Client, address: str, *, cluster: bool) -> None:
    """``StorageError`` if the server is too old (scripts call TIME, which needs effects
    replication: Redis 5; Cluster mode uses ``SET NX GET``: Redis 7.0). Logs a WARNING on
    ``rdq_redis`` if the server may evict keys, which would lose tasks. Checks that the server
    does not allow (INFO or CONFIG renamed) are skipped."""
    version = await _version(client, address)
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    needed = (7, 0) if cluster else (5, 0)
    if len(parts) == 2 and parts < needed:
        raise StorageError(
            f"Redis at {address} is version {version}; rdq-redis needs "
            f"{needed[0]}.{needed[1]} or newer{' for Cluster mode' if cluster else ''}"
        )
    policy = await _eviction_policy(client, address)
    if policy is not None and policy.startswith("allkeys-"):
        _log.warning(
            "Redis at %s has maxmemory-policy %s: under memory pressure it deletes tasks. "
            "Set maxmemory-policy noeviction (see docs/redis.md).",
            address,
            policy,
        )


async def _version(client: Client, address: str) -> str:
    try:
        with translate_errors(address):
            info = await client.info("server")
    except StorageError:
        return ""
    if isinstance(info, dict) and "redis_version" not in info:
        info = next(iter(info.values()), {})  # RedisCluster: one INFO per node
    return str(info.get("redis_version", "")) if isinstance(info, dict) else ""


async def _eviction_policy(client: Client, address: str) -> str | None:
    try:
        with translate_errors(address):
            reply = await client.config_get("maxmemory-policy")
    except StorageError:
        return None  # managed services often rename or forbid CONFIG
    for key, value in dict(reply).items():
        name = key.decode() if isinstance(key, bytes) else str(key)
        if name == "maxmemory-policy":
            return value.decode() if isinstance(value, bytes) else str(value)
    return None

"""What ``migrate()`` does on Redis, which has no schema: check the server (its version, its
eviction policy) and load every script into the server's cache."""

from __future__ import annotations

import logging

from rdq.errors import StorageError
from rdq_redis._connection import Client
from rdq_redis._errors import translate_errors
from rdq_redis._queries import Scripts

__all__ = ["check_server", "migrate"]

_log = logging.getLogger("rdq_redis")


async def migrate(client: Client, scripts: Scripts, address: str, *, cluster: bool) -> None:
    """Check the server (see :func:`check_server`) and load every script."""
    await check_server(client, address, cluster=cluster)
    with translate_errors(address):
        await scripts.load_all()


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

"""What ``migrate()`` does on Redis, which has no schema: check the server (its version, its
eviction policy), load every script into the server's cache, and upgrade keys written in an
older key layout (see :mod:`rdq_redis._keys`).

The layout version lives in ``<prefix>:layout``. A store opened on keys of an older layout
refuses every operation but ``migrate`` with a ``StorageError`` that says to run it; one
opened on a newer layout refuses everything. A prefix with no keys at all gets the current
version written at once. ``migrate`` returns the upgrade it applied, if any.
"""

from __future__ import annotations

import logging
from typing import Any

from rdq.errors import StorageError
from rdq_redis._cluster import register_queues
from rdq_redis._connection import Client
from rdq_redis._errors import translate_errors
from rdq_redis._keys import LAYOUT, QueueKeys, layout_key, registry_key
from rdq_redis._scripts import Scripts

__all__ = ["check_layout", "check_server", "layout_error", "migrate", "stored_layout"]

_log = logging.getLogger("rdq_redis")
_BATCH = 500
"""Tasks one migration script call upgrades."""


async def check_layout(client: Client, prefix: str, address: str) -> int:
    """The key layout of everything under ``prefix``: ``LAYOUT``, or the older (or newer)
    version found. A prefix that holds no task yet is given the current version."""
    version = await stored_layout(client, prefix, address)
    if version is not None:
        return version
    with translate_errors(address):
        # Layout 1 wrote no version; it always wrote an id index entry per task.
        async for _ in client.scan_iter(match=f"{prefix}:id:{{*", count=1000):
            return 1
        await client.set(layout_key(prefix), str(LAYOUT), nx=True)
    return await stored_layout(client, prefix, address) or LAYOUT


async def stored_layout(client: Client, prefix: str, address: str) -> int | None:
    """The version ``<prefix>:layout`` holds (None when it holds none)."""
    key = layout_key(prefix)
    with translate_errors(address):
        raw = await client.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise StorageError(
            f"Redis at {address}: {key} holds {raw!r}, not a key layout version"
        ) from None


def layout_error(version: int, prefix: str, address: str) -> StorageError:
    """The error operations raise while the keys are in another layout than ``LAYOUT``."""
    if version > LAYOUT:
        return StorageError(
            f"the keys under prefix {prefix!r} at Redis {address} are in key layout {version},"
            f" written by a newer rdq-redis; this one reads layout {LAYOUT}: upgrade rdq-redis"
        )
    return StorageError(
        f"the keys under prefix {prefix!r} at Redis {address} are in key layout {version} of "
        f"an older rdq-redis; run `rdq migrate` (RedisStorage.migrate()) once to upgrade them "
        f"to layout {LAYOUT}, after stopping workers of the older version"
    )


async def migrate(
    client: Client, scripts: Scripts, prefix: str, address: str, *, cluster: bool
) -> list[str]:
    """Check the server (see :func:`check_server`), load every script and upgrade the keys
    under ``prefix`` to the current layout, one version at a time. Idempotent; an interrupted
    upgrade resumes.

    Returns the upgrades applied (``["key layout 1 -> 2", "key layout 2 -> 3"]``), or ``[]``
    when the keys were in the current layout already (loading the scripts into the server's
    cache is no step of its own: every call does it)."""
    await check_server(client, address, cluster=cluster)
    await scripts.load_all()
    version = await check_layout(client, prefix, address)
    if version == LAYOUT:
        return []
    if version > LAYOUT:
        raise layout_error(version, prefix, address)
    queues = sorted(await _stored_queues(client, prefix, address))
    _log.info("upgrading %d queues under prefix %r to key layout %d", len(queues), prefix, LAYOUT)
    applied = []
    while version < LAYOUT:
        await _UPGRADES[version](client, scripts, prefix, address, queues, cluster)
        with translate_errors(address):
            await client.set(layout_key(prefix), str(version + 1))
        applied.append(f"key layout {version} -> {version + 1}")
        version += 1
    return applied


async def _upgrade_1(
    client: Client, scripts: Scripts, prefix: str, address: str, queues: list[str], cluster: bool
) -> None:
    """Layout 1 -> 2: per-priority sets (layout 1 tasks are all priority 0), the DLQ group
    sets and the queue registry."""
    if cluster:
        await register_queues(client, prefix, address, set(queues))
    registry = "" if cluster else registry_key(prefix)
    for queue in queues:
        qk = QueueKeys(prefix, queue)
        rank = 0
        while rank >= 0:
            rank = int(
                await scripts.run(
                    "migrate_queue", [qk.levels], [qk.base, registry, queue, rank, _BATCH]
                )
            )


async def _upgrade_2(
    client: Client, scripts: Scripts, prefix: str, address: str, queues: list[str], cluster: bool
) -> None:
    """Layout 2 -> 3: the flow-control keys a task kept only inside its body get a field of
    their own, for the tasks a claim may take again (PENDING, IN_FLIGHT and DEAD ones, which a
    redrive brings back). The other structures of layout 3 (controls, lease and held sets,
    the worker registry, counts) start empty."""
    for queue in queues:
        qk = QueueKeys(prefix, queue)
        with translate_errors(address):
            found: list[Any] = await client.zrange(qk.levels, 0, -1)
        levels = [int(p) for p in found]
        sets = [f"{kind}:{p}" for p in levels for kind in ("pending", "inflight")] + ["dead"]
        for name in sets:
            rank = 0
            while rank >= 0:
                rank = int(
                    await scripts.run("migrate_keys", [qk.levels], [qk.base, name, rank, _BATCH])
                )


_UPGRADES = {1: _upgrade_1, 2: _upgrade_2}
"""The upgrade from each older layout to the next."""


async def _stored_queues(client: Client, prefix: str, address: str) -> set[str]:
    """The names of the queues that have keys under ``prefix`` (``<prefix>:{<queue>}:...``)."""
    start = len(prefix) + 2
    queues: set[str] = set()
    with translate_errors(address):
        async for raw in client.scan_iter(match=f"{prefix}:{{*}}:*", count=1000):
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            end = key.find("}:", start)
            if end > start and not key[start:end].startswith("_"):
                queues.add(key[start:end])
    return queues


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

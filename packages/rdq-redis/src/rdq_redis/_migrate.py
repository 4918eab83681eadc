"""What ``migrate()`` does on Redis, which has no schema: check the server's version, load
every script into the server's cache, and upgrade keys written in an older key layout (see
:mod:`rdq_redis._keys`).

The layout version lives in ``<prefix>:layout``. A store opened on keys of an older layout
refuses every operation but ``migrate`` with a ``StorageError`` that says to run it; one
opened on a newer layout refuses everything. A prefix with no keys at all gets the current
version written at once.

Layout 1 wrote no version key, so keys without one are layout 1 — unless some of them only
layout 2 or newer writes (a priority's set, DLQ groups, the queue registry, the audit trail,
…): then ``<prefix>:layout`` was deleted from under rdq, almost always evicted by a Redis
under memory pressure with tasks going with it, and the store refuses to open with an error
that says so (and says not to migrate: upgrading keys that are already current would be
wrong). ``migrate`` returns the upgrade it applied, if any.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from rdq.errors import StorageError
from rdq_redis._cluster import register_queues
from rdq_redis._connection import Client, Scripts
from rdq_redis._errors import translate_errors
from rdq_redis._eviction import eviction_evidence
from rdq_redis._keys import LAYOUT, QueueKeys, layout_key, registry_key

__all__ = [
    "check_layout",
    "check_server",
    "layout_error",
    "migrate",
    "older_layout_error",
    "stored_layout",
]

_log = logging.getLogger("rdq_redis")
_BATCH = 500
"""Tasks one migration script call upgrades."""
_NEWER_QUEUE_KEYS = re.compile(r"levels|(pending|inflight):-?\d+|groups|group:.*")
"""Keys of a queue (after ``<prefix>:{<queue>}:``) that layout 1 never wrote."""
_NEWER_TAGS = ("{_audit}:", "{_workers}:", "{_counts}:")
_NEWER_NAMES = ("queues", "controlled")


async def check_layout(client: Client, prefix: str, address: str) -> int:
    """The key layout of everything under ``prefix``: ``LAYOUT``, or the older (or newer)
    version found. A prefix that holds no key yet is given the current version; one whose
    version key is missing among keys of layout 2 or newer is refused (see the module
    docstring)."""
    version = await stored_layout(client, prefix, address)
    if version is not None:
        return version
    tasks, newer = await _unversioned_keys(client, prefix, address)
    if newer is not None:
        raise await missing_layout_error(client, prefix, address, newer)
    if tasks:
        return 1
    with translate_errors(address):
        await client.set(layout_key(prefix), str(LAYOUT), nx=True)
    return await stored_layout(client, prefix, address) or LAYOUT


async def _unversioned_keys(client: Client, prefix: str, address: str) -> tuple[bool, str | None]:
    """Whether keys under ``prefix`` hold tasks (layout 1 always wrote an id index entry per
    task), and the first key found that only layout 2 or newer writes (None if none)."""
    tasks = False
    own = f"{prefix}:"
    with translate_errors(address):
        async for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            rest = key[len(own) :]
            if _written_since_layout_2(rest):
                return True, key
            tasks = tasks or rest.startswith("id:{")
    return tasks, None


def _written_since_layout_2(rest: str) -> bool:
    """True for a key name (after ``<prefix>:``) that layout 1 never wrote."""
    if rest in _NEWER_NAMES or rest.startswith(_NEWER_TAGS):
        return True
    if not rest.startswith("{"):
        return False
    end = rest.find("}:")
    return end > 0 and _NEWER_QUEUE_KEYS.fullmatch(rest[end + 2 :]) is not None


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


async def older_layout_error(
    client: Client, version: int, prefix: str, address: str
) -> StorageError:
    """:func:`layout_error`, and for an older layout what the server says about evictions: a
    layout 1 judged from a missing version key may be the current layout stripped of its
    version key and of every key only newer layouts write."""
    error = layout_error(version, prefix, address)
    if version > LAYOUT:
        return error
    evidence = await eviction_evidence(client, address)
    if not evidence:
        return error
    return StorageError(
        f"{error}.{evidence} If a current rdq-redis wrote these keys, they are not older: "
        f"{layout_key(prefix)} and other keys were evicted, tasks among them, and migrating "
        'would be wrong; see docs/redis.md, section "Eviction"'
    )


async def missing_layout_error(
    client: Client, prefix: str, address: str, newer_key: str
) -> StorageError:
    """The error of a prefix whose version key is missing among keys of a newer layout."""
    key = layout_key(prefix)
    evidence = await eviction_evidence(client, address)
    return StorageError(
        f"the keys under prefix {prefix!r} at Redis {address} have lost their layout version: "
        f"{key} is missing, yet {newer_key} (which only layout 2 or newer writes) is there. "
        "Keys were deleted from under rdq — most likely evicted by Redis under memory "
        f"pressure — and tasks may have gone with them.{evidence} This is no older layout: "
        "do not run `rdq migrate`. Make sure maxmemory-policy is noeviction (see "
        f'docs/redis.md, section "Eviction"), then `SET {key} {LAYOUT}` to go on with the '
        "tasks that are left"
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
    evidence = await eviction_evidence(client, address)
    if evidence:
        _log.warning(
            "upgrading keys under prefix %r from key layout %d, judged by a missing %s.%s If "
            'a current rdq-redis wrote them, keys were evicted: see docs/redis.md, "Eviction"',
            prefix,
            version,
            layout_key(prefix),
            evidence,
        )
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
    replication: Redis 5; Cluster mode uses ``SET NX GET``: Redis 7.0). Skipped where the
    server does not allow INFO. (The eviction policy is checked at every open, see
    :mod:`rdq_redis._eviction`.)"""
    version = await _version(client, address)
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    needed = (7, 0) if cluster else (5, 0)
    if len(parts) == 2 and parts < needed:
        raise StorageError(
            f"Redis at {address} is version {version}; rdq-redis needs "
            f"{needed[0]}.{needed[1]} or newer{' for Cluster mode' if cluster else ''}"
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

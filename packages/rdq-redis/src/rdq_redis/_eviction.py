"""Refusing a Redis that may evict rdq's keys.

Redis with ``maxmemory`` set and an ``allkeys-*`` ``maxmemory-policy`` deletes keys under
memory pressure — task hashes, the id index, rdq's own bookkeeping — and tells no one: the
submitter's task was acknowledged, and later it is simply gone. So every open of a store
(worker, client, node, CLI) reads the policy and refuses one that may evict rdq's keys with a
``StorageError`` naming the setting and ``docs/redis.md``:

* ``noeviction`` (the Redis default) never evicts: a write that needs memory fails instead;
* ``volatile-*`` policies evict only keys with a TTL; rdq sets none, so for rdq's keys they
  are ``noeviction`` (accepted);
* ``allkeys-*`` evict any key (refused), and so does any policy rdq does not know (refused).

``allow_eviction=true`` (a URL option) opens anyway, with a WARNING on logger ``rdq_redis``
at every open. The policy comes from ``CONFIG GET maxmemory-policy``; where managed Redis
renames or forbids CONFIG, from ``INFO memory`` (``maxmemory_policy``); where neither
answers, the store opens and logs a WARNING naming the setting, for the operator to check by
other means. On Redis Cluster every primary is asked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from redis import exceptions as rx
from redis.asyncio import RedisCluster

from rdq.errors import StorageError
from rdq_redis._connection import Client
from rdq_redis._errors import translate_errors

__all__ = ["check_eviction", "eviction_evidence", "evicts", "read_policies"]

_log = logging.getLogger("rdq_redis")
_DOCS = 'docs/redis.md, section "Eviction"'
_UNREADABLE = (rx.ResponseError, rx.NoPermissionError)
"""What Redis answers when a command is renamed away or forbidden by an ACL."""


def evicts(policy: str) -> bool:
    """True if ``policy`` may evict rdq's keys (which never carry a TTL)."""
    return policy != "noeviction" and not policy.startswith("volatile-")


async def check_eviction(client: Client, address: str, *, allow: bool) -> None:
    """``StorageError`` if the server may evict rdq's keys (see the module docstring), unless
    ``allow``: then a WARNING. A WARNING too when the policy cannot be read."""
    policies = await read_policies(client, address)
    if not policies:
        _log.warning(
            "Redis at %s lets rdq read neither CONFIG GET maxmemory-policy nor INFO memory: "
            "rdq cannot check that it never evicts keys. Make sure maxmemory-policy is "
            "noeviction (or volatile-*): any allkeys-* policy deletes acknowledged tasks "
            "silently under memory pressure (see %s).",
            address,
            _DOCS,
        )
        return
    evicting = sorted({policy for policy in policies if evicts(policy)})
    if not evicting:
        return
    shown = ", ".join(evicting)
    if allow:
        _log.warning(
            "Redis at %s has maxmemory-policy %s and the store was opened with "
            "allow_eviction=true: under memory pressure Redis deletes rdq's keys, "
            "acknowledged tasks among them, and no one is told. Set maxmemory-policy "
            "noeviction to stop losing tasks (see %s).",
            address,
            shown,
            _DOCS,
        )
        return
    raise StorageError(
        f"Redis at {address} has maxmemory-policy {shown}: under memory pressure it deletes "
        "keys, rdq's tasks among them, without an error to anyone. rdq-redis refuses to "
        "open on it. Set maxmemory-policy noeviction (or a volatile-* policy: rdq sets no "
        f"TTLs) on the server, see {_DOCS}; or, accepting that tasks may be lost, add "
        "allow_eviction=true to the storage URL"
    )


async def read_policies(client: Client, address: str) -> list[str]:
    """The ``maxmemory-policy`` of the server (of each primary on Cluster), from CONFIG GET
    or else INFO memory; ``[]`` when neither is allowed."""
    nodes = _targets(client)
    try:
        with translate_errors(address):
            reply = await client.config_get("maxmemory-policy", **nodes)
        found = _values(reply, "maxmemory-policy")
        if found:
            return found
    except StorageError as exc:
        if not isinstance(exc.__cause__, _UNREADABLE):
            raise
    try:
        with translate_errors(address):
            info = await client.info("memory", **nodes)
    except StorageError as exc:
        if not isinstance(exc.__cause__, _UNREADABLE):
            raise
        return []
    return _values(info, "maxmemory_policy")


async def eviction_evidence(client: Client, address: str) -> str:
    """What the server says about evictions, for an error about keys that are missing:
    ``" Redis at … has evicted 9615 keys since it started (maxmemory-policy allkeys-lru)."``,
    or ``""`` when it has evicted none, does not say, or runs a ``volatile-*`` policy (which
    evicts only keys with a TTL). Under ``noeviction`` the count still tells of evictions
    since the last restart, under a policy changed since."""
    try:
        with translate_errors(address):
            stats = await client.info("stats", **_targets(client))
        policies = await read_policies(client, address)
    except StorageError:
        return ""
    counts = [int(n) for n in _values(stats, "evicted_keys") if n.isdigit()]
    evicted = sum(counts)
    if not evicted or (policies and all(p.startswith("volatile-") for p in policies)):
        return ""  # none, or (under volatile-*) only keys with a TTL, never rdq's
    policy = f" (its maxmemory-policy now: {', '.join(sorted(set(policies)))})" if policies else ""
    return f" Redis at {address} has evicted {evicted} keys since it started{policy}."


def _targets(client: Client) -> dict[str, Any]:
    """Every primary of a Cluster (eviction is decided per node); nothing on one server."""
    return {"target_nodes": RedisCluster.PRIMARIES} if isinstance(client, RedisCluster) else {}


def _values(reply: Any, name: str) -> list[str]:
    """The values of ``name`` in a CONFIG GET or INFO reply — one server's mapping, or
    RedisCluster's mapping of node name to each node's mapping."""
    if not isinstance(reply, dict):
        return []
    replies: Iterable[Any] = reply.values() if _per_node(reply) else [reply]
    found = []
    for one in replies:
        for key, value in dict(one).items():
            if _text(key) == name:
                found.append(_text(value))
    return found


def _per_node(reply: dict[Any, Any]) -> bool:
    return bool(reply) and all(isinstance(value, dict) for value in reply.values())


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

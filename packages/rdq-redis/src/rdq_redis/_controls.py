"""Control records (capability ``control``): the driver calls of ``list_controls``,
``put_control`` and ``delete_control``, one script each per queue.

A queue's records live with the queue (``<prefix>:{<queue>}:ctl:<key>``, see
:mod:`rdq_redis._keys`) and put and delete are compare-and-set on ``version`` inside the script;
the script arguments and replies are read in :mod:`rdq_redis._flow`. The queues that may hold
records are named in the registry ``<prefix>:controlled``: on a single server the scripts keep
it, on Redis Cluster (where it lives in another slot) the calls here do, around the script.
Kept out of ``_store`` so that it stays the driver calls of the operations every backend has.
"""

from __future__ import annotations

from typing import Any

import msgspec

from rdq.errors import ControlConflict
from rdq.spi import Control
from rdq_redis import _flow
from rdq_redis._cluster import forget_queue, register_queues
from rdq_redis._codec import from_us, hash_pairs
from rdq_redis._connection import LiveClient
from rdq_redis._errors import translate_errors
from rdq_redis._keys import QueueKeys, controlled_key
from rdq_redis._scripts import Scripts
from rdq_redis._url import RedisConfig

__all__ = ["delete_control", "list_controls", "put_control"]


def _controlled(config: RedisConfig) -> str:
    """The registry the scripts keep themselves ('' on Redis Cluster, where it is kept here)."""
    return "" if config.cluster else controlled_key(config.prefix)


async def list_controls(
    scripts: Scripts, redis: LiveClient, config: RedisConfig, queue: str | None
) -> list[Control]:
    if queue is not None:
        queues = [queue]
    else:
        with translate_errors(config.address):
            names = await redis().smembers(controlled_key(config.prefix))
        queues = sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names)
    found: list[Control] = []
    for name in queues:
        qk = QueueKeys(config.prefix, name)
        reply = await scripts.run("list_controls", [qk.levels], [qk.base])
        found += _flow.controls_listed(name, reply)
    return found


async def put_control(
    scripts: Scripts,
    redis: LiveClient,
    config: RedisConfig,
    control: Control,
    expected_version: int,
) -> Control:
    qk = QueueKeys(config.prefix, control.queue)
    if config.cluster:  # registered first: a crash after it leaves a name with no control
        await register_queues(
            redis(),
            config.prefix,
            config.address,
            {control.queue},
            controlled_key(config.prefix),
        )
    values = _flow.control_args(control, expected_version)
    args = [qk.base, control.key, expected_version, _controlled(config), control.queue, *values]
    reply = await scripts.run("put_control", [qk.levels], args)
    if reply[0] != b"OK":
        raise _conflict(control.queue, control.key, reply)
    return msgspec.structs.replace(
        control,
        state=msgspec.json.decode(values[7]),
        version=int(reply[1]),
        updated_at=from_us(int(reply[2])),
        in_use=None,
    )


async def delete_control(
    scripts: Scripts,
    redis: LiveClient,
    config: RedisConfig,
    queue: str,
    key: str,
    expected_version: int,
) -> bool:
    qk = QueueKeys(config.prefix, queue)
    args = [qk.base, key, expected_version, _controlled(config), queue]
    reply = await scripts.run("delete_control", [qk.levels], args)
    if reply[0] == b"NONE":
        return False
    if reply[0] != b"OK":
        raise _conflict(queue, key, reply)
    if config.cluster and int(reply[1]):

        async def has_no_control() -> bool:
            with translate_errors(config.address):
                return not await redis().exists(qk.controls)

        await forget_queue(
            redis(),
            config.prefix,
            config.address,
            queue,
            has_no_control,
            controlled_key(config.prefix),
        )
    return True


def _conflict(queue: str, key: str, reply: Any) -> ControlConflict:
    fields = hash_pairs(reply[1]) if len(reply) > 1 else {}
    found = _flow.control_from_hash(queue, key, fields) if fields else None
    return ControlConflict(queue, key, found)

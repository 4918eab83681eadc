"""Control records (capability ``control``): the driver calls of ``list_controls``,
``put_control``, ``delete_control`` and ``retry_now``, one script each per queue, with the
script arguments built from a ``Control`` and the stored records read back.

A queue's records live with the queue (``<prefix>:{<queue>}:ctl:<key>``, see
:mod:`rdq_redis._keys`), so the claim reads them in its own script (``lua/_flow.lua``, see
:mod:`rdq_redis._claims`); put and delete are compare-and-set on ``version`` inside the
script. The queues that may hold records are named in the registry ``<prefix>:controlled``: on
a single server the scripts keep it, on Redis Cluster (where it lives in another slot) the
calls here do, around the script.
"""

from __future__ import annotations

from typing import Any

import msgspec

from rdq.errors import ControlConflict, StorageError
from rdq.spi import Control
from rdq_redis._cluster import forget_queue, register_queues
from rdq_redis._codec import from_us, hash_pairs
from rdq_redis._connection import LiveClient, Scripts
from rdq_redis._errors import translate_errors
from rdq_redis._keys import QueueKeys, controlled_key
from rdq_redis._url import RedisConfig

__all__ = [
    "control_args",
    "control_from_hash",
    "controls_listed",
    "delete_control",
    "list_controls",
    "put_control",
    "retry_now",
]

_state_decoder = msgspec.json.Decoder(dict[str, Any])
_encoder = msgspec.json.Encoder()


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
        found += controls_listed(name, reply)
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
    values = control_args(control, expected_version)
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


async def retry_now(scripts: Scripts, prefix: str, queue: str, task_ids: list[str]) -> int:
    """Make the listed PENDING tasks of ``queue`` that are not yet due due now; how many."""
    qk = QueueKeys(prefix, queue)
    return int(await scripts.run("retry_now", [qk.levels], [qk.base, qk.wake, *task_ids]))


def _conflict(queue: str, key: str, reply: Any) -> ControlConflict:
    fields = hash_pairs(reply[1]) if len(reply) > 1 else {}
    found = control_from_hash(queue, key, fields) if fields else None
    return ControlConflict(queue, key, found)


# --- the stored form -------------------------------------------------------------------------


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def control_args(control: Control, expected_version: int) -> list[Any]:
    """What ``put_control.lua`` takes after (key base, key, expected version, registry, queue):
    paused, gate, concurrency, rate, per, burst, bucket, the state's JSON, then the claim
    order of the queue's own control: fair (the key prefix) and aging (seconds), '' for
    none."""
    return [
        "1" if control.paused else "0",
        _opt(control.gate),
        _opt(control.concurrency),
        _opt(control.rate),
        repr(float(control.per)),
        _opt(control.burst),
        _opt(control.bucket) if control.rate is not None else "",
        _encoder.encode(control.state),
        control.fair or "",
        "" if control.aging is None else repr(float(control.aging)),
    ]


def control_from_hash(
    queue: str, key: str, fields: dict[bytes, bytes], in_use: int | None = None
) -> Control:
    """A stored control record (``StorageError`` if it was edited into something else)."""

    def number(name: bytes) -> int | None:
        raw = fields.get(name)
        return None if raw is None else int(raw)

    try:
        return Control(
            queue=queue,
            key=key,
            paused=fields.get(b"paused") == b"1",
            gate=number(b"gate"),
            concurrency=number(b"concurrency"),
            rate=number(b"rate"),
            per=float(fields.get(b"per", b"1.0")),
            burst=number(b"burst"),
            fair=fair.decode() if (fair := fields.get(b"fair")) is not None else None,
            aging=float(aging) if (aging := fields.get(b"aging")) is not None else None,
            state=_state_decoder.decode(fields.get(b"state", b"{}")),
            version=int(fields[b"version"]),
            updated_at=from_us(int(fields[b"updated_at"])),
            in_use=in_use,
        )
    except (KeyError, ValueError, OverflowError, msgspec.DecodeError) as exc:
        raise StorageError(
            f"the control record of key {key!r} of queue {queue!r} does not decode ({exc})"
        ) from None


def controls_listed(queue: str, reply: Any) -> list[Control]:
    """``list_controls.lua``'s reply, by key."""
    controls = [
        control_from_hash(queue, key.decode(), hash_pairs(fields), int(in_use))
        for key, fields, in_use in reply
    ]
    controls.sort(key=lambda c: c.key)
    return controls

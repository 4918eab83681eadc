"""What a fenced script's answer means: ``OK``, ``STALE`` or ``NOTFOUND``, and for a claim
token that names no queue, or a task that is not in the queue its token names, what the id
index (``<prefix>:id:{<task id>}`` → queue) says.

The claim token names its queue (``<queue>/<random>.<n>``), so resolving a claim needs no lookup
before its script; only a refusal reads the index, to tell ``StaleClaim`` (the task exists,
elsewhere or under another token) from ``NotFound``. Kept out of ``_store`` so that it stays
the driver calls of each operation.
"""

from __future__ import annotations

from typing import NoReturn

from rdq.spi import fence
from rdq_redis import _args
from rdq_redis._connection import LiveClient
from rdq_redis._errors import translate_errors
from rdq_redis._keys import QueueKeys, index_key
from rdq_redis._url import RedisConfig

__all__ = ["check", "claim_keys", "queue_of"]


async def queue_of(redis: LiveClient, config: RedisConfig, task_id: str) -> str | None:
    """The queue the id index names for ``task_id`` (``None``: no such task)."""
    with translate_errors(config.address):
        queue = await redis().get(index_key(config.prefix, task_id))
    if isinstance(queue, bytes):
        return queue.decode()
    return queue


async def claim_keys(redis: LiveClient, config: RedisConfig, task_id: str, token: str) -> QueueKeys:
    """The keys of the queue a claim token names (a foreign token names any queue: the
    script then finds no such task there and the index decides)."""
    queue = _args.token_queue(token)
    if queue is None:
        await _refused(redis, config, task_id, None)
    return QueueKeys(config.prefix, queue)


async def check(
    redis: LiveClient, config: RedisConfig, task_id: str, outcome: bytes | None
) -> None:
    """The answer of a fenced script (``OK``, ``STALE`` or ``NOTFOUND``; ``None`` when no
    script ran): nothing when it applied, else the error (:func:`rdq.spi.fence`)."""
    if outcome != b"OK":
        await _refused(redis, config, task_id, outcome)


async def _refused(
    redis: LiveClient, config: RedisConfig, task_id: str, outcome: bytes | None
) -> NoReturn:
    """Raise the error for a claim that did not hold: ``StaleClaim`` when the script saw
    another token, else (the task is not in the queue the token names) what the id index
    says: ``StaleClaim`` if the task exists elsewhere, ``NotFound`` if it does not."""
    found = outcome == b"STALE" or await queue_of(redis, config, task_id) is not None
    fence(task_id, found=found, applied=False)
    raise AssertionError("fence() raises for a call that did not apply")

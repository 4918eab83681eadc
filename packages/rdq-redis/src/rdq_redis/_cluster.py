"""The id index and the queue registries on Redis Cluster, kept by the client.

Each id's index entry (``<prefix>:id:{<id>}``) lives in the id's own slot, and the registries
of queue names (``<prefix>:queues``: queues with tasks; ``<prefix>:controlled``: queues with
control records) in others, so no script can touch them together with a queue's keys. On
Cluster the store therefore reserves ids and registers queues before it admits tasks (or
writes a control), and forgets ids (and empty queues) after purges (or the deletion of a
queue's last control), in steps of their own. docs/redis.md says what this gives up in crash
and race windows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from rdq.errors import IDConflict
from rdq.spi import Envelope, first_of_each_id
from rdq_redis._connection import Client
from rdq_redis._errors import translate_errors
from rdq_redis._keys import index_key, registry_key

__all__ = [
    "forget_ids",
    "forget_queue",
    "register_queues",
    "reserve_ids",
]


async def reserve_ids(client: Client, prefix: str, address: str, tasks: Sequence[Envelope]) -> None:
    """Bind every id of ``tasks`` to its queue in the index, or raise ``IDConflict``.

    Every id is checked before any is reserved, so a refused batch leaves no trace, except
    when another client binds one of the ids to another queue between the check and the
    reservation (the ids reserved by then stay reserved)."""
    owners = {task.id: task.queue for task in first_of_each_id(tasks)}
    ids = list(owners)
    with translate_errors(address):
        async with client.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.get(index_key(prefix, task_id))
            found = await pipe.execute()
        _refuse_conflicts(ids, found, owners)
        async with client.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.set(index_key(prefix, task_id), owners[task_id], nx=True, get=True)
            raced = await pipe.execute()
    _refuse_conflicts(ids, raced, owners)


def _refuse_conflicts(ids: list[str], found: list[bytes | None], owners: dict[str, str]) -> None:
    for task_id, owner in zip(ids, found, strict=True):
        if owner is not None and owner.decode() != owners[task_id]:
            raise IDConflict(task_id, owner.decode())


async def forget_ids(client: Client, prefix: str, address: str, ids: Sequence[bytes]) -> None:
    """Drop purged ids from the index."""
    if not ids:
        return
    with translate_errors(address):
        async with client.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.delete(index_key(prefix, task_id.decode()))
            await pipe.execute()


async def register_queues(
    client: Client, prefix: str, address: str, queues: set[str], registry: str | None = None
) -> None:
    """Add ``queues`` to the registry (before their tasks, or controls, are written)."""
    if queues:
        with translate_errors(address):
            await client.sadd(registry or registry_key(prefix), *sorted(queues))


async def forget_queue(
    client: Client,
    prefix: str,
    address: str,
    queue: str,
    empty: Callable[[], Awaitable[bool]],
    registry: str | None = None,
) -> None:
    """Drop a queue a purge emptied (or whose last control was deleted) from the registry,
    then check again: an enqueue (a put_control) that registered the queue before the removal
    and wrote after the first check puts it back here."""
    key = registry or registry_key(prefix)
    with translate_errors(address):
        await client.srem(key, queue)
    if not await empty():
        with translate_errors(address):
            await client.sadd(key, queue)

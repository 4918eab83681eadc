"""A queue of a big tenant and a small one, as the claim-order benchmarks fill it
(``bench.fairness``, ``bench.redis_order``): ``deep`` tasks of ``tenant:big`` due a minute
ago, then ``shallow`` tasks of ``tenant:small`` due a second ago (younger than every big task,
so behind all of them in strict order)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from rdq.spi import DEFAULT_PRIORITY, Envelope, Storage

__all__ = ["fill_big_and_small"]

_CHUNK = 1000
"""Big tasks per ``enqueue_batch``."""


async def fill_big_and_small(
    store: Storage,
    queue: str,
    deep: int,
    shallow: int,
    *,
    big_priorities: Sequence[int] = (DEFAULT_PRIORITY,),
) -> None:
    """Enqueue the big tenant's ``deep`` tasks (ids ``QUEUE-big-N``, priorities taken from
    ``big_priorities`` in turn) and then the small tenant's ``shallow`` ones (``QUEUE-small-N``,
    the default priority), all of handler ``import``."""
    now = await store.now()
    for start in range(0, deep, _CHUNK):
        await store.enqueue_batch(
            [
                Envelope(
                    id=f"{queue}-big-{n}",
                    queue=queue,
                    handler_ref="import",
                    keys=["tenant:big"],
                    priority=big_priorities[n % len(big_priorities)],
                    next_attempt_at=now - timedelta(seconds=60),
                )
                for n in range(start, min(deep, start + _CHUNK))
            ]
        )
    await store.enqueue_batch(
        [
            Envelope(
                id=f"{queue}-small-{n}",
                queue=queue,
                handler_ref="import",
                keys=["tenant:small"],
                next_attempt_at=now - timedelta(seconds=1),
            )
            for n in range(shallow)
        ]
    )

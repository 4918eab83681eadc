"""A process that acknowledges writes one by one, for the durability tests to SIGKILL.

``python acker.py URL QUEUE``: enqueues ``QUEUE-n`` for n = 0, 1, … and prints ``enqueued ID``
after each enqueue returned; every third task it also claims one and completes it, printing
``completed ID`` after ``complete`` returned. It runs until it is killed.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta

from rdq import open_storage
from rdq.spi import Attempt, Envelope, Outcome


async def main(url: str, queue: str) -> None:
    async with open_storage(url) as store:
        n = 0
        while True:
            task_id = f"{queue}-{n}"
            await store.enqueue(Envelope(id=task_id, queue=queue, handler_ref="m:f"))
            print("enqueued", task_id, flush=True)
            if n % 3 == 2:
                (claim,) = await store.claim_due(queue, 1, timedelta(minutes=5))
                attempt = Attempt(
                    number=1, outcome=Outcome.SUCCEEDED, finished_at=datetime.now(UTC)
                )
                await store.complete(claim.task.id, claim.token, attempt)
                print("completed", claim.task.id, flush=True)
            n += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

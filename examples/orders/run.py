"""Submit a few orders and work them in one process, then show where each task ended.

python examples/orders/run.py                       # in ./rdq.db (or memory:// without rdq-sqlite)
RDQ_STORAGE=postgresql://user@localhost/shop python examples/orders/run.py

The store is chosen as every rdq command chooses it (rdq.storage_url): RDQ_STORAGE, else the
SQLite file rdq.db in the working directory; without rdq-sqlite this example, which works its
tasks in the same process, falls back to memory:// and says so.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from tasks import app

import rdq
from rdq.spi import Status


async def main(url: str) -> int:
    app.load_config(Path(__file__).with_name("rdq.toml"))
    async with rdq.open_storage(url) as storage:
        await storage.migrate()
        client = rdq.Client(storage, app)
        subs = await client.submit_many(
            [
                rdq.Submission("charge_card", {"order_id": f"o-{i}", "amount_cents": 1999})
                for i in range(5)
            ]
            + [
                rdq.Submission("charge_card", {"order_id": "o-big", "amount_cents": 500_000}),
                rdq.Submission("charge_card", {"order_id": "o-bad", "amount_cents": "lots"}),
                rdq.Submission("send_receipt", {"to": "ada@example.com"}),
                rdq.Submission("send_receipt", {"to": "nobody"}),
            ]
        )
        worker = rdq.Worker(app, storage, maintenance=False)
        running = asyncio.create_task(worker.run())
        try:
            for _ in range(1200):  # up to a minute
                tasks = [await client.get(s.id) for s in subs]
                if all(t.status in (Status.SUCCEEDED, Status.DEAD) for t in tasks):
                    break
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            await running
        for task in tasks:
            last = task.attempts[-1] if task.attempts else None
            error = f"  {last.error_type}: {last.error_message}" if last and last.error_type else ""
            print(
                f"{task.id[:8]} {task.handler_ref:<13} {task.status.value:<9} "
                f"after {task.attempt_count} attempt(s){error}"
            )
        return 0 if all(t.status in (Status.SUCCEEDED, Status.DEAD) for t in tasks) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(rdq.storage_url(or_memory=True))))

"""The application the memory benchmark's ``rdq worker`` runs: queue ``big`` (concurrency 50),
handler ``hold`` keeps its payload for ``MEMORY_HOLD`` seconds (default 2) and returns its
size, so all the tasks of a batch are in flight at once."""

from __future__ import annotations

import asyncio
import os

import rdq

HOLD = float(os.environ.get("MEMORY_HOLD", "2"))

app = rdq.App()
app.queue("big", concurrency=50)


@app.handler("hold", queue="big")
async def hold(payload: dict[str, str]) -> int:
    await asyncio.sleep(HOLD)
    return len(payload["blob"])

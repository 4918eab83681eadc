"""The application the held-xmin benchmark's ``rdq worker`` processes run: a no-op handler on
queue ``q``, concurrency 10."""

from __future__ import annotations

import rdq

app = rdq.App()
app.queue("q", concurrency=10)


@app.handler("noop", queue="q")
async def noop(payload: object) -> None:
    return None

"""The application the held-xmin benchmark's ``rdq worker`` processes run: a no-op handler on
queue ``q``, concurrency 10, with the limit ``XMIN_LIMIT`` names (``--limit``):

- ``none`` (the default): no limit;
- ``concurrency``: ``Concurrency(1000)`` on the queue, a limit that never binds (the workers
  have fewer slots), as ``bench.limits``'s ``loose-concurrency-queue``;
- ``rate``: ``Rate(1_000_000, burst=1_000_000)`` on the queue, the same for a rate
  (``loose-rate-queue``).

Either puts the queue's claims through its control row (``rdq.control``), which they rewrite."""

from __future__ import annotations

import os

import rdq

LIMITS: dict[str, list[rdq.Concurrency | rdq.Rate]] = {
    "none": [],
    "concurrency": [rdq.Concurrency(1000)],
    "rate": [rdq.Rate(1_000_000, burst=1_000_000)],
}

app = rdq.App()
app.queue("q", concurrency=10, limits=LIMITS[os.environ.get("XMIN_LIMIT", "none")])


@app.handler("noop", queue="q")
async def noop(payload: object) -> None:
    return None

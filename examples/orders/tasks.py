"""An rdq application: the queues of a small shop and the handlers that run their tasks.

Run a worker for it (from the ``examples/orders`` directory)::

    rdq worker tasks:app --storage postgresql://user@localhost/shop --config rdq.toml

and submit tasks from anywhere with ``rdq.Client``/``rdq.SyncClient`` (see ``submit.py``).
"""

from __future__ import annotations

import asyncio
import random

import msgspec

import rdq

app = rdq.App()
# Code config; rdq.toml (loaded by `rdq worker --config` or app.load_config) can override it.
app.queue("payments", max_attempts=5, backoff=rdq.Backoff.exponential(base=0.2, cap=2.0))
app.queue("emails", max_attempts=3, timeout=10, non_retryable=[ValueError])


class Charge(msgspec.Struct):
    """The payload of a ``charge_card`` task (converted before the handler is called)."""

    order_id: str
    amount_cents: int


class GatewayDeclined(Exception):
    """The card was declined: retrying will not help."""


@app.handler("charge_card", queue="payments")
async def charge_card(charge: Charge, ctx: rdq.TaskContext) -> None:
    """Charge a card through a flaky gateway: network errors are retried with backoff,
    a decline dead-letters the task at once, a 429 is retried when the gateway says."""
    await asyncio.sleep(0.01)  # the call to the gateway
    if charge.amount_cents <= 0:
        raise rdq.Permanent(f"order {charge.order_id}: nothing to charge")
    roll = random.random()
    if roll < 0.3:
        raise ConnectionError("gateway connection reset")
    if roll < 0.35:
        raise rdq.RetryAfter(0.5, "gateway rate limit")
    if charge.amount_cents > 100_000:
        raise rdq.Permanent("declined: over the card limit") from GatewayDeclined()


@app.handler("send_receipt", queue="emails")
def send_receipt(payload: dict[str, str]) -> None:
    """A plain function: runs in the worker's thread pool."""
    if "@" not in payload["to"]:
        raise ValueError(f"not an email address: {payload['to']!r}")  # non-retryable here

"""The shop whose payment provider goes down: the application of the triage walkthrough
(docs/operations.md, "A real triage").

Three handlers on the queue ``payments`` (and a slow newsletter on ``emails``, long exports on
``exports``):

* ``payments.charge_card`` charges an order through the payment gateway;
* ``payments.refund`` refunds one through the same gateway;
* ``payments.send_receipt`` mails the receipt — and has a real bug: it reads
  ``order["customer"]["email"]``, which orders placed by phone do not have.

While ``GATEWAY.up`` is False the gateway answers 502 to charges and never answers refunds,
as a provider in the middle of an outage does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import rdq

app = rdq.App()
app.queue(
    "payments",
    max_attempts=3,
    backoff=rdq.Backoff.fixed(0.05),
    timeout=2.0,
    concurrency=50,
)


# A short lease, renewed every third of it while a send runs: a send cancelled from the
# console is let go within seconds.
app.queue("emails", max_attempts=3, timeout=120.0, lease=6.0, concurrency=5)
# Nightly exports: long jobs, twenty at a time per worker, each holding a lease of a minute
# (renewed while it runs): a worker killed mid-export leaves its tasks held until then.
app.queue("exports", max_attempts=3, timeout=900.0, lease=60.0, concurrency=20)


class GatewayDown(Exception):
    """The payment gateway answered 5xx."""


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time."""


@dataclass
class Gateway:
    """A stand-in for the payment provider's API."""

    host: str = "api.psp.example"
    up: bool = True

    async def charge(self, order_id: int, amount_cents: int) -> str:
        await asyncio.sleep(0.002)
        if not self.up:
            raise GatewayDown(f"502 Bad Gateway from {self.host} (charging order {order_id})")
        return f"ch_{order_id}"

    async def refund(self, order_id: int) -> None:
        await asyncio.sleep(0.002)
        if not self.up:
            raise GatewayTimeout(f"no answer from {self.host} within 10s (refund of {order_id})")


GATEWAY = Gateway()


@app.handler("payments.charge_card", queue="payments")
async def charge_card(order: dict[str, Any]) -> None:
    await GATEWAY.charge(order["order_id"], order["amount_cents"])


@app.handler("payments.refund", queue="payments")
async def refund(order: dict[str, Any]) -> None:
    await GATEWAY.refund(order["order_id"])


@app.handler("emails.newsletter", queue="emails")
async def newsletter(issue: dict[str, Any]) -> None:
    """A slow send: each one holds its worker slot for a while."""
    await asyncio.sleep(issue.get("seconds", 60))


@app.handler("exports.csv", queue="exports")
async def export_csv(job: dict[str, Any]) -> None:
    """A long export: it holds its worker slot for minutes."""
    await asyncio.sleep(job.get("seconds", 300))


@app.handler("payments.send_receipt", queue="payments")
async def send_receipt(order: dict[str, Any]) -> None:
    address = order["customer"]["email"]  # phone orders have no email: KeyError
    await asyncio.sleep(0.001)
    if not address:
        raise ValueError("empty address")

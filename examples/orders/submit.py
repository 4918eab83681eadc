"""Submitting from code that is not async (a Django view, a Flask route, a script).

RDQ_STORAGE_URL=postgresql://user@localhost/shop python examples/orders/submit.py
"""

from __future__ import annotations

import os

import rdq

with rdq.SyncClient(os.environ.get("RDQ_STORAGE_URL", "memory://")) as client:
    # The id makes the submission idempotent: submitting "order-42" again changes nothing.
    sub = client.submit(
        "charge_card",
        {"order_id": "42", "amount_cents": 1999},
        queue="payments",
        id="order-42",
        headers={"trace-id": "5b8aa5a2"},
    )
    print(f"task {sub.id} {'stored' if sub.created else 'already there'}")

"""Submitting from code that is not async (a Django view, a Flask route, a script).

RDQ_STORAGE=postgresql://user@localhost/shop python examples/orders/submit.py
cd examples/orders && python submit.py              # the SQLite file ./rdq.db

With no URL, the client opens the store RDQ_STORAGE names, else ./rdq.db (said on standard
error), as every rdq command does; never a store in memory, which would be gone, with the task,
when this script exits. Run it where the worker runs (`rdq worker tasks:app` in
examples/orders) and both use the same ./rdq.db.
"""

from __future__ import annotations

import rdq

with rdq.SyncClient() as client:
    # The id makes the submission idempotent: submitting "order-42" again changes nothing.
    sub = client.submit(
        "charge_card",
        {"order_id": "42", "amount_cents": 1999},
        queue="payments",
        id="order-42",
        headers={"trace-id": "5b8aa5a2"},
    )
    print(f"task {sub.id} {'stored' if sub.created else 'already there'}")

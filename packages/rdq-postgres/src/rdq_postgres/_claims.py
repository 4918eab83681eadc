"""``claim_due``: the claim statements and the reading of their rows.

A queue that no control restricts is claimed by ``claim.sql``: one statement, ``FOR UPDATE
SKIP LOCKED``, highest priority then oldest due, by the database clock, appending a
``LEASE_EXPIRED`` record to each lapsed lease it reclaims. A queue that a control restricts
(a pause, a gate, a concurrency or rate limit, fair shares, priority aging) is claimed with
``claim_controlled.sql`` instead, which honours the controls in its one statement:
``claim.sql`` refuses such a queue (SQLSTATE RQ423, raised as
:class:`~rdq_postgres._errors.QueueControlled`), and the store remembers the queues it refused
until ``claim_controlled.sql`` says that no control restricts them any more.

The rules of a controlled claim are the schema's functions ``unrestricted()``,
``claim_controlled()`` and ``live_leases()`` (``sql/migrations/0005_flow_control.sql`` and
the migrations after it; docs/postgres-schema.md); ``claim_controlled()``'s lease and
``LEASE_EXPIRED`` record are ``claim.sql``'s, kept in step by hand
(``tests/test_flow_control.py`` compares the two paths). Before a controlled claim the store
raises the queue's lease floor, where counts of its live leases start (``raise_lease_floor.sql``,
schema version 17), at most once a second per queue: in a transaction of its own, since the
queue's lease writers wait for its commit.
"""

from __future__ import annotations

import time
from datetime import timedelta

import asyncpg

from rdq.spi import Claimed
from rdq_postgres._codec import envelope_from_row, micros
from rdq_postgres._connection import Database
from rdq_postgres._errors import QueueControlled
from rdq_postgres._queries import Queries

__all__ = ["LEASE_FLOOR_RAISE_EVERY", "claim_due"]

LEASE_FLOOR_RAISE_EVERY = 1.0
"""Seconds between a store's raises of the lease floor of a queue it claims under a control
(the schema raises it at most once a second, whoever asks)."""


async def claim_due(
    db: Database,
    sql: Queries,
    controlled: set[str],
    raised: dict[str, float],
    queue: str,
    limit: int,
    lease: timedelta,
    worker_id: str | None,
) -> list[Claimed]:
    """Claim up to ``limit`` due tasks of ``queue`` in claim order. ``controlled`` is the
    store's set of the queues ``claim.sql`` refused (a control restricts them): updated here,
    so that they are claimed with ``claim_controlled.sql`` until it says that none does any
    more; ``raised`` holds when the store last raised each queue's lease floor (monotonic
    seconds), also updated here."""
    values = {"queue": queue, "limit": limit, "lease_us": micros(lease), "worker_id": worker_id}
    rows: list[asyncpg.Record] | None = None
    if queue not in controlled:
        try:
            rows = await db.fetch(sql.claim, **values)
        except QueueControlled:
            controlled.add(queue)
    if rows is None:  # a control restricts the queue (or did at its last claim)
        await _raise_lease_floor(db, sql, raised, queue)
        rows = await db.fetch(sql.claim_controlled, **values)
        if not rows[0]["controlled"]:
            controlled.discard(queue)
        rows = [row for row in rows if row["id"] is not None]
    if len(rows) > 1:
        rows.sort(key=lambda r: r["claimed_rank"])  # the claim order (RETURNING has none)
    # each row is let go once decoded, so a batch of large payloads is not held twice
    # (raw and decoded) until the last is decoded
    rows.reverse()
    claimed = []
    while rows:
        row = rows.pop()
        claimed.append(Claimed(envelope_from_row(row), row["token"]))
    return claimed


async def _raise_lease_floor(
    db: Database, sql: Queries, raised: dict[str, float], queue: str
) -> None:
    """Raise the lease floor of ``queue`` unless this store did so within the last
    :data:`LEASE_FLOOR_RAISE_EVERY` seconds."""
    now = time.monotonic()
    if now - raised.get(queue, -LEASE_FLOOR_RAISE_EVERY) < LEASE_FLOOR_RAISE_EVERY:
        return
    raised[queue] = now
    await db.execute(sql.raise_lease_floor, queue=queue)

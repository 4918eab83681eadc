"""Test hooks of the PostgreSQL store (not part of the storage contract): write a stored task
that does not decode, as the compliance kit's ``corrupt_task`` fixture asks."""

from __future__ import annotations

from rdq.spi import bounds
from rdq_postgres._store import PostgresStorage

__all__ = ["put_corrupt_task"]

# A row no reader can decode but that the schema's constraints accept (they refuse the worse
# ones; tests/test_poison_rows.py writes every kind of bad value).
_UNDECODABLE = """
INSERT INTO {schema}.task (id, queue, handler_ref, payload, status, next_attempt_at, retry)
VALUES ($1, $2, 'app.tasks:send', '{{"n": 1}}', 'PENDING', now() - interval '2 hours',
        '{{"max_attempts": "lots"}}')
"""
_LOWER = "SELECT {schema}.lower_floor($1, now() - interval '2 hours')"
_DEEP = "UPDATE {schema}.task SET payload = $2::json, retry = NULL WHERE id = $1"


async def put_corrupt_task(
    store: PostgresStorage, queue: str, task_id: str, *, kind: str = "undecodable"
) -> None:
    """Store, with plain SQL on the store's pool, a PENDING task of ``queue`` due two hours ago
    whose retry override does not decode (``kind="deep"``: whose payload nests 5000 levels).
    ``kind="far_time"`` raises ``ValueError``: the schema refuses times outside the years
    1-9999 (``task_time_range_check``)."""
    bounds.check_queue(queue)
    bounds.check_task_id(task_id)
    if kind not in ("undecodable", "deep"):
        raise ValueError(f"the schema cannot hold a corrupt task of kind {kind!r}")
    schema = f'"{store.config.schema}"'
    async with store._db.pool.connection() as conn, conn.transaction():
        await conn.execute(_UNDECODABLE.format(schema=schema), task_id, queue)
        # due before the claims may have gone: lowers the queue's claim floor (migration 0014)
        await conn.execute(_LOWER.format(schema=schema), queue)
        if kind == "deep":
            await conn.execute(_DEEP.format(schema=schema), task_id, "[" * 5000 + "]" * 5000)

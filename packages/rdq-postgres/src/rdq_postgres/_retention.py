"""What leaves the PostgreSQL store: ``expire_tasks``, the retention step, one ``DELETE`` of
the listed finished tasks whose status time is before the cut-off (``expire_tasks.sql``; the
engine archived those tasks first); and ``held_payload_refs``, the payload references the tasks
left hold (``held_payload_refs.sql``, on the index of migration 0012)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rdq_postgres._connection import Database
from rdq_postgres._queries import Queries

__all__ = ["expire_tasks", "held_payload_refs"]


async def expire_tasks(
    db: Database, sql: Queries, queue: str, ids: Sequence[str], before: datetime
) -> int:
    """How many of the listed tasks were deleted."""
    return await db.execute(sql.expire_tasks, queue=queue, ids=list(ids), before=before)


async def held_payload_refs(db: Database, sql: Queries, refs: Sequence[str]) -> set[str]:
    """The references among ``refs`` some task carries."""
    rows = await db.fetch(sql.held_payload_refs, refs=list(refs))
    return {row["ref"] for row in rows}

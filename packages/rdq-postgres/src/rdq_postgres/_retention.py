"""What leaves the PostgreSQL store: ``expire_tasks``, the retention step, one ``DELETE`` of
the listed finished tasks whose status time is before the cut-off (``expire_tasks.sql``; the
engine archived those tasks first)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rdq_postgres._connection import Database
from rdq_postgres._queries import Queries

__all__ = ["expire_tasks"]


async def expire_tasks(
    db: Database, sql: Queries, queue: str, ids: Sequence[str], before: datetime
) -> int:
    """How many of the listed tasks were deleted."""
    return await db.execute(sql.expire_tasks, queue=queue, ids=list(ids), before=before)

"""An experiment, not a product: rdq with a prototype ``complete_many`` for PostgreSQL.

``--systems rdq,rdq_proto`` runs it beside rdq. The worker's store is the real Postgres plugin,
given (on that one instance) the ``batch_complete`` capability and a ``complete_many`` that runs
``sql/complete_many.sql`` — one statement for many completions, fenced per task — so the real
engine (its ``Completer``) batches completions as it will once the plugin has the capability.
Everything else, including the verification, is the rdq runner's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from bench.e2e import rdq_runner
from rdq.errors import NotFound, StaleClaim
from rdq.spi import Capabilities, Completion

__all__ = ["System", "Worker"]

_SQL = (Path(__file__).parent / "sql" / "complete_many.sql").read_text()
_encode = msgspec.json.Encoder().encode


def _patch(storage: Any) -> None:
    """Give this one store instance ``batch_complete`` and the one-statement ``complete_many``."""
    plain = storage.capabilities()

    def capabilities() -> Capabilities:
        return Capabilities(
            notify=plain.notify,
            filter_pushdown=plain.filter_pushdown,
            batch_enqueue=plain.batch_enqueue,
            batch_complete=True,
        )

    async def complete_many(
        completions: Sequence[Completion],
    ) -> list[StaleClaim | NotFound | None]:
        rows = await storage._fetch(  # the plugin's own pool and error translation
            _SQL,
            [c.task_id for c in completions],
            [c.token for c in completions],
            [_encode(c.attempt).decode() for c in completions],
            [c.attempt.error_type for c in completions],
        )
        by_id = {r["id"]: r for r in rows}
        results: list[StaleClaim | NotFound | None] = []
        for c in completions:
            row = by_id[c.task_id]
            if row["done"]:
                results.append(None)
            else:
                results.append(StaleClaim(c.task_id) if row["found"] else NotFound(c.task_id))
        return results

    storage.capabilities = capabilities
    storage.complete_many = complete_many


class System(rdq_runner.System):
    """The rdq producer side, unchanged."""

    name = "rdq_proto"


class Worker(rdq_runner.Worker):
    """The rdq worker on a store patched with the prototype ``complete_many``."""

    async def open(self) -> None:
        await super().open()
        _patch(self._storage)

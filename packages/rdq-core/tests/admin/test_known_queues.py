"""A read that finds nothing refuses a queue nothing knows (a typo), and asks the store what it
knows once for the reads that come together: a console page's empty views of one queue, the
overview's DLQ groups of every queue."""

from __future__ import annotations

import asyncio

import pytest

from rdq.admin import TaskAdmin
from rdq.errors import UnknownName
from rdq.spi import Envelope
from rdq_memory import MemoryStorage

pytestmark = pytest.mark.asyncio


async def test_empty_reads_of_known_queues_share_one_lookup_and_a_typo_is_refused() -> None:
    async with MemoryStorage() as store:
        for queue in ("reports", "emails", "exports"):
            await store.enqueue(Envelope(id=f"{queue}-1", queue=queue, handler_ref="h"))
        lookups = 0
        list_queues = store.list_queues

        async def counted():  # type: ignore[no-untyped-def]
            nonlocal lookups
            lookups += 1
            return await list_queues()

        store.list_queues = counted  # type: ignore[method-assign]
        admin = TaskAdmin(store)
        groups = await asyncio.gather(
            *(admin.dlq_groups(q) for q in ("reports", "emails", "exports") * 5)
        )
        assert groups == [[]] * 15, "no DLQ anywhere: every answer empty"
        assert lookups == 1, "fifteen empty reads at once, one lookup of the names"
        assert await admin.breakers("reports") == [] and await admin.pauses("emails") == []
        assert lookups == 1, "known a moment ago: no lookup"
        with pytest.raises(UnknownName) as refused:
            await admin.dlq_groups("reprots")
        assert refused.value.suggestion == "reports" and not refused.value.forceable
        assert lookups == 2, "a name not known lately is looked up"

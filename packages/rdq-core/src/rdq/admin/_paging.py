"""Pages of tasks bounded in bytes as well as in count.

A page of 1,000 tasks that each carry a 1 MiB payload and a long history would be gigabytes:
:func:`bounded_page` reads the store in growing chunks and stops once the page's tasks encode
to more than ``max_bytes``, returning a cursor from which the next page continues. It never
returns an empty page while tasks remain (a single task larger than the budget is a page of
its own), and the node holds at most one chunk beyond the budget in memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rdq.spi import Envelope, encode_envelope

__all__ = ["Fetch", "bounded_page"]

Fetch = Callable[[int, str | None], Awaitable[tuple[list[Envelope], str | None]]]
"""``fetch(limit, cursor)``: one page of at most ``limit`` tasks after ``cursor``."""

FIRST_CHUNK = 10
MAX_CHUNK = 100


async def bounded_page(
    fetch: Fetch, limit: int, cursor: str | None, max_bytes: int
) -> tuple[list[Envelope], str | None]:
    """Up to ``limit`` tasks after ``cursor`` whose encoded size stays within ``max_bytes``
    (or one task, if the first alone is larger), and the cursor of what follows."""
    out: list[Envelope] = []
    used = biggest = 0
    chunk = min(limit, FIRST_CHUNK)
    while True:
        start, before = cursor, len(out)
        tasks, cursor = await fetch(chunk, start)
        for i, task in enumerate(tasks):
            size = len(encode_envelope(task))
            if out and used + size > max_bytes:
                if i == 0:
                    return out, start
                # Keep tasks[:i]: read them again to learn the cursor that follows them.
                kept, after = await fetch(i, start)
                return out[:before] + kept, after
            out.append(task)
            used += size
            biggest = max(biggest, size)
        if cursor is None or len(out) >= limit:
            return out, cursor
        room = max(max_bytes - used, 0)
        chunk = max(1, min(limit - len(out), MAX_CHUNK, 2 * chunk, room // max(biggest, 1)))

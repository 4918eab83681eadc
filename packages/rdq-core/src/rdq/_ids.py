"""Task ids made by rdq: version-7 UUIDs (RFC 9562) as 32 hex digits.

The first 12 digits are the Unix time in milliseconds and the other 74 bits are random, so ids
made close together sort close together. A store keeps its tasks in an index by id (the
PostgreSQL primary key, SQLite's table, MongoDB's ``_id``): new ids go in at its right edge,
and the tasks a worker claims and completes together sit on a few of its pages, where random
(version-4) ids put every task on a page of its own. Ids stay opaque to the contract: a caller
may pass any id of its own.
"""

from __future__ import annotations

import os
import time

_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}
"""The RFC 9562 variant digit (10xx) for a random hex digit."""


def new_task_ids(count: int) -> list[str]:
    """``count`` version-7 UUIDs as 32 hex digits, sharing the current millisecond, their
    random bits from one ``os.urandom`` call."""
    if count <= 0:
        return []
    stamp = f"{time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF:012x}"
    digits = os.urandom(10 * count).hex()  # 20 digits per id, of which 19 are used
    ids = []
    for start in range(0, 20 * count, 20):
        raw = digits[start : start + 19]
        ids.append(f"{stamp}7{raw[:3]}{_VARIANT[raw[3]]}{raw[4:]}")
    return ids

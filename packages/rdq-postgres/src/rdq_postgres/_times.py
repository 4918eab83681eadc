"""``timestamptz`` to and from Python, for every value a column can hold.

PostgreSQL holds times from 4713 BC to 294276 AD and ``±infinity``; Python's ``datetime`` only
the years 1–9999. asyncpg's own codec raises ``OverflowError`` on a time past 9999 (which
fails the whole statement's result, after the statement ran) and reads ``infinity`` as a naive
``datetime.max``. The codec registered here reads such a time as a :class:`FarTime`: the
nearest ``datetime`` in range (aware, UTC), carrying the stored value, which a row decoder
reports as corrupt. Schema version 4 refuses such times in the task table
(``task_time_range_check``); this keeps a read total where that constraint was dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

__all__ = ["FarTime", "register"]

_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_INFINITY = 2**63 - 1
_NEGATIVE_INFINITY = -(2**63)
_MICROSECONDS_PER_YEAR = 365.2425 * 86400 * 1_000_000


class FarTime(datetime):
    """A stored time outside the years 1–9999: reads as the nearest time in range; ``stored``
    says what the column holds, ``microseconds`` is its raw value (since 2000-01-01 UTC)."""

    stored: str
    microseconds: int

    @classmethod
    def of(cls, microseconds: int) -> FarTime:
        edge = datetime.max if microseconds > 0 else datetime.min
        far = cls.combine(edge.date(), edge.time(), UTC)
        far.microseconds = microseconds
        if microseconds == _INFINITY:
            far.stored = "infinity"
        elif microseconds == _NEGATIVE_INFINITY:
            far.stored = "-infinity"
        else:
            far.stored = f"a time in the year {2000 + int(microseconds / _MICROSECONDS_PER_YEAR)}"
        return far


def _decode(value: tuple[int]) -> datetime:
    microseconds = value[0]
    try:
        return _PG_EPOCH + timedelta(microseconds=microseconds)
    except OverflowError:
        return FarTime.of(microseconds)


def _encode(value: datetime) -> tuple[int]:
    if isinstance(value, FarTime):
        return (value.microseconds,)
    return ((value - _PG_EPOCH) // _MICROSECOND,)


async def register(conn: asyncpg.Connection) -> None:
    """Read and write ``timestamptz`` on ``conn`` with this module's codec."""
    await conn.set_type_codec(
        "timestamptz", schema="pg_catalog", encoder=_encode, decoder=_decode, format="tuple"
    )

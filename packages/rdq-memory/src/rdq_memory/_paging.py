"""Keyset paging over ``(time, id)`` keys, as every listing of the contract pages."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TypeVar

__all__ = ["Key", "keyset_page"]

T = TypeVar("T")
Key = tuple[datetime, str]


def keyset_page(
    keyed: Iterable[tuple[Key, T]], after: Key | None, limit: int, *, descending: bool = False
) -> tuple[list[T], Key | None]:
    """Up to ``limit`` items whose key comes after ``after`` in key order (descending when
    asked), and the key of the last one when more follow (else ``None``)."""
    if descending:
        rows = sorted((row for row in keyed if after is None or row[0] < after), reverse=True)
    else:
        rows = sorted(row for row in keyed if after is None or row[0] > after)
    chunk = rows[:limit]
    last = chunk[-1][0] if len(rows) > limit else None
    return [item for _, item in chunk], last

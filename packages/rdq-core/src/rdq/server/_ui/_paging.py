"""Where a paged list is: the page size chosen (``size``), the position of its first row
(``at``, carried along with the cursor) and the total when it is known, so a list reads
"51–100 of 10,000" and offers 25, 50, 100 or 200 rows a page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_SIZE", "SIZES", "Paging", "paging_of"]

SIZES = (25, 50, 100, 200)
"""The page sizes offered."""
DEFAULT_SIZE = 50
_MAX_AT = 10**12


@dataclass(frozen=True)
class Paging:
    """One page's place in its list: ``size`` rows asked, ``at`` rows before it."""

    size: int = DEFAULT_SIZE
    at: int = 0
    error: str | None = None
    """Why a ``size`` or ``at`` given was not taken (the default was used instead)."""

    def params(self, *, at: int | None = None) -> dict[str, str]:
        """The query parameters that keep this page size (and a position ``at``)."""
        kept = {"size": str(self.size)} if self.size != DEFAULT_SIZE else {}
        if at:
            kept["at"] = str(at)
        return kept

    def position(
        self, shown: int, total: int | None, estimated: bool, more: bool
    ) -> dict[str, Any]:
        """``first``–``last`` of ``total`` for a page showing ``shown`` rows. The total is the
        state's count (``estimated``: the store estimates it) when the list is not filtered;
        without one it is known only on the last page (``more``: a next page follows)."""
        first, last = (self.at + 1, self.at + shown) if shown else (self.at, self.at)
        if not more:
            total = last  # the end of the list: whatever the count said, this is how many
            estimated = False
        elif total is not None and total < last:
            total = None  # the count is older than the page (tasks arrived): not shown
        return {"first": first, "last": last, "total": total, "estimated": estimated}


def paging_of(params: Any, has_cursor: bool) -> Paging:
    """The page size and position a query string asks for; a value that is not one of
    :data:`SIZES` (or a position that is not a count) falls back to the default, saying why.
    Without a cursor the page is the first, whatever ``at`` says."""
    size, error = DEFAULT_SIZE, None
    raw = params.get("size")
    if raw:
        if raw.isdigit() and int(raw) in SIZES:
            size = int(raw)
        else:
            error = f"size: choose {', '.join(map(str, SIZES[:-1]))} or {SIZES[-1]} rows a page"
    at = 0
    raw_at = params.get("at")
    if has_cursor and raw_at and raw_at.isdigit() and int(raw_at) < _MAX_AT:
        at = int(raw_at)
    return Paging(size=size, at=at, error=error)

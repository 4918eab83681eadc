"""Cron ticks in a time zone, across its daylight-saving changes.

cronsim walks the calendar fields of an expression; here it is only ever given naive wall
clock times, and the mapping from a wall clock tick to instants is done on this side, with
Debian cron's rules (the rules cronsim documents):

- an expression at fixed times (5 fields, minute and hour without ``*``) ticks once at a wall
  time the autumn change repeats (its first occurrence), and at a wall time the spring change
  skips it ticks at the end of the gap;
- any other expression ticks at every instant whose wall clock matches: twice in a repeated
  hour, not at all in a skipped one.

Why not hand cronsim an aware datetime: started inside a repeated hour it reads the wall clock
without its fold (ticks of the first pass come out after ``now``, the previous day's tick comes
out as the last one), its aware arithmetic skips ticks at a half-hour change (Lord Howe), and
walking backwards near Chatham's 02:45 change it does not return at all.

Ticks are searched from ``margin`` before/after the wall clock of ``now``: the spread of the
zone's UTC offsets within a day of the instants concerned (0 for a zone without changes), so
that no instant of a wall time on the other side of a change is passed over.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

__all__ = ["last_tick", "next_tick"]

_DAY = timedelta(days=1)
_SECOND = timedelta(seconds=1)


def next_tick(expr: str, zone: ZoneInfo, now: datetime) -> datetime | None:
    """The first tick of ``expr`` in ``zone`` after ``now`` (UTC), or None if there is none."""
    fixed = _at_fixed_times(expr)
    best: datetime | None = None
    start = _wall(now, zone) - _margin(zone, now)
    for wall in _walls(expr, start, reverse=False):
        if best is not None and wall > _wall(best, zone) + _margin(zone, best):
            return best  # no later wall time can be an instant before ``best``
        for instant in _instants(wall, zone, fixed):
            if instant > now and (best is None or instant < best):
                best = instant
    return best


def last_tick(expr: str, zone: ZoneInfo, now: datetime) -> datetime | None:
    """The latest tick of ``expr`` in ``zone`` at or before ``now`` (UTC), or None."""
    fixed = _at_fixed_times(expr)
    best: datetime | None = None
    start = _wall(now, zone) + _margin(zone, now) + _SECOND
    for wall in _walls(expr, start, reverse=True):
        if best is not None and wall < _wall(best, zone) - _margin(zone, best):
            return best  # no earlier wall time can be an instant after ``best``
        for instant in _instants(wall, zone, fixed):
            if instant <= now and (best is None or instant > best):
                best = instant
    return best


def _at_fixed_times(expr: str) -> bool:
    """True if ``expr`` runs at fixed times of day (cron's rule for DST changes)."""
    fields = expr.split()
    return len(fields) == 5 and not fields[0].startswith("*") and not fields[1].startswith("*")


def _walls(expr: str, start: datetime, *, reverse: bool) -> Iterator[datetime]:
    """The wall clock times (naive) matching ``expr``, from ``start`` on or back."""
    try:
        yield from CronSim(expr, start, reverse=reverse)
    except StopIteration:  # cronsim gives up after 50 years without a match
        return


def _instants(wall: datetime, zone: ZoneInfo, fixed: bool) -> list[datetime]:
    """The instants (UTC) at which wall clock time ``wall`` ticks in ``zone``."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if _wall(first, zone) == wall:
        return [first] if fixed or first == second else [first, second]
    if not fixed:
        return []  # skipped by a change
    return [_change_between(zone, second, first)]


def _change_between(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first second in (before, after] at which ``zone`` has the offset it has at
    ``after``: the end of the gap a spring change makes."""
    offset = after.astimezone(zone).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def _wall(at: datetime, zone: ZoneInfo) -> datetime:
    return at.astimezone(zone).replace(tzinfo=None)


def _margin(zone: ZoneInfo, at: datetime) -> timedelta:
    offsets = [(at + shift).astimezone(zone).utcoffset() for shift in (-_DAY, 0 * _DAY, _DAY)]
    known = [offset for offset in offsets if offset is not None]
    return max(known) - min(known)

"""Cron ticks through the daylight-saving changes of several zones, from any instant.

Two oracles, neither of which starts inside a change:
- cron's rule for a fixed daily time, computed from the zone alone: a wall time that exists
  ticks at its first occurrence (the first pass through an hour the autumn change repeats),
  a wall time the spring change skips ticks at the first instant after the gap;
- the same rules applied minute by minute to the instants around ``now``, with cronsim (on
  naive wall times) saying which wall times match, for expressions that tick at least daily:
  ``last_tick`` and ``next_tick`` from any instant — inside a repeated hour too — must agree.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from rdq.schedules import Schedule

YEAR = 2026
ZONES = [
    "Europe/Berlin",  # changes at 02:00/03:00 local
    "America/New_York",  # 02:00 local, in March and November
    "Australia/Sydney",  # southern hemisphere: repeats in April, skips in October
    "Australia/Lord_Howe",  # a half-hour change
    "Pacific/Chatham",  # changes at 02:45/03:45 local
    "America/Santiago",  # changes at midnight: 00:00 skipped or repeated
    "Asia/Kolkata",  # no change
]
EXPRESSIONS = [
    "30 2 * * *",
    "0 0 * * *",
    "45 2 * * *",
    "15,45 1-3 * * *",
    "0 */2 * * *",
    "*/20 * * * *",
]
DAILY = [(0, 0), (0, 30), (1, 30), (2, 0), (2, 30), (2, 45), (3, 0), (3, 15)]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def wall(at: datetime, zone: ZoneInfo) -> datetime:
    """The wall clock of ``at`` in ``zone``, naive."""
    return at.astimezone(zone).replace(tzinfo=None)


@functools.cache
def changes(tz: str) -> list[datetime]:
    """The instants (UTC, to the minute) of ``tz``'s offset changes in YEAR."""
    zone = ZoneInfo(tz)
    found = []
    at = utc(YEAR, 1, 1)
    while at.year == YEAR:
        after = at + timedelta(hours=1)
        if at.astimezone(zone).utcoffset() != after.astimezone(zone).utcoffset():
            edge = at
            while edge.astimezone(zone).utcoffset() == at.astimezone(zone).utcoffset():
                edge += timedelta(minutes=1)
            found.append(edge)
        at = after
    return found


def daily_tick_by_rule(day: date, hour: int, minute: int, zone: ZoneInfo) -> datetime:
    """cron's tick of ``minute hour * * *`` on local ``day``."""
    wanted = datetime(day.year, day.month, day.day, hour, minute)
    first = wanted.replace(tzinfo=zone, fold=0)
    if wall(first.astimezone(UTC), zone) == wanted:
        return first.astimezone(UTC)  # exists: its first occurrence
    # skipped by the spring change: the first minute whose wall clock is past it
    at = first.astimezone(UTC).replace(second=0) - timedelta(hours=3)
    while wall(at, zone) < wanted:
        at += timedelta(minutes=1)
    return at


def cron_ticks_by_scan(expr: str, tz: str, now: datetime) -> tuple[datetime, datetime]:
    """The last tick at or before ``now`` and the first after it, by cron's rules applied to
    every minute within a day of ``now``: a minute ticks if its wall clock matches ``expr``
    (cronsim on naive times says which do) — for an expression at fixed times only at the
    wall time's first occurrence, or at the end of a gap that skipped a matching wall time."""
    zone = ZoneInfo(tz)
    fields = expr.split()
    fixed = not fields[0].startswith("*") and not fields[1].startswith("*")
    low = now.replace(second=0, microsecond=0) - timedelta(hours=29)
    high = low + timedelta(hours=58)
    walls = set()
    for found in CronSim(expr, wall(low, zone) - timedelta(hours=3)):
        if found > wall(high, zone) + timedelta(hours=3):
            break
        walls.add(found)
    seen: set[datetime] = set()
    ticks = []
    at, previous = low, wall(low - timedelta(minutes=1), zone)
    while at <= high:
        local = wall(at, zone)
        if not fixed:
            ticks += [at] if local in walls else []
        elif local in walls and local not in seen:
            ticks.append(at)
        elif any(previous < w < local for w in walls):
            ticks.append(at)  # the end of a gap that skipped a matching wall time
        seen.add(local)
        at, previous = at + timedelta(minutes=1), local
    assert low + timedelta(hours=3) < max(t for t in ticks if t <= now)
    return max(t for t in ticks if t <= now), min(t for t in ticks if t > now)


def test_a_daily_tick_on_every_day_of_a_year_follows_crons_rules_in_every_zone():
    """For every zone and daily time: the chain of next ticks through YEAR is one tick per
    local day, at the time cron's rule gives, and each tick is the last tick from itself
    and from every instant up to the next one (checked at the changes and 1 s before)."""
    for tz in ZONES:
        zone = ZoneInfo(tz)
        for hour, minute in DAILY:
            schedule = Schedule("d", "job", cron=f"{minute} {hour} * * *", tz=tz).validate()
            day = date(YEAR, 1, 1)
            at = daily_tick_by_rule(day, hour, minute, zone) - timedelta(seconds=1)
            while day.year == YEAR:
                expected = daily_tick_by_rule(day, hour, minute, zone)
                tick = schedule.next_tick(at)
                assert tick == expected, (tz, hour, minute, day, tick)
                assert schedule.last_tick(tick) == tick, (tz, hour, minute, day)
                at, day = tick, day + timedelta(days=1)
            for change in changes(tz):
                for probe in (change - timedelta(seconds=1), change, change + timedelta(hours=1)):
                    last, following = schedule.last_tick(probe), schedule.next_tick(probe)
                    assert last is not None and following is not None
                    assert last <= probe < following, (tz, hour, minute, probe)
                    assert following - last <= timedelta(hours=25), (tz, probe)


def an_instant(tz: str) -> st.SearchStrategy[datetime]:
    """Any second of YEAR, or within two hours of one of ``tz``'s changes (most draws)."""
    anywhere = st.integers(0, 365 * 86400 - 1).map(lambda s: utc(YEAR, 1, 1) + timedelta(seconds=s))
    near: st.SearchStrategy[datetime] = st.nothing()
    if changes(tz):
        near = st.tuples(st.sampled_from(changes(tz)), st.integers(-7200, 7200)).map(
            lambda pair: pair[0] + timedelta(seconds=pair[1])
        )
    return st.one_of(near, near, near, anywhere)


@st.composite
def a_case(draw: st.DrawFn) -> tuple[str, str, datetime]:
    tz = draw(st.sampled_from(ZONES))
    expr = draw(st.sampled_from(EXPRESSIONS))
    micro = draw(st.sampled_from([0, 1, 500000, 999999]))
    return tz, expr, draw(an_instant(tz)).replace(microsecond=micro)


@settings(max_examples=300, deadline=None)
@given(a_case())
def test_last_and_next_tick_from_any_instant_agree_with_cron(case: tuple[str, str, datetime]):
    """From any instant — in a repeated or right after a skipped hour too — the last tick is
    at or before it, the next one after it, and they are the ticks cron gives around it."""
    tz, expr, now = case
    schedule = Schedule("p", "job", cron=expr, tz=tz).validate()
    last, following = schedule.last_tick(now), schedule.next_tick(now)
    assert last is not None and following is not None
    assert last <= now < following
    assert (last, following) == cron_ticks_by_scan(expr, tz, now)

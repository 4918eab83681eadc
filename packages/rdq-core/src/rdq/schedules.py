"""Periodic schedules: a task enqueued at every tick of a cron expression or a fixed interval.

Every worker that serves a schedule's queue runs it. At each tick ``T`` (by the *storage's*
clock) it enqueues the task with id ``schedule:<name>:<T in UTC>``; all of them enqueue the
same id, and the store keeps one task per id, so a tick runs once however many workers race
on it.

Ticks: a cron expression (5 fields, parsed by cronsim) in the schedule's time zone, with
cron's rules across daylight-saving changes (see :mod:`rdq._crontime`: at fixed times, a time
skipped by the spring change runs right after it, a time repeated by the autumn change runs
once); or ``every`` — a fixed interval, with ticks at whole multiples of it since
1970-01-01T00:00Z (``every=timedelta(hours=1)`` ticks on the hour, UTC).

A scheduler only ever enqueues the most recent tick that has passed: ticks superseded by a
later one while no worker could enqueue them (all were down, or the store was unreachable)
are dropped — a periodic task means "do the work now", and a burst of passed ticks adds
nothing. That tick is *on time* when it is at most ``grace`` seconds (default 60) old, and is
enqueued; older it is *missed*: with ``catch_up="last"`` (default) it is enqueued once all the
same — only while it is younger than its queue's ``task_ttl``, since that is how long the task
that records it ran is kept — and with ``catch_up="skip"`` it is dropped; the schedule resumes
at its next tick.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from cronsim import CronSim, CronSimError

from rdq import _crontime
from rdq._suggest import did_you_mean
from rdq.errors import ConfigError, ValidationError
from rdq.spi import bounds

__all__ = [
    "MAX_NAME_LENGTH",
    "SCHEDULE_HEADER",
    "TICK_HEADER",
    "CatchUp",
    "Schedule",
    "decide",
    "parse_schedules",
]

CatchUp = Literal["last", "skip"]
MAX_NAME_LENGTH = 100
SCHEDULE_HEADER = "rdq-schedule"
TICK_HEADER = "rdq-schedule-tick"
"""Headers of a scheduled task: the schedule's name and the tick (ISO 8601, UTC)."""

MAX_SLEEP = 30.0
"""Seconds a scheduler sleeps at most before it reads the storage clock again."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic task; build it with :meth:`rdq.App.schedule` or a ``[schedules.NAME]``
    table."""

    name: str
    handler: str
    cron: str | None = None
    every: timedelta | None = None
    tz: str = "UTC"
    payload: Any = None
    queue: str | None = None
    """None: the handler's registered queue, else ``"default"``."""
    catch_up: CatchUp = "last"
    grace: float = 60.0

    def validate(self) -> Schedule:
        """Return self if every field is valid, else raise ``ConfigError`` naming the key."""
        key = f"schedules.{self.name}"
        try:
            bounds.check_task_id(self.name, field="name")
        except ValidationError as exc:
            raise ConfigError(f"invalid schedule name: {exc.message}", key=key) from None
        if len(self.name) > MAX_NAME_LENGTH:
            raise ConfigError(f"longer than {MAX_NAME_LENGTH} characters", key=key)
        if (self.cron is None) == (self.every is None):
            raise ConfigError("give exactly one of cron and every", key=key)
        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigError(f"unknown time zone {self.tz!r}", key=f"{key}.tz") from None
        if self.cron is not None:
            try:
                CronSim(self.cron, datetime(2000, 1, 1, tzinfo=zone))
            except (CronSimError, TypeError) as exc:
                raise ConfigError(
                    f"invalid cron expression {self.cron!r}: {exc}", key=f"{key}.cron"
                ) from None
        if self.every is not None and (
            not isinstance(self.every, timedelta) or self.every < timedelta(seconds=1)
        ):
            raise ConfigError("must be a timedelta of at least 1 second", key=f"{key}.every")
        if self.catch_up not in ("last", "skip"):
            raise ConfigError("must be 'last' or 'skip'", key=f"{key}.catch_up")
        if isinstance(self.grace, bool) or not isinstance(self.grace, int | float):
            raise ConfigError("must be a number of seconds", key=f"{key}.grace")
        if not 0 <= self.grace < math.inf:
            raise ConfigError("must be a finite number of seconds, not negative", f"{key}.grace")
        try:
            msgspec.json.encode(self.payload)
        except (TypeError, msgspec.EncodeError) as exc:
            raise ConfigError(f"is not JSON-serializable: {exc}", key=f"{key}.payload") from None
        if self.queue is not None:
            try:
                bounds.check_queue(self.queue)
            except ValidationError as exc:
                raise ConfigError(exc.message, key=f"{key}.queue") from None
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    @property
    def spec(self) -> str:
        """The tick rule as people read it: the cron expression and zone, or the interval."""
        if self.cron is not None:
            return f"cron {self.cron} ({self.tz})"
        return f"every {_interval(self.every or timedelta(0))}"

    def last_tick(self, now: datetime) -> datetime | None:
        """The latest tick at or before ``now`` (UTC), or None if there is none."""
        if self.every is not None:
            step = self.every
            count = (now - _EPOCH) // step
            return _EPOCH + count * step
        return _crontime.last_tick(self.cron or "", self.zone, now)

    def next_tick(self, now: datetime) -> datetime | None:
        """The first tick after ``now`` (UTC), or None if there is none."""
        if self.every is not None:
            last = self.last_tick(now)
            return (last or _EPOCH) + self.every
        return _crontime.next_tick(self.cron or "", self.zone, now)

    def task_id(self, tick: datetime) -> str:
        """The id of the task of ``tick``: the same on every worker."""
        at = tick.astimezone(UTC)
        stamp = at.strftime("%Y%m%dT%H%M%S")
        if at.microsecond:
            stamp += f".{at.microsecond:06d}"
        return f"schedule:{self.name}:{stamp}Z"


def _interval(every: timedelta) -> str:
    seconds = every.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def decide(
    schedule: Schedule, now: datetime, handled: datetime | None, ttl: float
) -> tuple[datetime | None, bool]:
    """What a scheduler does at ``now``, having handled tick ``handled`` last: the tick to
    enqueue (None for nothing), and whether a tick is dropped as missed."""
    tick = schedule.last_tick(now)
    if tick is None or (handled is not None and tick <= handled):
        return None, False
    late = (now - tick).total_seconds()
    if late <= schedule.grace:
        return tick, False
    if schedule.catch_up == "last" and late < ttl:
        return tick, False
    return None, True


def parse_schedules(raw: Mapping[str, Any]) -> list[Schedule]:
    """The ``[schedules.NAME]`` tables of a config file. Keys: ``handler`` (default: the
    name), ``cron`` and ``tz``, or ``every`` (seconds), ``payload``, ``queue``, ``catch_up``,
    ``grace``. Raises ``ConfigError`` naming the key."""
    if not isinstance(raw, Mapping):
        raise ConfigError("must be a table of schedules", key="schedules")
    known = {"handler", "cron", "every", "tz", "payload", "queue", "catch_up", "grace"}
    schedules = []
    for name, table in raw.items():
        key = f"schedules.{name}"
        if not isinstance(table, Mapping):
            raise ConfigError("must be a table", key=key)
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(
                "unknown setting" + did_you_mean(unknown[0], known), key=f"{key}.{unknown[0]}"
            )
        every = table.get("every")
        if every is not None:
            if isinstance(every, bool) or not isinstance(every, int | float):
                raise ConfigError("must be a number of seconds", key=f"{key}.every")
            every = timedelta(seconds=every)
        for text_key in ("handler", "cron", "tz", "queue", "catch_up"):
            value = table.get(text_key)
            if value is not None and not isinstance(value, str):
                raise ConfigError("must be a string", key=f"{key}.{text_key}")
        schedules.append(
            Schedule(
                name=str(name),
                handler=table.get("handler", name),
                cron=table.get("cron"),
                every=every,
                tz=table.get("tz", "UTC"),
                payload=table.get("payload"),
                queue=table.get("queue"),
                catch_up=table.get("catch_up", "last"),
                grace=table.get("grace", 60.0),
            ).validate()
        )
    return schedules

"""The HTTP API's bodies for flow control (pauses, breakers, limits, retry now, paced
redrives) and the fleet (workers, per-minute rates); the operations of contract versions 3
and 4, apart from the task bodies in :mod:`rdq.server._task_models`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from rdq.server._fields import (
    VISIBLE,
    ErrorType,
    FilterHandlerRef,
    Reason,
    TaskId,
)
from rdq.server._task_models import FilterRequest, OperationDoc
from rdq.spi import bounds

__all__ = [
    "BreakerDoc",
    "BreakerList",
    "BreakerRequest",
    "ControlDoc",
    "ControlList",
    "DeclaredLimitDoc",
    "LimitDoc",
    "LimitList",
    "LimitValueDoc",
    "LoweredDoc",
    "MinuteDoc",
    "OutageDoc",
    "PauseDoc",
    "PauseList",
    "PauseRequest",
    "PausedDoc",
    "PendingFilterRequest",
    "RateList",
    "ReasonRequest",
    "RedriveList",
    "RedriveRequest",
    "RetryNowRequest",
    "WorkerDoc",
    "WorkerList",
]

Name = Annotated[
    str,
    Meta(min_length=1, max_length=bounds.MAX_HANDLER_REF_LENGTH, pattern=f"^{VISIBLE}+$"),
]
BreakerKey = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=bounds.MAX_CONTROL_KEY_LENGTH,
        pattern=f"^(handler|dep):{VISIBLE}+$",
    ),
]
"""A breaker's key: ``handler:<ref>`` or ``dep:<name>``."""
RATE_PATTERN = (
    r"^(0*([1-9][0-9]{0,4}(\.[0-9]+)?|100000(\.0+)?)|0*\.[0-9]*[1-9][0-9]*)"
    r"(/(s|sec|m|min|h))?$"
)
"""A rate as text: more than 0 and at most 100,000 (so at most 100,000 a second whatever the
unit), per second (``/s``, ``/sec``, or none), minute (``/m``, ``/min``) or hour (``/h``)."""
Rate = (
    Annotated[float, Meta(gt=0, le=100_000)]
    | Annotated[str, Meta(min_length=1, max_length=32, pattern=RATE_PATTERN)]
)


class PauseRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What to pause or resume: a ``handler`` (its ``handler_ref``), a ``dependency`` (its
    name), or, with neither, the whole queue."""

    handler: Name | None = None
    dependency: Name | None = None
    reason: Reason | None = None
    force: bool = False
    """Name a queue, handler or dependency nothing on the store knows yet (refused as a typo,
    ``unknown_name``, without it)."""


class ReasonRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: Reason | None = None


class BreakerRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The breaker to open or close by its ``key`` (as ``GET /v1/breakers`` lists it), or by
    its ``handler`` or ``dependency`` — exactly one of the three."""

    key: BreakerKey | None = None
    handler: Name | None = None
    dependency: Name | None = None
    reason: Reason | None = None
    force: bool = False
    """Name a key nothing on the store knows yet (refused as a typo without it)."""


class PendingFilterRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """PENDING tasks (the only ones a retry now makes due)."""

    error_type: ErrorType | None = None
    handler_ref: FilterHandlerRef | None = None
    after: datetime | None = None
    """Due at or after this."""
    before: datetime | None = None


class RetryNowRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Select PENDING tasks by ``ids`` or by ``filter`` (exactly one of them); those waiting
    out a backoff become due now. ``dry_run`` only counts them."""

    ids: Annotated[list[TaskId], Meta(max_length=bounds.MAX_SELECTOR_IDS)] | None = None
    filter: PendingFilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None
    force: bool = False
    """Act on a queue nothing on the store knows (see ``unknown_name``)."""


class RedriveRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Select DLQ tasks by ``ids`` or by ``filter`` (exactly one of them). ``dry_run`` only
    counts. ``rate`` (tasks per second, or text such as ``"50/s"``, ``"600/min"``) starts a
    paced redrive that the node drives instead of returning them all at once."""

    ids: Annotated[list[TaskId], Meta(max_length=bounds.MAX_SELECTOR_IDS)] | None = None
    filter: FilterRequest | None = None
    dry_run: bool = False
    reason: Reason | None = None
    rate: Rate | None = None
    force: bool = False
    """Act on a queue nothing on the store knows (see ``unknown_name``)."""


class OutageDoc(msgspec.Struct, kw_only=True):
    start: datetime
    end: datetime | None = None
    """Null while it lasts."""
    error_types: list[str] = []


class BreakerDoc(msgspec.Struct, kw_only=True):
    """A breaker: ``open`` holds its key's tasks (until ``until``, or until closed by hand
    when ``by`` names who opened it), ``half_open`` lets ``probes_left`` more claims through
    fleet-wide, ``closed`` lets them go (at ``rate`` per second while it ramps up)."""

    queue: str
    key: str
    state: Literal["closed", "open", "half_open"]
    since: datetime | None = None
    until: datetime | None = None
    error_type: str | None = None
    error_message: str | None = None
    sample_task: str | None = None
    by: str | None = None
    reason: str | None = None
    trips: int = 0
    probes_left: int | None = None
    rate: int | None = None
    held: int | None = None
    """PENDING tasks of the key, when cheap to count (the queue's, a handler's on a store
    that filters itself); null otherwise."""
    held_more: bool = False
    """``held`` is a lower bound."""
    outages: list[OutageDoc] = []


class BreakerList(msgspec.Struct, kw_only=True):
    breakers: list[BreakerDoc]
    """Open ones first, then half-open, then closed."""
    unsupported: str | None = None
    """Set when the store keeps no control records: what it lacks (the list is empty)."""


class PauseDoc(msgspec.Struct, kw_only=True):
    by: str | None = None
    reason: str | None = None
    at: str | None = None


class PausedDoc(msgspec.Struct, kw_only=True):
    """A paused key of a queue: who paused it, when and why, and the PENDING tasks it holds
    when that is cheap to count (``held`` null otherwise; ``held_more``: at least that many)."""

    queue: str
    key: str
    by: str | None = None
    reason: str | None = None
    at: datetime | None = None
    held: int | None = None
    held_more: bool = False


class PauseList(msgspec.Struct, kw_only=True):
    pauses: list[PausedDoc]
    unsupported: str | None = None
    """Set when the store keeps no control records: what it lacks (the list is empty)."""


class DeclaredLimitDoc(msgspec.Struct, kw_only=True):
    """What the engine declared for a control's key (see ``LimitDoc``), by whom."""

    name: str
    per_value: bool = False
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    adaptive: bool = False
    sources: list[str] = []
    declared_at: datetime | None = None
    by: str = ""


class LoweredDoc(msgspec.Struct, kw_only=True):
    """A rate lowered after a handler raised ``rdq.RetryAfter``, until ``until``."""

    rate: int
    per: float = 1.0
    since: datetime
    until: datetime
    halvings: int = 1
    error: str | None = None


class ControlDoc(msgspec.Struct, kw_only=True):
    """A control record of a queue: its pause, its breaker, its limits."""

    queue: str
    key: str
    """``*`` (the whole queue), ``handler:<ref>``, ``dep:<name>``, ``limit:<name>`` or
    ``limit:<name>:<value>`` (a declared limit's), or another task key."""
    kind: Literal["queue", "handler", "dependency", "limit", "key"]
    paused: bool
    pause: PauseDoc | None = None
    gate: int | None = None
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    in_use: int | None = None
    """Tasks of the key that hold a live lease now."""
    limit: DeclaredLimitDoc | None = None
    """The limits the engine declared for the key (``concurrency`` and ``rate`` above are
    what the store enforces: the declared ones, a rate lowered or ramping)."""
    lowered: LoweredDoc | None = None
    breaker: BreakerDoc | None = None
    version: int
    updated_at: datetime | None = None


class LimitValueDoc(msgspec.Struct, kw_only=True):
    """One value of a per-value limit."""

    key: str
    value: str
    in_use: int = 0
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    lowered_until: datetime | None = None


class LimitDoc(msgspec.Struct, kw_only=True):
    """A declared limit of a queue, held by the store's claims across the fleet: at most
    ``concurrency`` tasks of its key (of each value) hold a claim at once, at most ``rate``
    claims per ``per`` seconds (``burst`` at once). ``in_use``: tasks with the key holding a
    live lease now; ``saturated``: keys at their concurrency limit; ``waiting``: due PENDING
    tasks with the key (of the first 1,000 due; ``waiting_more``: at least); ``current_rate``:
    the rate enforced now (lowered after a ``RetryAfter`` until ``lowered_until``, or ramping
    after an outage)."""

    queue: str
    name: str
    key: str
    kind: Literal["queue", "handler", "key", "value"]
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    adaptive: bool = False
    in_use: int = 0
    keys: int = 1
    saturated: int = 0
    lowered: int = 0
    current_rate: int | None = None
    current_per: float = 1.0
    lowered_until: datetime | None = None
    waiting: int | None = None
    waiting_more: bool = False
    values: list[LimitValueDoc] = []
    """A per-value limit's busiest values (at most 20)."""
    declared_by: str = ""
    declared_at: datetime | None = None


class LimitList(msgspec.Struct, kw_only=True):
    limits: list[LimitDoc]
    """By queue, then name."""
    unsupported: str | None = None
    """Set when the store keeps no control records: what it lacks (the list is empty)."""


class ControlList(msgspec.Struct, kw_only=True):
    queue: str
    controls: list[ControlDoc]
    unsupported: str | None = None
    """Set when the store keeps no control records: what it lacks."""


class RedriveList(msgspec.Struct, kw_only=True):
    redrives: list[OperationDoc]
    """Newest first, running and finished."""
    unsupported: str | None = None


class WorkerDoc(msgspec.Struct, kw_only=True):
    """A registered worker, or a node's own registration (``kind`` ``node``), judged by the
    store's clock: ``live`` when seen within two of its heartbeats, else ``silent``."""

    id: str
    kind: Literal["worker", "node"]
    host: str
    pid: int
    version: str
    queues: list[str]
    concurrency: int
    held: int
    """Tasks it held at its last heartbeat."""
    state: str
    """``running``, or ``stopping`` once it stopped claiming."""
    heartbeat: float
    started_at: datetime | None = None
    seen_at: datetime | None = None
    status: Literal["live", "silent"]
    silent_for: float
    """Seconds since its last heartbeat."""


class WorkerList(msgspec.Struct, kw_only=True):
    workers: list[WorkerDoc]
    """Live ones first."""
    as_of: datetime | None = None
    """The store's now, that ``status`` and ``silent_for`` are judged by."""
    unsupported: str | None = None


class MinuteDoc(msgspec.Struct, kw_only=True):
    minute: datetime
    succeeded: int
    failed: int
    """Attempts that failed and will be retried."""
    dead: int
    deferred: int
    """Attempts held back by a breaker or a pause (no attempt used up)."""


class RateList(msgspec.Struct, kw_only=True):
    queue: str
    minutes: list[MinuteDoc]
    """One per minute, oldest first, ending with the current one."""
    as_of: datetime | None = None
    unsupported: str | None = None

"""Queue configuration: retry limits, backoff, timeouts, leases, concurrency and task TTL.

A queue's config comes from code (:meth:`rdq.App.queue`) or a TOML file
(:meth:`rdq.App.load_config`), and is resolved **at claim time**: a task's own
:class:`~rdq.spi.RetryOverride` wins over the queue's config, which wins over the app's defaults.
Changing a queue's config therefore applies to tasks that are already waiting.

The TOML layout (durations in seconds)::

    [defaults]
    max_attempts = 5

    [queues.emails]
    max_attempts = 8
    backoff = "exponential"      # or "fixed", "linear"
    base = 2.0
    cap = 600.0
    timeout = 30.0
    lease = 30.0
    concurrency = 20
    task_ttl = 86400.0
    non_retryable = ["myapp.errors:InvalidAddress", "ValueError"]
    priority = 0                 # -10..10, higher claimed first; applied at submit
    dependency = "smtp"          # its handlers' breaker trips together
    outage_errors = ["myapp.errors:SmtpDown"]
    fair = "tenant:"             # claims shared among the tasks' tenant:… keys
    priority_aging = 60.0        # a minute of waiting is worth one step of priority

    [queues.emails.breaker]      # or: breaker = false
    window = 30.0                # see rdq.Breaker
    min_calls = 10
    threshold = 0.5

    [[queues.emails.limits]]     # see rdq.limiting: held by the store's claims, fleet-wide
    concurrency = 20             # at most 20 running at once
    key = "smtp"                 # the tasks with key limit:smtp (default: the whole queue)

    [[queues.emails.limits]]
    rate = 50                    # at most 50 claims per second
    per = 1.0
    burst = 5
    handler = "send_email"       # only this handler's tasks

    [[queues.emails.limits]]
    concurrency = 5
    name = "tenant"              # per value of a field of the task: limit:tenant:<value>
    value = "payload.tenant"

    [schedules.nightly-report]   # see rdq.schedules
    handler = "build_report"
    cron = "0 3 * * *"
    tz = "Europe/Berlin"

Invalid values raise :class:`~rdq.errors.ConfigError` naming the queue and key
(``queues.emails.max_attempts``).
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import importlib
import math
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

from rdq.errors import ConfigError
from rdq.limiting import Concurrency, Limit, Rate, check_limits, field_value
from rdq.spi import MAX_PRIORITY, MIN_PRIORITY, limits

__all__ = [
    "DEPENDENCY_PREFIX",
    "Backoff",
    "BackoffKind",
    "Breaker",
    "QueueConfig",
    "load_toml",
    "parse_config",
    "read_toml",
]


class BackoffKind(enum.StrEnum):
    """How the delay before the next attempt grows."""

    EXPONENTIAL = "exponential"
    """``uniform(0, min(cap, base * 2**(n-1)))``: exponential with full jitter."""
    FIXED = "fixed"
    """Always ``base``."""
    LINEAR = "linear"
    """``min(cap, base * n)``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """A backoff policy. Build one with :meth:`exponential`, :meth:`fixed` or :meth:`linear`."""

    kind: BackoffKind = BackoffKind.EXPONENTIAL
    base: float = 1.0
    cap: float = 300.0

    @classmethod
    def exponential(cls, base: float = 1.0, cap: float = 300.0) -> Backoff:
        """Exponential growth from ``base`` seconds, capped at ``cap``, with full jitter."""
        return cls(BackoffKind.EXPONENTIAL, float(base), float(cap))

    @classmethod
    def fixed(cls, delay: float) -> Backoff:
        """The same ``delay`` seconds before every retry."""
        return cls(BackoffKind.FIXED, float(delay), float(delay))

    @classmethod
    def linear(cls, base: float = 1.0, cap: float = 300.0) -> Backoff:
        """``base * n`` seconds before retry ``n``, capped at ``cap``."""
        return cls(BackoffKind.LINEAR, float(base), float(cap))


@dataclasses.dataclass(frozen=True, slots=True)
class Breaker:
    """When a dependency counts as down, and how its tasks are held and let go again.

    The breaker of a key (the handler, or the ``dependency`` a queue or handler names) *trips*
    when, among the attempts of the last ``window`` seconds on that key — at least
    ``min_calls`` of them —, the outage-class failures (connections refused or reset,
    timeouts, ``rdq.RetryAfter``, ``rdq.Unavailable``, 5xx from callbacks, the types in
    ``outage_errors``) reach ``threshold``. While *open*, no worker claims the key's tasks, and
    a claimed one that fails so is rescheduled without using up an attempt. After ``cooldown``
    seconds it is *half-open*: ``probes`` tasks, fleet-wide, may run; a success closes it and
    its held tasks are let go over ``ramp`` seconds; a failure opens it again for twice the
    cool-down, at most ``max_cooldown``. Open for longer than ``alert_after`` seconds, it
    stays open and says so (an ERROR log line, the ``rdq_breaker_open_too_long`` gauge)."""

    enabled: bool = True
    window: float = 30.0
    min_calls: int = 10
    threshold: float = 0.5
    cooldown: float = 5.0
    max_cooldown: float = 30.0
    probes: int = 3
    ramp: float = 20.0
    alert_after: float = 3600.0

    @classmethod
    def off(cls) -> Breaker:
        """No breaker: every failure is charged to its task."""
        return cls(enabled=False)

    def validate(self, key: str) -> Breaker:
        for name in ("window", "cooldown", "max_cooldown", "ramp", "alert_after"):
            value = getattr(self, name)
            if not is_number(value) or not 0 <= value < math.inf:
                raise ConfigError("must be a non-negative number of seconds", f"{key}.{name}")
        if self.window <= 0 or self.cooldown <= 0:
            raise ConfigError("must be a positive number of seconds", f"{key}.window")
        if self.max_cooldown < self.cooldown:
            raise ConfigError("must not be smaller than cooldown", f"{key}.max_cooldown")
        if not is_int(self.min_calls) or self.min_calls < 1:
            raise ConfigError("must be an integer of at least 1", f"{key}.min_calls")
        if not is_int(self.probes) or not 1 <= self.probes <= 1000:
            raise ConfigError("must be an integer from 1 to 1000", f"{key}.probes")
        if not is_number(self.threshold) or not 0 < self.threshold <= 1:
            raise ConfigError("must be a fraction in (0, 1]", f"{key}.threshold")
        if not isinstance(self.enabled, bool):
            raise ConfigError("must be a boolean", f"{key}.enabled")
        return self


DEPENDENCY_PREFIX = "dep:"
"""The key of a named dependency: ``dep:<name>``, carried by every task of its handlers."""


def check_dependency(value: object, key: str) -> str | None:
    """A dependency name: 1–100 characters without whitespace, or ``None``."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 100 or any(c.isspace() for c in value):
        raise ConfigError("must be 1-100 characters without whitespace", key=key)
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class QueueConfig:
    """How a queue's tasks are run and retried. Durations are seconds.

    ``max_attempts`` counts every attempt (the first one included); ``timeout`` bounds one
    handler call; ``lease`` is the claim lease the worker heartbeats while a handler runs;
    ``concurrency`` bounds the handlers one worker runs at once for this queue; ``task_ttl``
    is how long succeeded tasks are kept; ``non_retryable`` lists exception types that
    dead-letter a task at once; ``priority`` is the default priority of its tasks."""

    max_attempts: int = 5
    backoff: Backoff = Backoff()
    timeout: float = 60.0
    lease: float = 30.0
    concurrency: int = 10
    task_ttl: float = 7 * 86400.0
    non_retryable: tuple[type[BaseException], ...] = ()
    priority: int = 0
    """The priority of tasks submitted to this queue without one (``rdq.spi.MIN_PRIORITY``
    to ``MAX_PRIORITY``; higher is claimed first). Applied when a task is submitted."""
    breaker: Breaker = Breaker()
    """When a failing dependency's tasks are held instead of retried (on by default)."""
    dependency: str | None = None
    """The service every handler of the queue calls (a handler may name its own): their
    breaker trips together. ``None``: each handler has a breaker of its own."""
    outage_errors: tuple[type[BaseException], ...] = ()
    """Exception types that mean "the dependency is down", beyond the built-in ones."""
    limits: tuple[Limit, ...] = ()
    """Concurrency and rate limits of the queue's tasks that hold across the fleet (see
    :mod:`rdq.limiting`); a queue's only, never the defaults'."""
    fair: str | None = None
    """Share the queue's claims among the groups of its tasks: a task's group is its first key
    that starts with this prefix (``"tenant:"``: ``tenant:acme``), the tasks without one are a
    group of their own. ``""``: declared not fair; ``None``: not declared here (what the store
    holds stands). Written to the store by the workers that serve the queue (capability
    ``fair_shares``)."""
    priority_aging: float | None = None
    """Seconds of waiting worth one step of priority, so that no priority waits for ever
    behind a stream of higher ones. ``0``: declared strict; ``None``: not declared here (the
    default order is strict). Written to the store like ``fair`` (``priority_aging``)."""

    def validate(self, queue: str) -> QueueConfig:
        """Return self if every setting is valid, else raise ``ConfigError`` naming the key."""
        prefix = f"queues.{queue}" if queue else "defaults"

        def bad(key: str, message: str) -> ConfigError:
            return ConfigError(
                f"{message} (queue {queue or '<defaults>'!r})", key=f"{prefix}.{key}"
            )

        if not is_int(self.max_attempts) or self.max_attempts < 1:
            raise bad("max_attempts", "must be an integer of at least 1")
        if not isinstance(self.backoff, Backoff):
            raise bad("backoff", "must be an rdq.Backoff")
        if not isinstance(self.backoff.kind, BackoffKind):
            raise bad("backoff", f"unknown backoff kind {self.backoff.kind!r}")
        for key, value in (("base", self.backoff.base), ("cap", self.backoff.cap)):
            if not is_number(value) or value < 0 or not math.isfinite(value):
                raise bad(key, "must be a finite number of seconds, not negative")
        if self.backoff.cap < self.backoff.base:
            raise bad("cap", "must not be smaller than base")
        for key, value in (("timeout", self.timeout), ("lease", self.lease)):
            if not is_number(value) or not 0 < value < math.inf:
                raise bad(key, "must be a positive number of seconds")
        if self.lease > limits.MAX_LEASE.total_seconds():
            raise bad("lease", "must be at most 24 hours")
        if not is_int(self.concurrency) or not 1 <= self.concurrency <= limits.MAX_LIMIT:
            raise bad("concurrency", f"must be an integer from 1 to {limits.MAX_LIMIT}")
        if not is_number(self.task_ttl) or not self.task_ttl > 0:
            raise bad("task_ttl", "must be a positive number of seconds")
        if not is_int(self.priority) or not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise bad("priority", f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}")
        for key, types in (
            ("non_retryable", self.non_retryable),
            ("outage_errors", self.outage_errors),
        ):
            for exc_type in types:
                if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
                    raise bad(key, f"{exc_type!r} is not an exception type")
        if not isinstance(self.breaker, Breaker):
            raise bad("breaker", "must be an rdq.Breaker")
        self.breaker.validate(f"{prefix}.breaker")
        check_dependency(self.dependency, f"{prefix}.dependency")
        check_limits(self.limits, f"{prefix}.limits")
        if self.limits and not queue:
            raise ConfigError("limits belong to a queue, not the defaults", key=f"{prefix}.limits")
        if self.fair is not None and (
            not isinstance(self.fair, str)
            or len(self.fair) > limits.MAX_TASK_KEY_LENGTH
            or any(c.isspace() or not c.isprintable() for c in self.fair)
        ):
            raise bad(
                "fair",
                f"must be a key prefix of at most {limits.MAX_TASK_KEY_LENGTH} characters "
                "without whitespace ('' for none)",
            )
        aging = self.priority_aging
        if aging is not None and (not is_number(aging) or not 0 <= aging <= limits.MAX_AGING):
            raise bad(
                "priority_aging", f"must be seconds from 0 to {limits.MAX_AGING:g} (0: strict)"
            )
        return self

    @property
    def claim_order(self) -> tuple[str | None, float | None] | None:
        """What the queue's config declares its claims' order to be, as the store keeps it
        (``Control.fair``, ``Control.aging``), or ``None`` when it declares nothing."""
        if self.fair is None and self.priority_aging is None:
            return None
        return (self.fair or None, self.priority_aging or None)

    def replace(self, **changes: Any) -> QueueConfig:
        """A copy with ``changes`` applied (not validated)."""
        return dataclasses.replace(self, **changes)


def parse_config(
    data: Mapping[str, Any], defaults: QueueConfig | None = None
) -> tuple[QueueConfig, dict[str, QueueConfig]]:
    """Parse a config mapping (``{"defaults": {...}, "queues": {NAME: {...}}}``).

    Returns the defaults and each queue's config (queue keys not given take the defaults).
    Raises ``ConfigError`` naming the key for unknown keys and invalid values."""
    for key in data:
        if key not in ("defaults", "queues", "schedules"):
            raise ConfigError(
                "unknown section (expected [defaults], [queues.NAME] or [schedules.NAME])",
                key=key,
            )
    base = defaults or QueueConfig()
    raw_defaults = data.get("defaults", {})
    if not isinstance(raw_defaults, Mapping):
        raise ConfigError("must be a table", key="defaults")
    base = _apply(base, raw_defaults, "").validate("")
    raw_queues = data.get("queues", {})
    if not isinstance(raw_queues, Mapping):
        raise ConfigError("must be a table of queues", key="queues")
    queues: dict[str, QueueConfig] = {}
    for name, raw in raw_queues.items():
        try:
            limits.check_queue(name)
        except Exception as exc:
            raise ConfigError(f"invalid queue name: {exc}", key=f"queues.{name}") from None
        if not isinstance(raw, Mapping):
            raise ConfigError("must be a table", key=f"queues.{name}")
        queues[name] = _apply(base, raw, name).validate(name)
    return base, queues


def read_toml(path: str | Path) -> dict[str, Any]:
    """The parsed TOML file at ``path``; ``ConfigError`` if it is unreadable or invalid."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", key="config") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}", key="config") from None


def load_toml(
    path: str | Path, defaults: QueueConfig | None = None
) -> tuple[QueueConfig, dict[str, QueueConfig]]:
    """Read a TOML config file; see :func:`parse_config`. ``ConfigError`` if unreadable."""
    return parse_config(read_toml(path), defaults)


_SCALAR_KEYS = ("max_attempts", "timeout", "lease", "concurrency", "task_ttl", "priority")
_BACKOFF_KEYS = ("backoff", "base", "cap")


def _apply(config: QueueConfig, raw: Mapping[str, Any], queue: str) -> QueueConfig:
    prefix = f"queues.{queue}" if queue else "defaults"
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _SCALAR_KEYS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(
                    f"must be a number (queue {queue or '<defaults>'!r})", key=f"{prefix}.{key}"
                )
            changes[key] = value
        elif key in ("non_retryable", "outage_errors"):
            changes[key] = tuple(_exception_types(value, f"{prefix}.{key}"))
        elif key == "dependency":
            changes[key] = check_dependency(value, f"{prefix}.{key}")
        elif key == "fair":
            if not isinstance(value, str):
                raise ConfigError("must be a key prefix ('' for none)", key=f"{prefix}.{key}")
            changes[key] = value
        elif key == "priority_aging":
            if not is_number(value):
                raise ConfigError(
                    f"must be a number of seconds (queue {queue or '<defaults>'!r})",
                    key=f"{prefix}.{key}",
                )
            changes[key] = float(value)
        elif key == "breaker":
            changes[key] = _breaker(value, config.breaker, f"{prefix}.{key}")
        elif key == "limits":
            changes[key] = tuple(_limits(value, f"{prefix}.{key}"))
        elif key not in _BACKOFF_KEYS:
            raise ConfigError(
                f"unknown setting (queue {queue or '<defaults>'!r})", f"{prefix}.{key}"
            )
    if any(key in raw for key in _BACKOFF_KEYS):
        kind_name = raw.get("backoff", config.backoff.kind.value)
        try:
            kind = BackoffKind(kind_name)
        except ValueError:
            kinds = ", ".join(k.value for k in BackoffKind)
            raise ConfigError(
                f"unknown backoff kind {kind_name!r}; expected one of {kinds} "
                f"(queue {queue or '<defaults>'!r})",
                key=f"{prefix}.backoff",
            ) from None
        base = raw.get("base", config.backoff.base)
        cap = raw.get("cap", base if kind is BackoffKind.FIXED else config.backoff.cap)
        for key, value in (("base", base), ("cap", cap)):
            if not is_number(value):
                raise ConfigError(
                    f"must be a number (queue {queue or '<defaults>'!r})", key=f"{prefix}.{key}"
                )
        changes["backoff"] = Backoff(kind, float(base), float(cap))
    return dataclasses.replace(config, **changes) if changes else config


def _breaker(value: Any, current: Breaker, key: str) -> Breaker:
    """``breaker = false`` / ``true``, or a ``[queues.NAME.breaker]`` table of its settings."""
    if isinstance(value, bool):
        return dataclasses.replace(current, enabled=value)
    if not isinstance(value, Mapping):
        raise ConfigError("must be true, false or a table of breaker settings", key=key)
    known = {f.name for f in dataclasses.fields(Breaker)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError("unknown breaker setting", key=f"{key}.{unknown[0]}")
    for name, setting in value.items():
        expected = (
            bool if name == "enabled" else (int if name in ("min_calls", "probes") else float)
        )
        ok = (
            isinstance(setting, bool)
            if expected is bool
            else (is_int(setting) if expected is int else is_number(setting))
        )
        if not ok:
            raise ConfigError(
                f"must be {'a boolean' if expected is bool else 'a number'}", f"{key}.{name}"
            )
    return dataclasses.replace(current, **dict(value)).validate(key)


_LIMIT_SETTINGS = {
    "concurrency": int,
    "rate": int,
    "per": float,
    "burst": int,
    "key": str,
    "name": str,
    "value": str,
    "handler": str,
    "adaptive": bool,
}


def _limits(value: Any, key: str) -> Iterable[Limit]:
    """``[[queues.NAME.limits]]`` tables: each a ``concurrency`` or a ``rate`` (with ``per``,
    ``burst``, ``adaptive``), keyed by nothing (the queue, or ``handler``'s tasks), a ``key``
    name, or a ``name`` and the ``value`` field of the task it is per."""
    if not isinstance(value, list):
        raise ConfigError("must be a list of tables ([[queues.NAME.limits]])", key=key)
    for i, raw in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(raw, Mapping):
            raise ConfigError("must be a table", key=where)
        unknown = sorted(set(raw) - set(_LIMIT_SETTINGS))
        if unknown:
            raise ConfigError("unknown limit setting", key=f"{where}.{unknown[0]}")
        for name, setting in raw.items():
            expected = _LIMIT_SETTINGS[name]
            ok = {
                int: is_int(setting),
                float: is_number(setting),
                bool: isinstance(setting, bool),
                str: isinstance(setting, str),
            }[expected]
            if not ok:
                what = {int: "an integer", float: "a number", bool: "a boolean", str: "text"}
                raise ConfigError(f"must be {what[expected]}", key=f"{where}.{name}")
        if ("concurrency" in raw) == ("rate" in raw):
            raise ConfigError("give concurrency or rate (one limit per table)", key=where)
        if "value" in raw and "key" in raw:
            raise ConfigError("give key (a name) or value (a field of the task)", key=where)
        try:
            keyed: Any = field_value(raw["value"]) if "value" in raw else raw.get("key")
        except ConfigError as exc:
            raise ConfigError(exc.message, key=f"{where}.value") from None
        common = {"key": keyed, "name": raw.get("name"), "handler": raw.get("handler")}
        if "concurrency" in raw:
            extra = sorted({"per", "burst", "adaptive"} & set(raw))
            if extra:
                raise ConfigError("is a setting of a rate limit", key=f"{where}.{extra[0]}")
            yield Concurrency(raw["concurrency"], **common).validate(where)
        else:
            yield Rate(
                raw["rate"],
                per=float(raw.get("per", 1.0)),
                burst=raw.get("burst"),
                adaptive=raw.get("adaptive", True),
                **common,
            ).validate(where)


def _exception_types(value: Any, key: str) -> Iterable[type[BaseException]]:
    if not isinstance(value, list):
        raise ConfigError("must be a list of exception type names", key=key)
    for name in value:
        if not isinstance(name, str):
            raise ConfigError(f"{name!r} is not an exception type name", key=key)
        yield import_exception_type(name, key)


def import_exception_type(name: str, key: str = "non_retryable") -> type[BaseException]:
    """Resolve ``"ValueError"``, ``"pkg.mod:Error"`` or ``"pkg.mod.Error"`` to a type."""
    found: Any = None
    if ":" in name:
        module_name, _, attr = name.partition(":")
    elif "." in name:
        module_name, _, attr = name.rpartition(".")
    else:
        module_name, attr = "", name
    try:
        if module_name:
            found = importlib.import_module(module_name)
            for part in attr.split("."):
                found = getattr(found, part)
        else:
            found = getattr(builtins, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import exception type {name!r}: {exc}", key=key) from None
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise ConfigError(f"{name!r} is not an exception type", key=key)
    return found


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def seconds_or(value: object, default: float) -> float:
    if is_number(value) and 0 <= value < math.inf:
        return float(value)
    return default

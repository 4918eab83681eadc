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
    dead_ttl = 2592000.0         # DEAD tasks archived, then removed after 30 days (default: kept)
    archive_succeeded = false    # archive SUCCEEDED/CANCELLED ones too before task_ttl removes them
    keep_succeeded = true        # false: a succeeded task is deleted as it completes
    non_retryable = ["myapp.errors:InvalidAddress", "ValueError"]
    priority = 0                 # -10..10, higher claimed first; applied at submit
    dependency = "smtp"          # its handlers' breaker trips together
    outage_errors = ["myapp.errors:SmtpDown"]
    fair = "tenant:"             # claims shared among the tasks' tenant:… keys
    priority_aging = 60.0        # a minute of waiting is worth one step of priority
    encrypt = true               # seal payloads (see rdq.keys; default: when keys are set)

    [queues.emails.scrub]        # or: scrub = false (see rdq.scrub)
    keys = ["iban"]              # more key names whose values are scrubbed
    patterns = ["acct-[0-9]{8}"] # more regular expressions, each becomes [redacted]
    max_snoozes = 100            # rdq.Snooze: how often one task may say "not yet"
    snooze_retry_after = false   # a 429/503 with Retry-After snoozes instead of failing

    [queues.emails.breaker]      # or: breaker = false
    window = 30.0                # see rdq.Breaker
    min_calls = 10
    threshold = 0.5

    [[queues.emails.limits]]     # see rdq.Concurrency: held by the store's claims, fleet-wide
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

    [archive]                    # where finished tasks go before they leave (see rdq.retention)
    directory = "/var/lib/rdq/archive"   # JSON Lines, gzip, rotated (default ./rdq-archive)
    max_file_bytes = 67108864
    # sink = "myapp.archive:to_s3"       # or a sink of your own, by import path

    [blobs]                      # payloads above the inline limit (see rdq.blobs)
    url = "s3://bucket/rdq-blobs"        # or directory = "…" (default ./rdq-blobs)
    inline_limit = 262144                # bytes of JSON kept in the row (default 1 MiB)

    [schedules.nightly-report]   # see rdq.schedules
    handler = "build_report"
    cron = "0 3 * * *"
    tz = "Europe/Berlin"

Invalid values raise :class:`~rdq.errors.ConfigError` naming the queue and key
(``queues.emails.max_attempts``).

This module reads configs (:func:`parse_config`, :func:`load_toml`); the settings classes it
builds are in :mod:`rdq._queue_settings` (a breaker's and the limits' in :mod:`rdq.flow`)
and re-exported here.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rdq._checks import is_int, is_number
from rdq._queue_settings import Backoff, BackoffKind, QueueConfig
from rdq._suggest import did_you_mean
from rdq.errors import ConfigError
from rdq.flow import Breaker, Concurrency, Limit, Rate, check_dependency, field_value
from rdq.scrub import Scrubber
from rdq.spi import bounds

__all__ = [
    "ARCHIVE_SETTINGS",
    "BLOB_SETTINGS",
    "SECTIONS",
    "Backoff",
    "BackoffKind",
    "Breaker",
    "QueueConfig",
    "load_toml",
    "parse_archive",
    "parse_blobs",
    "parse_config",
    "read_toml",
]


def parse_config(
    data: Mapping[str, Any], defaults: QueueConfig | None = None
) -> tuple[QueueConfig, dict[str, QueueConfig]]:
    """Parse a config mapping (``{"defaults": {...}, "queues": {NAME: {...}}}``).

    Returns the defaults and each queue's config (queue keys not given take the defaults).
    Raises ``ConfigError`` naming the key for unknown keys and invalid values."""
    for key in data:
        if key not in SECTIONS:
            raise ConfigError(
                "unknown section"
                + did_you_mean(key, SECTIONS)
                + " (expected [defaults], [queues.NAME], [schedules.NAME], [archive] or [blobs])",
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
            bounds.check_queue(name)
        except Exception as exc:
            raise ConfigError(f"invalid queue name: {exc}", key=f"queues.{name}") from None
        if not isinstance(raw, Mapping):
            raise ConfigError("must be a table", key=f"queues.{name}")
        queues[name] = _apply(base, raw, name).validate(name)
    return base, queues


SECTIONS = ("defaults", "queues", "schedules", "archive", "blobs")
"""The tables a config file holds."""
ARCHIVE_SETTINGS = {"directory": str, "max_file_bytes": int, "compress": bool, "sink": str}
"""Every key of the ``[archive]`` table."""


def parse_archive(data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[archive]`` table, checked: ``directory`` or ``sink`` (not both),
    ``max_file_bytes``, ``compress``. ``ConfigError`` naming the key otherwise."""
    raw = data.get("archive", {})
    if not isinstance(raw, Mapping):
        raise ConfigError("must be a table", key="archive")
    for key, value in raw.items():
        expected = ARCHIVE_SETTINGS.get(key)
        if expected is None:
            raise ConfigError(
                "unknown archive setting" + did_you_mean(key, ARCHIVE_SETTINGS),
                key=f"archive.{key}",
            )
        ok = is_int(value) if expected is int else isinstance(value, expected)
        if not ok or (expected is str and not value):
            what = {str: "text", int: "an integer", bool: "true or false"}[expected]
            raise ConfigError(f"must be {what}", key=f"archive.{key}")
    if "directory" in raw and "sink" in raw:
        raise ConfigError("give a directory or a sink, not both", key="archive.sink")
    return dict(raw)


BLOB_SETTINGS = {
    "directory": str,
    "url": str,
    "inline_limit": int,
    "max_bytes": int,
    "grace": float,
    "sweep_interval": float,
}
"""Every key of the ``[blobs]`` table."""


def parse_blobs(data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[blobs]`` table, checked: ``directory`` or ``url`` (not both), ``inline_limit``
    and ``max_bytes`` (bytes), ``grace`` and ``sweep_interval`` (seconds)."""
    raw = data.get("blobs", {})
    if not isinstance(raw, Mapping):
        raise ConfigError("must be a table", key="blobs")
    for key, value in raw.items():
        expected = BLOB_SETTINGS.get(key)
        if expected is None:
            raise ConfigError(
                "unknown blobs setting" + did_you_mean(key, BLOB_SETTINGS), key=f"blobs.{key}"
            )
        ok = {str: isinstance(value, str) and bool(value), int: is_int(value)}.get(
            expected, is_number(value)
        )
        if not ok:
            what = {str: "text", int: "an integer"}.get(expected, "a number of seconds")
            raise ConfigError(f"must be {what}", key=f"blobs.{key}")
    if "directory" in raw and "url" in raw:
        raise ConfigError("give a directory or a url, not both", key="blobs.url")
    return dict(raw)


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


_SCALAR_KEYS = (
    "max_attempts",
    "timeout",
    "lease",
    "concurrency",
    "task_ttl",
    "priority",
    "max_snoozes",
    "dead_ttl",
)
_BACKOFF_KEYS = ("backoff", "base", "cap")
QUEUE_SETTINGS = (
    *_SCALAR_KEYS,
    *_BACKOFF_KEYS,
    "non_retryable",
    "outage_errors",
    "dependency",
    "fair",
    "priority_aging",
    "snooze_retry_after",
    "archive_succeeded",
    "keep_succeeded",
    "breaker",
    "limits",
    "scrub",
    "encrypt",
)
"""Every key a ``[defaults]`` or ``[queues.NAME]`` table takes."""


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
        elif key == "snooze_retry_after":
            if not isinstance(value, bool):
                raise ConfigError(
                    f"must be true or false (queue {queue or '<defaults>'!r})",
                    key=f"{prefix}.{key}",
                )
            changes[key] = value
        elif key in ("archive_succeeded", "keep_succeeded"):
            if not isinstance(value, bool):
                raise ConfigError("must be true or false", key=f"{prefix}.{key}")
            changes[key] = value
        elif key == "breaker":
            changes[key] = _breaker(value, config.breaker, f"{prefix}.{key}")
        elif key == "limits":
            changes[key] = tuple(_limits(value, f"{prefix}.{key}"))
        elif key == "scrub":
            changes[key] = _scrub(value, f"{prefix}.{key}")
        elif key == "encrypt":
            if not isinstance(value, bool):
                raise ConfigError("must be true or false", key=f"{prefix}.{key}")
            changes[key] = value
        elif key not in _BACKOFF_KEYS:
            raise ConfigError(
                f"unknown setting{did_you_mean(key, QUEUE_SETTINGS)} "
                f"(queue {queue or '<defaults>'!r})",
                f"{prefix}.{key}",
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


def _scrub(value: Any, key: str) -> Scrubber:
    """``scrub = false`` / ``true``, or a ``[queues.NAME.scrub]`` table: ``defaults``,
    ``keys``, ``patterns``."""
    if isinstance(value, bool):
        return Scrubber(enabled=value)
    if not isinstance(value, Mapping):
        raise ConfigError("must be true, false or a table (defaults, keys, patterns)", key=key)
    known = ("defaults", "keys", "patterns")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ConfigError(
            "unknown scrub setting" + did_you_mean(unknown[0], known), key=f"{key}.{unknown[0]}"
        )
    defaults = value.get("defaults", True)
    if not isinstance(defaults, bool):
        raise ConfigError("must be true or false", key=f"{key}.defaults")
    lists: dict[str, tuple[str, ...]] = {}
    for name in ("keys", "patterns"):
        items = value.get(name, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError("must be a list of strings", key=f"{key}.{name}")
        lists[name] = tuple(items)
    return Scrubber(defaults=defaults, keys=lists["keys"], patterns=lists["patterns"]).validate(key)


def _breaker(value: Any, current: Breaker, key: str) -> Breaker:
    """``breaker = false`` / ``true``, or a ``[queues.NAME.breaker]`` table of its settings."""
    if isinstance(value, bool):
        return dataclasses.replace(current, enabled=value)
    if not isinstance(value, Mapping):
        raise ConfigError("must be true, false or a table of breaker settings", key=key)
    known = {f.name for f in dataclasses.fields(Breaker)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(
            "unknown breaker setting" + did_you_mean(unknown[0], known), key=f"{key}.{unknown[0]}"
        )
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
            raise ConfigError(
                "unknown limit setting" + did_you_mean(unknown[0], _LIMIT_SETTINGS),
                key=f"{where}.{unknown[0]}",
            )
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

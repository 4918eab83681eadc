"""Limits that hold across the fleet: at most N tasks of a key running at once
(:class:`Concurrency`), at most N claims of a key per period (:class:`Rate`), however many
workers and nodes claim.

A limit is declared on a queue or a handler::

    app.queue("payments", limits=[rdq.Concurrency(20, key="psp"), rdq.Rate(50, per=1.0)])

    @app.handler("charge", queue="payments",
                 limits=[rdq.Concurrency(5, key=lambda t: t.payload["tenant"], name="tenant")])
    async def charge(payload: dict) -> None: ...

Its **key** says which tasks share it:

=============================  ====================================  =========================
``key``                        the tasks that share it               the control's key
=============================  ====================================  =========================
``None`` on a queue            every task of the queue               ``*``
``None`` on a handler          every task of the handler             ``handler:<ref>``
a name, ``"psp"``              the tasks of the queue (or handler)   ``limit:psp``
a function and a ``name``      those for which it gives one value    ``limit:<name>:<value>``
=============================  ====================================  =========================

The queue's and the handler's keys are every task's already. A named or per-value key is
given to a task when it is submitted (it is kept in ``Envelope.keys``): a task submitted
before the limit was declared does not carry it. A value is text or an integer; a value that
is not plain (``A–Z a–z 0–9 . _ ~ @ + = - :``) is percent-encoded, and one too long for a
task key (200 characters in all) is replaced by ``#`` and 32 hex digits of its SHA-256.

The store enforces each limit in its claim (:class:`rdq.spi.Control`): what is declared here
becomes the control record of its key, written by the workers (see
:mod:`rdq.worker._limits`); a per-value key's control is created by the first submitter of
a task with that value (:mod:`rdq.flow._provision`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rdq.errors import ConfigError, ValidationError
from rdq.spi import QUEUE_KEY, Envelope, bounds, handler_key

__all__ = [
    "LIMIT_PREFIX",
    "MAX_VALUE_KEYS",
    "Concurrency",
    "KeyFunction",
    "KeyedLimit",
    "Limit",
    "LimitPlan",
    "Rate",
    "check_limits",
    "field_value",
    "named_key",
    "per_second",
    "plan_limits",
    "value_key",
    "value_of",
]

LIMIT_PREFIX = "limit:"
"""The prefix of every task key a named or per-value limit gives."""

KeyFunction = Callable[[Envelope], object]
"""``key(task)``: the value of a per-value limit for ``task`` (text or an integer), or
``None`` when the limit does not apply to it."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SAFE = "._~@+=-:"
_HASHED = "#"
MAX_VALUE_KEYS = bounds.MAX_TASK_KEYS - 1
"""A task carries at most this many limit keys (one key is left for its dependency)."""


def named_key(name: str) -> str:
    """The task key of the limit named ``name``: ``limit:<name>``."""
    return LIMIT_PREFIX + name


def value_key(name: str, value: object) -> str:
    """The task key of value ``value`` of the per-value limit ``name``:
    ``limit:<name>:<value>`` (see the module's docstring for how a value is written).
    ``ValidationError`` (field ``limits.<name>``) for a value that is not text or an
    integer, or is empty."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValidationError(
            f"the key of limit {name!r} must be text or an integer, not {type(value).__name__}",
            field=f"limits.{name}",
        )
    text = str(value)
    if not text:
        raise ValidationError(f"the key of limit {name!r} is empty", field=f"limits.{name}")
    prefix = f"{LIMIT_PREFIX}{name}:"
    key = prefix + urllib.parse.quote(text, safe=_SAFE)
    if len(key) > bounds.MAX_TASK_KEY_LENGTH:
        key = prefix + _HASHED + hashlib.sha256(text.encode()).hexdigest()[:32]
    return key


def value_of(key: str) -> str:
    """The value a per-value limit's key was made of (``#…`` when it was hashed)."""
    _, _, rest = key.removeprefix(LIMIT_PREFIX).partition(":")
    return rest if rest.startswith(_HASHED) else urllib.parse.unquote(rest)


def field_value(path: str) -> KeyFunction:
    """A key function reading ``payload.<a>.<b>…`` or ``headers.<name>`` of a task: the
    per-value key of a limit declared in a TOML file (``value = "payload.tenant"``). A task
    without the field gets no key from it."""
    root, _, rest = path.partition(".")
    parts = rest.split(".") if rest else []
    if root not in ("payload", "headers") or not parts or not all(parts):
        raise ConfigError("must be payload.<field>[.<field>…] or headers.<name>", key="value")

    def read(task: Envelope) -> object:
        found: Any = task.payload if root == "payload" else task.headers
        for part in parts:
            if not isinstance(found, dict) or part not in found:
                return None
            found = found[part]
        return found

    read.path = path  # type: ignore[attr-defined]
    return read


@dataclasses.dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``limit`` tasks with the key hold a claim at once, across every worker and
    node: a task claimed ahead of a free slot counts, and a slot comes back when its task's
    outcome is written or its lease lapses (a dead worker's slots within one lease).

    ``key``: ``None`` (the queue or the handler it is declared on), a name, or a function of
    the task giving a value per task (then ``name`` names the limit). ``handler``: only the
    tasks of this handler (set by ``@app.handler(..., limits=[...])``)."""

    limit: int
    key: str | KeyFunction | None = None
    name: str | None = None
    handler: str | None = None

    def validate(self, where: str) -> Concurrency:
        if _not_count(self.limit):
            raise ConfigError("must be an integer of at least 1", key=f"{where}.concurrency")
        _check_key(self.key, self.name, self.handler, where)
        return self


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """At most ``rate`` claims of tasks with the key per ``per`` seconds, across every worker
    and node: a token bucket on the store's clock holding at most ``burst`` tokens (default
    ``max(1, rate // 10)``), so no window of ``per`` seconds sees more than
    ``rate + burst`` claims.

    With ``adaptive`` (the default), a handler that raises ``rdq.RetryAfter`` on a task with
    the key halves the key's rate until the RetryAfter's delay has passed (again while the
    halved rate still draws one), then the declared rate is back. ``key``, ``name`` and
    ``handler`` as for :class:`Concurrency`."""

    rate: int
    per: float = 1.0
    burst: int | None = None
    key: str | KeyFunction | None = None
    name: str | None = None
    handler: str | None = None
    adaptive: bool = True

    def validate(self, where: str) -> Rate:
        if _not_count(self.rate):
            raise ConfigError("must be an integer of at least 1", key=f"{where}.rate")
        per = self.per
        if isinstance(per, bool) or not isinstance(per, int | float) or not 0 < per <= 86_400:
            raise ConfigError("must be a number of seconds in (0, 86400]", key=f"{where}.per")
        if self.burst is not None and _not_count(self.burst):
            raise ConfigError("must be an integer of at least 1", key=f"{where}.burst")
        if not isinstance(self.adaptive, bool):
            raise ConfigError("must be a boolean", key=f"{where}.adaptive")
        _check_key(self.key, self.name, self.handler, where)
        return self


Limit = Concurrency | Rate


def _not_count(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or value < 1


def _check_key(key: object, name: object, handler: object, where: str) -> None:
    if handler is not None and (not isinstance(handler, str) or not handler):
        raise ConfigError("must be a handler name", key=f"{where}.handler")
    if key is None or isinstance(key, str):
        if name is not None:
            raise ConfigError("names a per-value limit only (key is a function)", f"{where}.name")
        if isinstance(key, str) and not _NAME.fullmatch(key):
            raise ConfigError(
                "must be 1-64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit",
                key=f"{where}.key",
            )
        return
    if not callable(key):
        raise ConfigError("must be None, a name or a function of the task", key=f"{where}.key")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            "a per-value limit needs a name: 1-64 characters of A-Z a-z 0-9 . _ -",
            key=f"{where}.name",
        )


@dataclasses.dataclass(frozen=True, slots=True)
class KeyedLimit:
    """What the declarations of one queue set for one control key, or, with ``per_value``,
    for every key of a per-value limit (``key`` is then their prefix, ``limit:<name>:``)."""

    name: str
    """``*`` (the queue), ``handler:<ref>``, or the limit's name."""
    key: str
    per_value: bool = False
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    adaptive: bool = False
    sources: tuple[str, ...] = ()
    """Where it is declared: ``queue`` (the queue's config), ``handler:<ref>`` (a handler)."""

    def matches(self, key: str) -> bool:
        return key.startswith(self.key) if self.per_value else key == self.key


@dataclasses.dataclass(frozen=True, slots=True)
class _Keyer:
    handler: str | None
    name: str
    function: KeyFunction | None

    def key_of(self, task: Envelope) -> str | None:
        if self.function is None:
            return named_key(self.name)
        try:
            value = self.function(task)
        except Exception as exc:
            raise ValidationError(
                f"the key of limit {self.name!r} could not be computed from the task: "
                f"{type(exc).__name__}: {exc}",
                field=f"limits.{self.name}",
            ) from exc
        return None if value is None else value_key(self.name, value)


@dataclasses.dataclass(frozen=True, slots=True)
class LimitPlan:
    """The limits of one queue: the control of each key (:attr:`exact`), the per-value limits
    (:attr:`templates`, by prefix), and how a task gets its limit keys."""

    queue: str
    exact: dict[str, KeyedLimit]
    templates: dict[str, KeyedLimit]
    keyers: tuple[_Keyer, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.exact or self.templates)

    def keys_of(self, task: Envelope) -> list[str]:
        """The limit keys of ``task`` (of its handler and of the queue), in declaration
        order, each once."""
        found: list[str] = []
        for keyer in self.keyers:
            if keyer.handler is not None and keyer.handler != task.handler_ref:
                continue
            key = keyer.key_of(task)
            if key is not None and key not in found:
                found.append(key)
        return found

    def spec_of(self, key: str) -> KeyedLimit | None:
        """What is declared for control key ``key`` (``None``: nothing)."""
        exact = self.exact.get(key)
        if exact is not None:
            return exact
        if key.startswith(LIMIT_PREFIX):
            name, sep, _ = key.removeprefix(LIMIT_PREFIX).partition(":")
            if sep:
                return self.templates.get(f"{LIMIT_PREFIX}{name}:")
        return None

    @property
    def specs(self) -> list[KeyedLimit]:
        return [*self.exact.values(), *self.templates.values()]

    @property
    def least_concurrency(self) -> int | None:
        """The smallest concurrency limit of the queue (per value for a per-value limit), or
        ``None`` without one."""
        return min(
            (spec.concurrency for spec in self.specs if spec.concurrency is not None),
            default=None,
        )

    def refill_time(self) -> float:
        """Seconds in which the emptied bucket of the fastest rate limit holds a claim's worth
        again (``inf``: no rate limit): a worker whose claim came back empty tries again
        within that."""
        times = [
            max(1, spec.burst or spec.rate // 10) / (spec.rate / spec.per)
            for spec in self.specs
            if spec.rate is not None
        ]
        return min(times, default=math.inf)


def plan_limits(queue: str, declared: Iterable[tuple[str, Limit]]) -> LimitPlan:
    """The plan of ``queue`` from its declarations, each with where it was declared (``queue``
    or ``handler:<ref>``). ``ConfigError`` when two declarations of one key disagree, or a
    handler's tasks could get more limit keys than a task holds."""
    merged: dict[str, dict[str, Any]] = {}
    keyers: list[_Keyer] = []
    per_handler: dict[str | None, int] = {}
    for source, limit in declared:
        where = f"queues.{queue}.limits"
        key, name, per_value = _key_of(limit)
        entry = merged.setdefault(key, {"name": name, "per_value": per_value, "sources": []})
        if entry["per_value"] != per_value:
            raise ConfigError(f"limit {name!r} is declared both per value and not", key=where)
        field = "concurrency" if isinstance(limit, Concurrency) else "rate"
        wanted = _fields(limit)
        if field in entry and entry[field] != wanted:
            raise ConfigError(
                f"two {field} limits of {name!r} disagree ({entry[field]} and {wanted})",
                key=where,
            )
        entry[field] = wanted
        if source not in entry["sources"]:
            entry["sources"].append(source)
        if limit.key is not None:
            keyer = _Keyer(limit.handler, name, limit.key if callable(limit.key) else None)
            if keyer not in keyers:
                keyers.append(keyer)
                per_handler[limit.handler] = per_handler.get(limit.handler, 0) + 1
    common = per_handler.pop(None, 0)
    most = common + max(per_handler.values(), default=0)
    if most > MAX_VALUE_KEYS:
        raise ConfigError(
            f"a task of queue {queue!r} would carry {most} limit keys; at most "
            f"{MAX_VALUE_KEYS} fit beside its dependency's",
            key=f"queues.{queue}.limits",
        )
    exact: dict[str, KeyedLimit] = {}
    templates: dict[str, KeyedLimit] = {}
    for key, entry in merged.items():
        rate = entry.get("rate") or {}
        spec = KeyedLimit(
            name=entry["name"],
            key=key,
            per_value=entry["per_value"],
            concurrency=entry.get("concurrency", {}).get("limit"),
            rate=rate.get("rate"),
            per=rate.get("per", 1.0),
            burst=rate.get("burst"),
            adaptive=rate.get("adaptive", False),
            sources=tuple(entry["sources"]),
        )
        (templates if spec.per_value else exact)[key] = spec
    return LimitPlan(queue, exact, templates, tuple(keyers))


def _key_of(limit: Limit) -> tuple[str, str, bool]:
    """(control key or per-value prefix, the limit's name, per value?)"""
    if limit.key is None:
        if limit.handler is None:
            return QUEUE_KEY, QUEUE_KEY, False
        key = handler_key(limit.handler)
        return key, key, False
    if isinstance(limit.key, str):
        return named_key(limit.key), limit.key, False
    name = limit.name or ""
    return f"{LIMIT_PREFIX}{name}:", name, True


def _fields(limit: Limit) -> dict[str, Any]:
    if isinstance(limit, Concurrency):
        return {"limit": limit.limit}
    return {
        "rate": limit.rate,
        "per": float(limit.per),
        "burst": limit.burst,
        "adaptive": limit.adaptive,
    }


def check_limits(value: object, where: str) -> tuple[Limit, ...]:
    """``value`` as a tuple of valid limits; ``ConfigError`` naming ``where[i]``."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigError("must be a list of rdq.Concurrency and rdq.Rate", key=where)
    checked: list[Limit] = []
    for i, limit in enumerate(value):
        if not isinstance(limit, Concurrency | Rate):
            raise ConfigError("must be an rdq.Concurrency or an rdq.Rate", key=f"{where}[{i}]")
        checked.append(limit.validate(f"{where}[{i}]"))
    return tuple(checked)


def per_second(rate: int | None, per: float) -> float:
    """Claims per second of a rate (``inf`` for none)."""
    return math.inf if rate is None else rate / per

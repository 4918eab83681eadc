"""The application registry: queues with their config, handlers, and scheme invokers.

A handler is a function that takes ``()``, ``(payload)`` or ``(payload, ctx)`` — ``ctx`` being a
:class:`TaskContext`. ``async def`` handlers run on the worker's event loop; plain functions
run in the worker's thread pool. If the first parameter is annotated with a msgspec Struct or a
dataclass type, the payload is converted to it first (a payload that does not convert
dead-letters the task with error type ``rdq.UndecodablePayload``)::

    app = rdq.App()
    app.queue("emails", max_attempts=8, timeout=30)

    @app.handler("send_email", queue="emails")
    async def send_email(payload: dict, ctx: rdq.TaskContext) -> None: ...

A task's ``handler_ref`` is resolved when it is claimed: a registered name first, then a
``scheme://…`` URL served by an invoker registered with :meth:`App.register_scheme`, then an
import path ``pkg.module:function`` — only for modules under a prefix the app allows with
``App(import_prefixes=["myapp"])``, since handler_refs may come from untrusted producers.
Anything else dead-letters the task as PERMANENT with error type ``rdq.UnknownHandler``.
An allowed import path that fails to import (the module raises, or is not there yet) is a
retryable failure, ``rdq.HandlerImportError``: it is tried again at the next attempt, never
remembered as unknown.

Scheme invokers let a node run tasks whose handler is, for example, an HTTP callback::

    async def post_callback(task: rdq.spi.Envelope, ctx: rdq.TaskContext) -> None:
        ...  # raise rdq.Permanent / rdq.RetryAfter / any exception, like a handler

    app.register_scheme("https", post_callback)

What a handler is, and the guarded import of ``pkg.module:function`` refs, are in
:mod:`rdq._handlers`; this module is the registry that holds them.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from rdq._handlers import (
    Handler,
    HandlerImportError,
    SchemeInvoker,
    TaskContext,
    import_handler,
    is_under,
)
from rdq._handlers import import_path as import_path
from rdq._handlers import make_handler as make_handler
from rdq._suggest import did_you_mean
from rdq.blobs import Blobs, BlobStore, blobs_from
from rdq.config import (
    Backoff,
    Breaker,
    QueueConfig,
    parse_archive,
    parse_blobs,
    parse_config,
    read_toml,
)
from rdq.errors import ConfigError, ValidationError
from rdq.flow import Limit, LimitPlan, check_dependency, check_limits, plan_limits
from rdq.retention import Archive, archive_from
from rdq.schedules import CatchUp, Schedule, parse_schedules
from rdq.spi import Envelope
from rdq.spi import bounds as contract

__all__ = [
    "App",
    "Handler",
    "HandlerImportError",
    "SchemeInvoker",
    "TaskContext",
    "load_app",
    "unknown_handler",
    "unknown_queue",
]

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_QUEUE = "default"


class App:
    """Queues, their configs and the handlers that run their tasks."""

    def __init__(
        self,
        defaults: QueueConfig | None = None,
        *,
        import_prefixes: list[str] | None = None,
        archive: Archive | str | None = None,
        blobs: Blobs | BlobStore | str | None = None,
    ) -> None:
        """``import_prefixes``: module prefixes (``"myapp"`` allows ``myapp.jobs:send``) from
        which handler_refs of the form ``pkg.module:function`` may be imported at claim time.
        None (the default) allows none: only registered handlers and scheme invokers run.
        ``archive``: where finished tasks go before retention removes them (see
        :mod:`rdq.retention`): an archive, a directory, or ``module:attribute`` naming a sink;
        ``None``: ``RDQ_ARCHIVE``, else the directory ``rdq-archive``. ``blobs``: where payloads
        above the inline limit go (see :mod:`rdq.blobs`): settings, a blob store, a directory
        or a URL; ``None``: ``RDQ_BLOBS``, else the directory ``rdq-blobs``."""
        self._defaults = (defaults or QueueConfig()).validate("")
        self._archive_setting: Archive | str | None = archive
        self._archive_options: dict[str, Any] = {}
        self._archive: Archive | None = None
        self._blobs_setting: Blobs | BlobStore | str | None = blobs
        self._blobs_options: dict[str, Any] = {}
        self._blobs: Blobs | None = blobs if isinstance(blobs, Blobs) else None
        self._import_prefixes = tuple(import_prefixes or ())
        self._queues: dict[str, QueueConfig] = {}
        self._handlers: dict[str, Handler] = {}
        self._by_function: dict[Callable[..., Any], str] = {}
        self._schemes: dict[str, SchemeInvoker] = {}
        self._imported: dict[str, Handler] = {}
        self._schedules: dict[str, Schedule] = {}
        self._lock = threading.Lock()
        self._plans: dict[str, LimitPlan] = {}
        self.revision = 0
        """Counts the changes of queues and handlers (a worker re-reads its limits when it
        moves)."""

    # --- queues ------------------------------------------------------------------------------

    @property
    def defaults(self) -> QueueConfig:
        """The config of queues that were not declared."""
        return self._defaults

    def queue(
        self,
        name: str,
        config: QueueConfig | None = None,
        *,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        lease: float | None = None,
        concurrency: int | None = None,
        task_ttl: float | None = None,
        non_retryable: tuple[type[BaseException], ...] | list[type[BaseException]] | None = None,
        priority: int | None = None,
        breaker: Breaker | bool | None = None,
        dependency: str | None = None,
        outage_errors: tuple[type[BaseException], ...] | list[type[BaseException]] | None = None,
        limits: list[Limit] | tuple[Limit, ...] | None = None,
        fair: str | None = None,
        priority_aging: float | None = None,
        max_snoozes: int | None = None,
        snooze_retry_after: bool | None = None,
        dead_ttl: float | None = None,
        archive_succeeded: bool | None = None,
        keep_succeeded: bool | None = None,
    ) -> QueueConfig:
        """Declare (or re-configure) queue ``name``; settings not given keep the queue's current
        value (or the defaults). Applies to tasks already waiting; ``limits`` (see
        :mod:`rdq.flow`) to tasks submitted from now on where a limit gives them a key.
        ``fair`` and ``priority_aging`` set the order its tasks are claimed in (see
        :class:`~rdq.config.QueueConfig`); ``dead_ttl`` and ``archive_succeeded`` how long its
        finished tasks stay (see :mod:`rdq.retention`); ``keep_succeeded=False`` deletes a
        task as it succeeds (see :class:`~rdq.config.QueueConfig`). Raises ``ConfigError``
        naming the key and queue for invalid settings."""
        try:
            contract.check_queue(name)
        except ValidationError as exc:
            raise ConfigError(f"invalid queue name: {exc.message}", key="queue") from None
        base = config or self._queues.get(name, self._defaults)
        changes = {
            key: value
            for key, value in (
                ("max_attempts", max_attempts),
                ("backoff", backoff),
                ("timeout", timeout),
                ("lease", lease),
                ("concurrency", concurrency),
                ("task_ttl", task_ttl),
                ("non_retryable", tuple(non_retryable) if non_retryable is not None else None),
                ("priority", priority),
                ("breaker", _breaker_setting(breaker, base.breaker)),
                ("dependency", dependency),
                ("outage_errors", tuple(outage_errors) if outage_errors is not None else None),
                ("limits", tuple(limits) if limits is not None else None),
                ("fair", fair),
                ("priority_aging", priority_aging),
                ("max_snoozes", max_snoozes),
                ("snooze_retry_after", snooze_retry_after),
                ("dead_ttl", dead_ttl),
                ("archive_succeeded", archive_succeeded),
                ("keep_succeeded", keep_succeeded),
            )
            if value is not None
        }
        resolved = base.replace(**changes).validate(name)
        _plan(name, resolved, self._handlers)  # ConfigError when its limits disagree
        self._queues[name] = resolved
        self._changed()
        return resolved

    def load_config(self, path: str | Path) -> None:
        """Read queue configs from a TOML file (see :mod:`rdq.config`): its ``[defaults]``
        replace this app's defaults, each ``[queues.NAME]`` table declares a queue, each
        ``[schedules.NAME]`` table a schedule (see :meth:`schedule`) and ``[archive]`` says
        where finished tasks go before they leave (see :attr:`archive`)."""
        self.configure(read_toml(path))

    def configure(self, data: Mapping[str, Any]) -> None:
        """Like :meth:`load_config`, from an already-parsed mapping. Nothing changes unless
        all of it is valid."""
        defaults, queues = parse_config(data, self._defaults)
        schedules = parse_schedules(data.get("schedules", {}))
        archive = parse_archive(data)
        blob_settings = parse_blobs(data)
        for name, config in queues.items():
            _plan(name, config, self._handlers)
        self._defaults = defaults
        self._queues.update(queues)
        for schedule in schedules:
            self._schedules[schedule.name] = schedule
        if archive:
            options: dict[str, Any] = {
                k: archive[k] for k in ("max_file_bytes", "compress") if k in archive
            }
            self._archive_setting = archive.get("sink") or archive.get("directory")
            self._archive_options = options
            self._archive = None
        if blob_settings:
            self._blobs_setting = blob_settings.pop("url", None) or blob_settings.pop(
                "directory", None
            )
            self._blobs_options = blob_settings
            self._blobs = None
        self._changed()

    # --- the archive -------------------------------------------------------------------------

    @property
    def blobs(self) -> Blobs:
        """Where payloads above the inline limit go, and the limits (built at first use;
        ``ConfigError`` for a store that cannot be opened)."""
        if self._blobs is None:
            setting = self._blobs_setting
            self._blobs = (
                setting
                if isinstance(setting, Blobs)
                else blobs_from(setting, **self._blobs_options)
            )
        return self._blobs

    @property
    def archive(self) -> Archive:
        """Where finished tasks go before retention or a purge removes them (built at first
        use; ``ConfigError`` for a sink that cannot be imported)."""
        if self._archive is None:
            self._archive = archive_from(self._archive_setting, **self._archive_options)
        return self._archive

    # --- schedules ---------------------------------------------------------------------------

    def schedule(
        self,
        name: str,
        handler: str | Callable[..., Any] | None = None,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        tz: str = "UTC",
        payload: Any = None,
        queue: str | None = None,
        catch_up: CatchUp = "last",
        grace: float = 60.0,
    ) -> Schedule:
        """Enqueue a task for ``handler`` (default: a handler named ``name``) at every tick of
        ``cron`` (five fields, in time zone ``tz``) or every ``every``, exactly once per tick
        however many workers run; ``catch_up`` says what happens to ticks missed while no
        worker ran (see :mod:`rdq.schedules`). Raises ``ConfigError`` naming the key."""
        ref = name if handler is None else self.handler_name(handler)
        schedule = Schedule(
            name=name,
            handler=ref,
            cron=cron,
            every=every,
            tz=tz,
            payload=payload,
            queue=queue,
            catch_up=catch_up,
            grace=grace,
        ).validate()
        self._schedules[name] = schedule
        return schedule

    @property
    def schedules(self) -> dict[str, Schedule]:
        """The schedules by name."""
        return dict(self._schedules)

    def schedule_queue(self, schedule: Schedule) -> str:
        """The queue a schedule's tasks go to: its own, its handler's, else ``"default"``."""
        return schedule.queue or self.handler_queue(schedule.handler) or DEFAULT_QUEUE

    def queue_config(self, name: str) -> QueueConfig:
        """The current config of queue ``name`` (the defaults if it was not declared)."""
        return self._queues.get(name, self._defaults)

    def limit_plan(self, queue: str) -> LimitPlan:
        """The limits of ``queue``: its own and those of the handlers bound to it (see
        :mod:`rdq.flow`)."""
        plan = self._plans.get(queue)
        if plan is None:
            plan = self._plans[queue] = _plan(queue, self.queue_config(queue), self._handlers)
        return plan

    def declares_queue(self, queue: str) -> bool:
        """True if ``queue`` was declared (in code or a config file), not only served."""
        return queue in self._queues

    def _changed(self) -> None:
        self._plans = {}
        self.revision += 1

    @property
    def queues(self) -> list[str]:
        """Declared queues and the queues registered handlers are bound to (``"default"`` for
        handlers bound to none, where the client puts their tasks), sorted."""
        names = set(self._queues)
        for handler in self._handlers.values():
            names.add(handler.queue if handler.queue is not None else DEFAULT_QUEUE)
        return sorted(names)

    # --- handlers ----------------------------------------------------------------------------

    def handler(
        self,
        name: str | None = None,
        *,
        queue: str | None = None,
        dependency: str | None = None,
        breaker: Breaker | bool | None = None,
        limits: list[Limit] | tuple[Limit, ...] | None = None,
    ) -> Callable[[F], F]:
        """Decorator form of :meth:`register`."""

        def decorate(fn: F) -> F:
            self.register(
                name, fn, queue=queue, dependency=dependency, breaker=breaker, limits=limits
            )
            return fn

        return decorate

    def register(
        self,
        name: str | None,
        fn: Callable[..., Any],
        *,
        queue: str | None = None,
        dependency: str | None = None,
        breaker: Breaker | bool | None = None,
        limits: list[Limit] | tuple[Limit, ...] | None = None,
    ) -> Handler:
        """Register ``fn`` under ``name`` (default: its import path ``module:qualname``).

        ``queue`` is where :meth:`rdq.Client.submit` puts its tasks unless told otherwise.
        ``dependency`` names the service it calls: the breaker of every handler naming one
        dependency trips together (default: its queue's ``dependency``, else a breaker of its
        own); ``breaker`` gives it breaker settings of its own (``False``: none). ``limits``
        (see :mod:`rdq.flow`) hold for its tasks in its queue across the fleet.
        Raises ``ConfigError`` if the name is taken by another function or is invalid."""
        if not callable(fn):
            raise ConfigError(f"{fn!r} is not callable", key="handler")
        ref = name or import_path(fn)
        try:
            contract.check_task(Envelope(id="x", queue="q", handler_ref=ref))
        except ValidationError as exc:
            raise ConfigError(f"invalid handler name {ref!r}: {exc.message}", key="handler")
        if queue is not None:
            try:
                contract.check_queue(queue)
            except ValidationError as exc:
                raise ConfigError(f"invalid queue name: {exc.message}", key="queue") from None
        existing = self._handlers.get(ref)
        if existing is not None and existing.fn is not fn:
            raise ConfigError(f"handler {ref!r} is already registered", key="handler")
        check_dependency(dependency, "dependency")
        own = _breaker_setting(breaker, self._defaults.breaker)
        if own is not None:
            own.validate("breaker")
        own_limits = _handler_limits(ref, limits)
        handler = dataclasses.replace(
            make_handler(ref, fn, queue), dependency=dependency, breaker=own, limits=own_limits
        )
        home = queue if queue is not None else DEFAULT_QUEUE
        _plan(home, self.queue_config(home), {**self._handlers, ref: handler})
        self._handlers[ref] = handler
        self._by_function[fn] = ref
        self._changed()
        return handler

    def register_scheme(self, scheme: str, invoker: SchemeInvoker) -> None:
        """Run tasks whose handler_ref is a ``scheme://…`` URL with ``invoker(task, ctx)``.

        The invoker is awaited on the worker's loop under the queue's timeout and classified
        like a handler (return → success; ``rdq.Permanent``, ``rdq.RetryAfter`` and other
        exceptions as for handlers)."""
        key = scheme.lower().rstrip(":/")
        if not key or not key.replace("+", "").replace("-", "").replace(".", "").isalnum():
            raise ConfigError(f"invalid URL scheme {scheme!r}", key="scheme")
        self._schemes[key] = invoker

    def handler_name(self, handler: str | Callable[..., Any]) -> str:
        """The handler_ref to store for ``handler`` (a ref string or a registered function)."""
        if isinstance(handler, str):
            return handler
        ref = self._by_function.get(handler)
        return ref if ref is not None else import_path(handler)

    def breaker_for(self, queue: str, ref: str) -> Breaker:
        """The breaker settings of ``ref``'s tasks in ``queue`` (the handler's, else the
        queue's)."""
        handler = self._handlers.get(ref)
        if handler is not None and handler.breaker is not None:
            return handler.breaker
        return self.queue_config(queue).breaker

    def dependency_for(self, queue: str, ref: str) -> str | None:
        """The dependency ``ref``'s tasks in ``queue`` call (the handler's, else the
        queue's), or ``None``."""
        handler = self._handlers.get(ref)
        if handler is not None and handler.dependency is not None:
            return handler.dependency
        return self.queue_config(queue).dependency

    def handler_queue(self, ref: str) -> str | None:
        """The queue a registered handler is bound to, if any."""
        handler = self._handlers.get(ref)
        return handler.queue if handler is not None else None

    def resolve(self, ref: str) -> Handler | SchemeInvoker | None:
        """What runs a task with handler_ref ``ref``: a :class:`Handler`, a scheme invoker,
        or None if nothing does (the task is then dead-lettered as ``rdq.UnknownHandler``).

        Raises :class:`HandlerImportError` when ``ref`` is an allowed import path whose
        import fails; only successful imports are remembered."""
        handler = self._handlers.get(ref)
        if handler is not None:
            return handler
        scheme, sep, _ = ref.partition("://")
        if sep:
            return self._schemes.get(scheme.lower())
        if ":" not in ref or not self._importable(ref):
            return None
        with self._lock:
            imported = self._imported.get(ref)
            if imported is None:
                imported = import_handler(ref, self._import_prefixes)
                if imported is not None:
                    self._imported[ref] = imported
            return imported

    def knows(self, ref: str) -> bool:
        """True if a worker of this app could run tasks with handler_ref ``ref`` (a
        registered name, a URL of a registered scheme, or an import path under an allowed
        prefix), judged without importing anything."""
        if ref in self._handlers:
            return True
        scheme, sep, _ = ref.partition("://")
        if sep:
            return scheme.lower() in self._schemes
        return ":" in ref and self._importable(ref)

    @property
    def handler_queues(self) -> list[str]:
        """The queues registered handlers are bound to (``"default"`` for handlers bound to
        none), sorted."""
        return sorted(
            {h.queue if h.queue is not None else DEFAULT_QUEUE for h in self._handlers.values()}
        )

    @property
    def handler_names(self) -> list[str]:
        """The registered handler names, sorted."""
        return sorted(self._handlers)

    @property
    def serves_any_ref(self) -> bool:
        """True if tasks may name handlers beyond the registered ones (scheme invokers or
        allowed import prefixes)."""
        return bool(self._schemes or self._import_prefixes)

    def _importable(self, ref: str) -> bool:
        return is_under(ref.partition(":")[0], self._import_prefixes)


def unknown_handler(app: App, ref: str, *, escape: str = "check_handler=False") -> str:
    """What to say of a handler ``app`` does not know: the closest it knows (did you mean),
    what it knows, and how to submit it anyway (``escape``: the client's ``check_handler=False``,
    the API's ``"force": true``)."""
    known = app.handler_names
    message = f"the app has no handler {ref!r}" + did_you_mean(ref, known)
    message += "; known handlers: " + (", ".join(known) if known else "none registered")
    return message + f" (submit with {escape} for another application's handler)"


def unknown_queue(
    app: App, queue: str, also: Sequence[str] = (), *, escape: str = '"force": true'
) -> str:
    """What to say of a queue neither ``app`` (its declared queues and its handlers') nor
    ``also`` names, as :func:`unknown_handler` says it of a handler."""
    known = sorted({*app.queues, *also})
    message = f"the app has no queue {queue!r}" + did_you_mean(queue, known)
    message += "; known queues: " + (", ".join(known) if known else "none")
    return message + f" (submit with {escape} for a queue another application serves)"


def _handler_limits(ref: str, value: object) -> tuple[Limit, ...]:
    """A handler's limits, each scoped to its tasks."""
    scoped = []
    for i, limit in enumerate(check_limits(value, "limits")):
        if limit.handler is not None and limit.handler != ref:
            raise ConfigError(f"is a limit of handler {limit.handler!r}", key=f"limits[{i}]")
        scoped.append(dataclasses.replace(limit, handler=ref))
    return tuple(scoped)


def _plan(queue: str, config: QueueConfig, handlers: Mapping[str, Handler]) -> LimitPlan:
    declared: list[tuple[str, Limit]] = [("queue", limit) for limit in config.limits]
    for ref, handler in handlers.items():
        home = handler.queue if handler.queue is not None else DEFAULT_QUEUE
        if home == queue:
            declared += [(f"handler:{ref}", limit) for limit in handler.limits]
    return plan_limits(queue, declared)


def _breaker_setting(value: Breaker | bool | None, current: Breaker) -> Breaker | None:
    """``True``/``False`` switch ``current`` on or off; a ``Breaker`` replaces it."""
    if value is None or isinstance(value, Breaker):
        return value
    if isinstance(value, bool):
        return dataclasses.replace(current, enabled=value)
    raise ConfigError("must be an rdq.Breaker, True or False", key="breaker")


def load_app(spec: str, *, key: str = "APP") -> App:
    """The :class:`App` that ``spec`` (``pkg.module:attribute``, the attribute may be dotted)
    names, imported the way ``python -m`` would from the current directory: the current
    directory is put first on ``sys.path`` if it is not there. ``rdq worker APP`` and
    ``rdq server --app`` both load applications with this rule.

    Raises ``ConfigError`` (its ``key`` is ``key``) naming what went wrong: a malformed spec, a
    module that cannot be imported or fails while importing, a missing attribute, or one that
    is not an ``rdq.App``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"expected pkg.module:app, got {spec!r}", key=key)
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}", key=key) from None
    except Exception as exc:
        raise ConfigError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}", key=key
        ) from exc
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigError(f"{module_name!r} has no attribute {attr!r}", key=key) from None
    if not isinstance(found, App):
        raise ConfigError(f"{spec} is a {type(found).__name__}, not an rdq.App", key=key)
    return found

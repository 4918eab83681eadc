"""The names an operator may act on: the queues, handlers and dependencies something on the
store knows, so that a typo (``rdq queue pause reprots``) is refused with the closest known
name instead of answering success for a queue nobody serves.

A queue is known when a task of any status is in it, a worker or node registered it, a
control record (a pause, a breaker, a limit, a paced redrive) is kept for it, or the node's
application declares it (``--app``, its config file, ``--queue``). A handler or dependency of
a queue is known when a task of the queue carries it (its DLQ groups, a page of its pending
and running tasks), a control record of the queue is kept for its key, a registered worker
of the queue declares it (workers register their handlers and dependencies), or the node's
application binds it to the queue.

Reading them costs a few reads (every queue's name, the registry, the control records, one
page of tasks): paid once per operator action, never on a claim.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from rdq._suggest import close_match
from rdq.app import App
from rdq.errors import NotFound, UnknownName
from rdq.flow import DEPENDENCY_PREFIX
from rdq.spi import Page, Status, Storage, TaskFilter

__all__ = ["KnownQueues", "Names", "known_names"]

SAMPLE = 500
"""Pending (and running) tasks of a queue read for the handlers and dependencies they name."""
_HANDLER = "handler:"


@dataclass
class Names:
    """What the store (and the node's application) knows."""

    queues: set[str] = field(default_factory=set)
    handlers: set[str] = field(default_factory=set)
    """Handlers of the queue asked about (empty when none was)."""
    dependencies: set[str] = field(default_factory=set)

    def check_queue(self, queue: str, *, forceable: bool = True) -> None:
        """``UnknownName`` (field ``queue``) unless ``queue`` is known."""
        if queue not in self.queues:
            suggestion = close_match(queue, self.queues)
            raise UnknownName("queue", queue, None, suggestion, "queue", forceable=forceable)

    def check_key(self, queue: str, key: str, field: str = "key") -> None:
        """``UnknownName`` unless the handler or dependency ``key`` names is known in
        ``queue`` (the whole queue's key, and other keys, are not checked)."""
        if key.startswith(_HANDLER):
            name = key.removeprefix(_HANDLER)
            if name not in self.handlers:
                suggestion = close_match(name, self.handlers)
                raise UnknownName("handler", name, queue, suggestion, field)
        elif key.startswith(DEPENDENCY_PREFIX):
            name = key.removeprefix(DEPENDENCY_PREFIX)
            if name not in self.dependencies:
                suggestion = close_match(name, self.dependencies)
                raise UnknownName("dependency", name, queue, suggestion, field)


KNOWN_FOR = 10.0
"""Seconds a surface takes a queue it found known to stay known (a queue is forgotten only
when its last task and record go)."""


class KnownQueues:
    """The queues a surface (a node, a CLI command) found known lately, so that a read that
    found nothing asks the store what it knows once, not once per read: a console page reads
    a queue's breakers, pauses, limits and DLQ groups, most of them empty, and the overview the
    DLQ groups of every queue at once."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def saw(self, queue: str) -> None:
        """``queue`` holds something: it is known."""
        self._seen[queue] = time.monotonic()

    def _fresh(self, queue: str) -> bool:
        seen = self._seen.get(queue)
        return seen is not None and time.monotonic() - seen < KNOWN_FOR

    async def check(self, queue: str, lookup: Callable[[], Awaitable[Names]]) -> None:
        """``UnknownName`` (a read's: nothing to force) unless ``queue`` was found known in
        the last ``KNOWN_FOR`` seconds or ``lookup`` knows it; reads that ask at once share
        one lookup."""
        if self._fresh(queue):
            return
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        async with self._lock:
            if self._fresh(queue):
                return
            names = await lookup()
            now = time.monotonic()
            self._seen.update(dict.fromkeys(names.queues, now))
        names.check_queue(queue, forceable=False)


async def known_names(
    storage: Storage,
    queue: str | None = None,
    *,
    app: App | None = None,
    declared: Sequence[str] = (),
) -> Names:
    """The queues known on ``storage`` (and to ``app``, and ``declared``), and, when ``queue``
    is given, its known handlers and dependencies."""
    names = Names(queues={*declared})
    caps = storage.capabilities()
    try:
        names.queues.update(s.queue for s in await storage.list_queues())
    except NotImplementedError:  # a store that cannot list its queues: ask about this one
        if queue is not None:
            stats = await storage.stats(queue)
            if stats.pending or stats.in_flight or stats.dlq_depth or stats.succeeded:
                names.queues.add(queue)
    controls = await storage.list_controls(None) if caps.control else []
    names.queues.update(c.queue for c in controls)
    workers = await storage.list_workers() if caps.worker_registry else []
    for worker in workers:
        names.queues.update(worker.queues)
    if app is not None:
        names.queues.update(app.queues)
    if queue is None:
        return names
    for control in controls:
        if control.queue == queue:
            _add_key(names, control.key)
    for worker in workers:
        if queue in worker.queues:
            names.handlers.update(_strings(worker.extra.get("handlers")))
            names.dependencies.update(_strings(worker.extra.get("dependencies")))
    if app is not None:
        for ref in app.handler_names:
            if app.handler_queue(ref) in (queue, None):
                names.handlers.add(ref)
                dependency = app.dependency_for(queue, ref)
                if dependency is not None:
                    names.dependencies.add(dependency)
    if queue in names.queues:
        await _add_tasks(storage, queue, names)
    return names


async def _add_tasks(storage: Storage, queue: str, names: Names) -> None:
    for group in await storage.dlq_groups(queue):
        names.handlers.add(group.handler_ref)
    for status in (Status.PENDING, Status.IN_FLIGHT):
        try:
            tasks, _ = await storage.list_tasks(
                queue, TaskFilter(status=status), Page(limit=SAMPLE)
            )
        except (NotImplementedError, NotFound):
            continue
        for task in tasks:
            names.handlers.add(task.handler_ref)
            for key in task.keys:
                _add_key(names, key)


def _add_key(names: Names, key: str) -> None:
    if key.startswith(_HANDLER):
        names.handlers.add(key.removeprefix(_HANDLER))
    elif key.startswith(DEPENDENCY_PREFIX):
        names.dependencies.add(key.removeprefix(DEPENDENCY_PREFIX))


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

"""What a worker checks before it starts working: that its store is usable and offers what
the queues it serves need, and that those queues have handlers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rdq.app import App
from rdq.errors import NotConnected, StorageError, StorageUnavailable
from rdq.spi import Storage, require

__all__ = ["check_discards", "check_storage", "warn_unserved"]


async def check_storage(storage: Storage, queue: str) -> None:
    """One ``stats`` call: a store that is unreachable may be starting up (claims retry),
    but one that refuses for another reason — a schema that was never created, a store that
    is not connected — raises ``StorageError`` with the reason (and the ``rdq migrate`` hint
    where it may apply)."""
    try:
        await storage.stats(queue)
    except StorageUnavailable:
        return
    except StorageError as exc:
        message = str(exc)
        if "rdq migrate" not in message and not isinstance(exc, NotConnected):
            message += (
                "; if the store's schema has not been created, run "
                "`rdq migrate --storage URL` (or storage.migrate())"
            )
        raise StorageError(f"the worker cannot use its store: {message}") from exc


def check_discards(app: App, storage: Storage, queues: Sequence[str]) -> None:
    """Raise ``Unsupported`` naming the queue and the setting when a queue configured
    ``keep_succeeded = False`` is served from a store without ``discard_succeeded``: its
    succeeded tasks would be kept, which the config says not to."""
    for queue in queues:
        if not app.queue_config(queue).keep_succeeded:
            require(storage, "discard_succeeded", f"queue {queue!r} with keep_succeeded = False")


def warn_unserved(app: App, queues: Sequence[str], log: Any, worker_id: str) -> None:
    """Warn about schedules naming a handler the app does not know, and about queues no
    registered handler is bound to (a typo in ``--queue`` or in ``[queues.NAME]``), unless
    the app resolves handlers beyond its registered ones."""
    for schedule in app.schedules.values():
        if app.schedule_queue(schedule) in queues and not app.knows(schedule.handler):
            log.warning(
                "a schedule names a handler this app does not know",
                worker_id=worker_id,
                schedule=schedule.name,
                handler=schedule.handler,
                known_handlers=app.handler_names,
            )
    if app.serves_any_ref:
        return
    served = app.handler_queues
    unserved = [q for q in queues if q not in served]
    if unserved:
        log.warning(
            "no handler is registered for these queues (a misspelt queue name?); "
            "tasks are only put there when submitted with that queue explicitly",
            worker_id=worker_id,
            queues=unserved,
            queues_with_handlers=served,
        )

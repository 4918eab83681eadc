"""The rdq error tree.

Every error rdq raises derives from :class:`RdqError`. Storage plugins map their driver's
exceptions to these classes at their boundary, so application code never has to know which
backend it runs on.

    RdqError
    ├── StorageError                 a backend operation failed
    │   ├── StaleClaim               the claim token is no longer the current one
    │   ├── NotFound                 no task with that id
    │   ├── StaleCursor              the DLQ cursor cannot be used
    │   ├── IDConflict               the id exists in another queue
    │   │   └── DedupConflict        the dedup key is held by a task of another queue
    │   ├── ControlConflict          a control record changed since it was read
    │   ├── NotConnected             the store is not open (before connect, after aclose)
    │   ├── Unsupported              the store lacks a capability (also NotImplementedError)
    │   ├── PayloadMissing           the blob a task's payload reference names is not there
    │   └── StorageUnavailable       the backend cannot be reached (retryable)
    ├── ValidationError              bad input, names the field
    │   └── UnknownName              a queue, handler or dependency nothing knows
    ├── ConfigError                  bad configuration, names the key
    ├── PayloadKeyError              a sealed payload does not open (key missing or wrong)
    └── PluginError                  a storage plugin failed to load
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigError",
    "ControlConflict",
    "DedupConflict",
    "IDConflict",
    "NotConnected",
    "NotFound",
    "PayloadKeyError",
    "PayloadMissing",
    "PluginError",
    "RdqError",
    "StaleClaim",
    "StaleCursor",
    "StorageError",
    "StorageUnavailable",
    "UnknownName",
    "Unsupported",
    "ValidationError",
]


class RdqError(Exception):
    """Root of every error rdq raises."""


class StorageError(RdqError):
    """A storage operation failed."""


class StaleClaim(StorageError):
    """The claim token is not the task's current token: the lease was lost; nothing changed."""

    def __init__(self, task_id: str, message: str | None = None) -> None:
        self.task_id = task_id
        super().__init__(message or f"stale claim on task {task_id!r}: the lease is no longer held")


class NotFound(StorageError):
    """No task with this id exists."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id!r} not found")


class StaleCursor(StorageError):
    """A page cursor (DLQ, task list or audit trail) is malformed, or belongs to another
    queue or filter."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"unusable cursor: {reason}")


class IDConflict(StorageError):
    """A task with this id already exists in another queue."""

    def __init__(self, task_id: str, existing_queue: str) -> None:
        self.task_id = task_id
        self.existing_queue = existing_queue
        super().__init__(f"task id {task_id!r} already exists in queue {existing_queue!r}")


class DedupConflict(IDConflict):
    """A dedup key is held by a live task of another queue: keys are unique across queues, as
    task ids are. ``task_id`` is the holder's id."""

    def __init__(self, key: str, existing_queue: str, task_id: str) -> None:
        super().__init__(task_id, existing_queue)
        self.key = key
        self.args = (f"dedup key {key!r} is held by task {task_id!r} of queue {existing_queue!r}",)


class ControlConflict(StorageError):
    """A control record changed since the caller read it (its ``version`` is not the one
    expected): nothing was written. ``found`` is the record as it is now, an
    :class:`rdq.spi.Control` (``None`` when there is none; typed ``Any`` so that this module,
    the leaf every other imports, imports nothing)."""

    def __init__(self, queue: str, key: str, found: Any) -> None:
        self.queue = queue
        self.key = key
        self.found = found
        now = f"version {found.version} now" if found is not None else "no such control now"
        super().__init__(f"control {key!r} of queue {queue!r} changed meanwhile ({now})")


class NotConnected(StorageError):
    """The store is not open: it was never connected, or it was closed."""

    def __init__(self, store: str, *, closed: bool = False) -> None:
        self.store = store
        self.closed = closed
        state = "has been closed" if closed else "is not connected"
        super().__init__(f"{store} {state}: call connect() first or use `async with`")


class Unsupported(StorageError, NotImplementedError):
    """The store does not offer what the call needs: it does not advertise ``capability``
    (see :class:`rdq.spi.Capabilities`). Nothing was changed."""

    def __init__(self, store: str, capability: str, needed_for: str | None = None) -> None:
        self.store = store
        self.capability = capability
        self.needed_for = needed_for
        what = f" ({needed_for})" if needed_for else ""
        super().__init__(
            f"{store} does not offer the {capability!r} capability{what}; use a backend that "
            "advertises it (`rdq backends --capabilities` lists what each offers)"
        )


class PayloadMissing(StorageError):
    """The blob a task's payload reference names is not in the blob store (or is not what
    its digest says): the payload cannot be read."""

    def __init__(self, digest: str, where: str, reason: str = "not there") -> None:
        self.digest = digest
        self.where = where
        self.reason = reason
        super().__init__(f"payload blob sha256:{digest} is {reason} ({where})")


class StorageUnavailable(StorageError):
    """The backend cannot be reached or refused the connection. Retrying later may succeed."""


class ValidationError(RdqError, ValueError):
    """Input breaks the contract; ``field`` names the offending field (dotted path) if known."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class UnknownName(ValidationError):
    """An operator named a queue, handler or dependency that nothing on the store knows (no
    task, declared queue, registered worker or control record names it): most likely a
    typo, refused unless the operator forces it (a name meant for the future). ``kind`` is
    ``queue``, ``handler`` or ``dependency``; ``suggestion`` the closest known name;
    ``forceable`` is False when it answers a read (there is nothing to force: a listing of a
    queue nothing knows is refused rather than answered empty)."""

    def __init__(
        self,
        kind: str,
        name: str,
        queue: str | None,
        suggestion: str | None,
        field: str,
        *,
        forceable: bool = True,
    ) -> None:
        self.kind = kind
        self.name = name
        self.queue = queue
        self.suggestion = suggestion
        self.forceable = forceable
        where = f" in queue {queue!r}" if queue is not None and kind != "queue" else ""
        guess = f" (did you mean {suggestion!r}?)" if suggestion else ""
        super().__init__(
            f"unknown {kind} {name!r}{where}: no task, declared queue, registered worker or "
            f"control names it{guess}",
            field=field,
        )


class ConfigError(RdqError, ValueError):
    """Configuration is invalid; ``key`` names the offending setting if known."""

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


class PayloadKeyError(RdqError):
    """A sealed payload does not open here: this process lacks the key ``version`` that sealed
    it, or that key does not open it (see :mod:`rdq.keys`). The task is never lost for it:
    a worker puts it back to wait for a worker that holds the key."""

    def __init__(self, task_id: str, version: str | None, reason: str) -> None:
        self.task_id = task_id
        self.version = version
        self.reason = reason
        super().__init__(f"the payload of task {task_id!r} cannot be decrypted: {reason}")


class PluginError(RdqError):
    """A storage plugin could not be loaded."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"storage plugin {name!r} failed to load: {reason}")

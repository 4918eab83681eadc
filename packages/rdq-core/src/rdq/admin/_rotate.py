"""Key rotation: re-seal stored payloads under the keyring's active key, in place, resumably.

The storage contract has no "rewrite a payload" operation, and rotation needs none: it swaps
each task for its re-sealed copy with operations every store with ``cancel``,
``task_listing``, ``queue_listing`` and ``import_tasks`` has, each of which only acts on a
task in the status the swap expects — so a task that moved meanwhile is left alone:

- DEAD and CANCELLED tasks: ``purge`` by ids (it deletes only DEAD and CANCELLED tasks), then
  ``import_tasks`` of the re-sealed copies (status, attempts, counters and times as they
  were);
- PENDING tasks not due within ``margin``: ``cancel`` by ids first (it acts only on PENDING
  and IN_FLIGHT tasks, and no worker claims a task that is not due), then the same swap;
- IN_FLIGHT tasks and PENDING ones due soon are *in motion*: left for a later pass (their
  worker is about to resolve them); SUCCEEDED tasks keep their key until the queue's
  ``task_ttl`` removes them (no operation deletes one by id).

Between the delete and the import a task exists only in the *journal*: before each batch's
first change, the re-sealed copies are appended to the journal file and fsynced. A rotation
killed at any point (``kill -9``) resumes from it: a journaled task that is gone is imported,
one left CANCELLED by the swap is finished, one already swapped is skipped. Nothing is ever
lost, and the journal holds only ciphertext. A task that an operator forced due
(``retry_now``) and a worker claimed in the instant between the read and the ``cancel`` may
run once more (at-least-once, as after a lost lease).

Every queue the rotation changed gets an audit record (action ``keys.rotate``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import msgspec

from rdq.audit import AuditSink, record_action
from rdq.errors import ConfigError, NotFound, PayloadKeyError
from rdq.keys import Keyring, seal, sealed_with, unsealed
from rdq.spi import (
    Envelope,
    Page,
    Selector,
    Status,
    Storage,
    TaskFilter,
    envelope_from_builtins,
    envelope_to_builtins,
    require,
)

__all__ = ["Rotation", "RotationProgress", "rotate_keys"]

BATCH = 500
_ROTATED = (Status.DEAD, Status.CANCELLED, Status.PENDING)
_LEFT = (Status.IN_FLIGHT, Status.SUCCEEDED)


class RotationProgress(msgspec.Struct, kw_only=True):
    """Where a rotation is: the queue and status it reads, and the counts so far."""

    queue: str = ""
    status: str = ""
    seen: int = 0
    resealed: int = 0


class Rotation(msgspec.Struct, kw_only=True):
    """What a rotation did. ``resealed``: tasks now sealed with ``active``; ``current``:
    already sealed with it; ``clear``: payloads stored in clear (left so); ``unreadable``:
    sealed with a key the keyring lacks (left, counted by version in ``missing_keys``);
    ``in_motion``: IN_FLIGHT or due within the margin (run the rotation again);
    ``succeeded_old``: SUCCEEDED tasks that keep an old key until their ``task_ttl``;
    ``recovered``: tasks a resumed rotation finished from its journal."""

    active: str
    resealed: int = 0
    current: int = 0
    clear: int = 0
    unreadable: int = 0
    missing_keys: dict[str, int] = {}
    in_motion: int = 0
    succeeded_old: int = 0
    recovered: int = 0
    queues: dict[str, int] = {}
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every task that can be re-sealed now is (none in motion, none unreadable)."""
        return not self.in_motion and not self.unreadable


async def rotate_keys(
    storage: Storage,
    keyring: Keyring,
    *,
    journal: str | os.PathLike[str],
    queues: Sequence[str] | None = None,
    actor: str,
    reason: str | None = None,
    sinks: Sequence[AuditSink] = (),
    batch: int = BATCH,
    margin: timedelta = timedelta(seconds=60),
    progress: Callable[[RotationProgress], None] | None = None,
) -> Rotation:
    """Re-seal every stored payload sealed with a key other than ``keyring.active`` (see the
    module docstring), after finishing what a killed rotation left in ``journal``. ``queues``
    (default: every queue on the store). ``Unsupported`` when the store lacks a capability
    the swap needs; ``ConfigError`` when the keyring has no active key."""
    for capability in ("cancel", "task_listing", "queue_listing", "import_tasks"):
        require(storage, capability, "rotating payload keys in place")
    if keyring.active is None:
        raise ConfigError("the keyring has no active key to seal with", key="payload_keys.active")
    started = time.monotonic()
    report = Rotation(active=keyring.active or "")
    path = Path(journal)
    done = _Journal(path)
    report.recovered = await done.recover(storage)
    names = list(queues) if queues is not None else [s.queue for s in await storage.list_queues()]
    state = RotationProgress()
    for queue in names:
        state.queue = queue
        before = report.resealed
        for status in (*_ROTATED, *_LEFT):
            state.status = status.value
            await _rotate_status(
                storage, keyring, queue, status, report, done, batch, margin, state, progress
            )
        if report.resealed > before:
            report.queues[queue] = report.resealed - before
            await record_action(
                storage,
                list(sinks),
                "keys.rotate",
                queue,
                {"to": report.active},
                actor,
                reason,
                report.resealed - before,
                None,
            )
    done.finish()
    report.seconds = round(time.monotonic() - started, 3)
    return report


async def _rotate_status(
    storage: Storage,
    keyring: Keyring,
    queue: str,
    status: Status,
    report: Rotation,
    journal: _Journal,
    batch: int,
    margin: timedelta,
    state: RotationProgress,
    progress: Callable[[RotationProgress], None] | None,
) -> None:
    cursor: str | None = None
    soon = await storage.now() + margin
    while True:
        page = Page(limit=batch, cursor=cursor, include_attempts=True)
        tasks, cursor = await storage.list_tasks(queue, TaskFilter(status=status), page)
        swap: list[Envelope] = []
        for task in tasks:
            version = sealed_with(task)
            if version is None:
                report.clear += 1
            elif version == keyring.active:
                report.current += 1
            elif not keyring.has(version):
                report.unreadable += 1
                report.missing_keys[version] = report.missing_keys.get(version, 0) + 1
            elif status is Status.SUCCEEDED:
                report.succeeded_old += 1
            elif status is Status.IN_FLIGHT or (
                status is Status.PENDING
                and (task.next_attempt_at is None or task.next_attempt_at <= soon)
            ):
                report.in_motion += 1
            else:
                try:
                    swap.append(_resealed(task, keyring))
                except PayloadKeyError:
                    report.unreadable += 1
                    report.missing_keys[version] = report.missing_keys.get(version, 0) + 1
        state.seen += len(tasks)
        if swap:
            report.resealed += await journal.swap(storage, queue, status, swap)
            state.resealed = report.resealed
        if progress is not None:
            progress(state)
        if cursor is None:
            return


def _resealed(task: Envelope, keyring: Keyring) -> Envelope:
    """``task`` with its payload opened and sealed again under the active key."""
    return seal(unsealed(task, keyring), keyring)


class _Journal:
    """The re-sealed copies of the batch being swapped, on disk before the swap changes
    anything (see the module docstring): one line ``{"n": …, "batch": [...]}``, written over
    the file and fsynced before the batch's first change, and the file emptied once the batch
    is swapped — so it holds at most one batch, the one a kill may have left half done (a
    ``{"done": n}`` line, which earlier journals ended a batch with, is honoured too)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._batches = 0

    async def recover(self, storage: Storage) -> int:
        """Finish every journaled batch that has no ``done`` line; returns the tasks put back."""
        if not self.path.exists():
            return 0
        pending: dict[int, list[Envelope]] = {}
        for line in self.path.read_bytes().splitlines():
            try:
                entry = msgspec.json.decode(line)
            except msgspec.DecodeError:  # a line cut by the kill: its batch changed nothing
                continue
            if "batch" in entry:
                pending[entry["n"]] = [envelope_from_builtins(t) for t in entry["batch"]]
            elif "done" in entry:
                pending.pop(entry["done"], None)
        recovered = 0
        for tasks in pending.values():
            recovered += await _finish_swap(storage, tasks)
        self.path.unlink()
        return recovered

    async def swap(
        self, storage: Storage, queue: str, status: Status, tasks: list[Envelope]
    ) -> int:
        """Swap ``tasks`` (re-sealed copies of stored ``status`` tasks of ``queue``) in;
        returns how many were swapped (a task that moved meanwhile is left as it is)."""
        self._batches += 1
        n = self._batches
        body = [envelope_to_builtins(t) for t in tasks]
        self._write(msgspec.json.encode({"n": n, "batch": body}) + b"\n")
        ids = [t.id for t in tasks]
        if status is Status.PENDING:
            cancelled = await storage.cancel(queue, ids)
            if cancelled != len(ids):
                tasks = await _still(storage, tasks, Status.CANCELLED)
                ids = [t.id for t in tasks]
        deleted = await storage.purge(queue, Selector(ids=ids)) if ids else 0
        if deleted != len(ids):
            tasks = await _gone(storage, tasks)
        if tasks:
            await storage.import_tasks(tasks)
        self._write(b"")  # the batch is swapped: nothing left to recover
        return len(tasks)

    def finish(self) -> None:
        """The rotation ended: no batch is left to recover."""
        self.path.unlink(missing_ok=True)

    def _write(self, content: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o600)
        try:
            os.write(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)


async def _still(storage: Storage, tasks: list[Envelope], status: Status) -> list[Envelope]:
    """The tasks of ``tasks`` whose stored copy is in ``status`` now."""
    kept = []
    for task in tasks:
        try:
            if (await storage.get(task.id)).status == status:
                kept.append(task)
        except NotFound:
            pass
    return kept


async def _gone(storage: Storage, tasks: list[Envelope]) -> list[Envelope]:
    """The tasks of ``tasks`` that are no longer stored."""
    kept = []
    for task in tasks:
        try:
            await storage.get(task.id)
        except NotFound:
            kept.append(task)
    return kept


async def _finish_swap(storage: Storage, tasks: list[Envelope]) -> int:
    """Finish a journaled batch a killed rotation left: import the tasks that are gone, and
    swap those it left CANCELLED (its own cancel) or still sealed with the old key."""
    put_back: list[Envelope] = []
    by_queue: dict[str, list[Envelope]] = {}
    for task in tasks:
        try:
            stored = await storage.get(task.id)
        except NotFound:
            put_back.append(task)
            continue
        where = stored.status == task.status or (
            task.status is Status.PENDING and stored.status == Status.CANCELLED
        )
        if where and sealed_with(stored) != sealed_with(task):
            by_queue.setdefault(task.queue, []).append(task)
    for queue, swapped in by_queue.items():
        pending = [t.id for t in swapped if t.status is Status.PENDING]
        if pending:
            await storage.cancel(queue, pending)
        await storage.purge(queue, Selector(ids=[t.id for t in swapped]))
        put_back += await _gone(storage, swapped)
    if put_back:
        await storage.import_tasks(put_back)
    return len(put_back)

"""Submitting tasks: the async :class:`Client` and the blocking :class:`SyncClient`.

A submission names its handler (a registered name, a ``pkg.module:function`` import path, a
``scheme://`` callback URL, or a function registered with the app), its payload (any JSON
value), and optionally a client-chosen id (submitting the same id to the same queue again is
a no-op: idempotent), a delay, headers and a per-task retry override. A submission with a
``dedup_key`` is folded into the live task that holds the key (see :mod:`rdq._dedup` and
``docs/engine.md``): :class:`Submitted` says what happened (``outcome``).

With an app attached, a handler the app does not know (not registered, no invoker for its
URL scheme, not under an allowed import prefix) is refused with a ``ValidationError`` that
lists the known handlers: a typo would otherwise wait forever in a queue no worker serves.
Producers that submit for another application's handlers pass ``check_handler=False``.

The envelope's fields (id, queue, handler_ref, headers, payload size) are validated by the
store, which every backend does before storing anything (the storage contract), so the client
checks only what the store never sees (delay, retry override) and validates a task itself only
where a batch needs more than one store call (to keep "all or nothing").
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import msgspec

from rdq import tracing
from rdq._dedup import admit as admit_under_key
from rdq._dedup import dedup_of
from rdq._ids import new_task_ids
from rdq._storage_url import storage_url
from rdq.app import DEFAULT_QUEUE, App, import_path, unknown_handler
from rdq.blobs import Blobs, Offloaded, blobs_from
from rdq.errors import Unsupported, ValidationError
from rdq.flow import DEPENDENCY_PREFIX, LimitControls
from rdq.keys import Keyring, sealed_for
from rdq.plugins import open_storage
from rdq.spi import (
    DEFAULT_PRIORITY,
    AdmitOutcome,
    Dedup,
    Envelope,
    RetryOverride,
    Storage,
    bounds,
    require,
)

__all__ = ["Client", "Submission", "Submitted", "SyncClient", "task_keys_for"]

T = TypeVar("T")

MAX_BATCH = 1000


@dataclasses.dataclass(slots=True)
class Submission:
    """One task to submit with :meth:`Client.submit_many` (the arguments of ``submit``)."""

    handler: str | Callable[..., Any]
    payload: Any = None
    _: dataclasses.KW_ONLY
    queue: str | None = None
    id: str | None = None
    delay: float | timedelta | None = None
    headers: dict[str, str] | None = None
    retry: RetryOverride | None = None
    priority: int | None = None
    """-10..10, higher claimed first; None: the queue's configured default (0 without an app)."""
    keys: Sequence[str] = ()
    """The task's own flow-control keys (``tenant:acme``): what pauses, limits and a fair
    queue's shares (its ``fair`` prefix) go by, beside the dependency key the app adds."""
    check_handler: bool = True
    """With an app attached, refuse a handler it does not know (see :meth:`Client.submit`)."""
    dedup_key: str | None = None
    """Fold this submission into the live task that holds the key (see :meth:`Client.submit`)."""
    dedup_window: float | timedelta | None = None
    dedup_mode: str = "skip"
    dedup_max_age: float | timedelta | None = None


class Submitted(msgspec.Struct, frozen=True):
    """The outcome of one submission: the task's id, and whether it was newly stored
    (False: a task with this id already existed in this queue; nothing changed).

    ``outcome`` says what the submission did: ``added``, or ``skipped`` (nothing changed);
    under a dedup key also ``replaced`` or ``extended``. ``id`` is then the task that holds
    the key (the one added, or the one the submission was folded into)."""

    id: str
    queue: str
    created: bool
    outcome: str = "added"


class Client:
    """Submits tasks to a connected ``storage``. ``app`` (optional) maps registered handler
    functions to their names and default queues."""

    def __init__(
        self,
        storage: Storage,
        app: App | None = None,
        *,
        actor: str | None = None,
        keys: Keyring | Literal["env"] | None = "env",
    ) -> None:
        """``actor`` names this client in the audit entries of submissions folded under a
        dedup key (default ``client@<host>``). ``keys`` seals payloads before the store sees
        them (see :mod:`rdq.keys`): ``"env"`` (the default) reads the keyring the environment
        configures (:meth:`rdq.keys.Keyring.from_env`), ``None`` holds none. With an active
        key every payload is sealed unless its queue says ``encrypt = false``; a queue that
        says ``encrypt = true`` refuses a submit without one. A payload is sealed first, then
        kept by reference when the sealed bytes are above the inline limit (see
        :mod:`rdq.blobs`): the blob store never holds a clear payload."""
        self.storage = storage
        self.app = app
        self.actor = actor or f"client@{socket.gethostname()}"
        self._blobs: Blobs | None = None
        self.keys = Keyring.from_env() if keys == "env" else keys
        self._limit_controls = LimitControls()

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        url: str | None = None,
        app: App | None = None,
        *,
        keys: Keyring | Literal["env"] | None = "env",
        **options: Any,
    ) -> AsyncIterator[Client]:
        """Open and connect the store for ``url``, yield a client, close the store after.

        Without ``url``: the store ``RDQ_STORAGE`` names, else ``sqlite:///./rdq.db`` (said on
        standard error), as every ``rdq`` command chooses (:func:`rdq.storage_url`); never
        ``memory://`` unless named, so a task reported stored is in a store that outlives the
        process."""
        async with open_storage(storage_url(url), **options) as storage:
            yield cls(storage, app, keys=keys)

    async def submit(
        self,
        handler: str | Callable[..., Any],
        payload: Any = None,
        *,
        queue: str | None = None,
        id: str | None = None,
        delay: float | timedelta | None = None,
        headers: dict[str, str] | None = None,
        retry: RetryOverride | None = None,
        priority: int | None = None,
        keys: Sequence[str] = (),
        check_handler: bool = True,
        connection: object | None = None,
        dedup_key: str | None = None,
        dedup_window: float | timedelta | None = None,
        dedup_mode: str = "skip",
        dedup_max_age: float | timedelta | None = None,
    ) -> Submitted:
        """Submit one task. ``priority`` (-10..10, higher claimed first) defaults to the
        queue's configured priority. With ``connection`` (a database connection or session
        of the application, in a transaction) the task is stored by that transaction: it
        exists once it commits and never if it rolls back (stores with the capability
        ``transactional_enqueue``, i.e. PostgreSQL; ``Unsupported`` for others). A priority other
        than 0 needs a store with ``priorities`` (``Unsupported`` otherwise). ``keys`` are the
        task's own flow-control keys (``["tenant:acme"]``; see :class:`Submission`).

        ``dedup_key`` folds the submission into the task that holds the key, if one does: the
        key is held by the last task given it, for ``dedup_window`` seconds after its
        submission or, without a window, while it is pending or running; keys are unique
        across queues, as ids are. ``dedup_mode`` says what a submission of a held key does:
        ``"skip"`` (nothing), ``"extend"`` (the window starts again), ``"replace"`` (a holder
        not yet started takes this payload and headers) or ``"debounce"`` (that, and the
        holder becomes due after this submission's delay, but never later than
        ``dedup_max_age`` seconds — default an hour — after it was first submitted). The
        answer's ``outcome`` says what happened, and ``id`` is the holder's; a submission that
        added no task is an audit entry (``dedup``). ``DedupConflict`` when the key is held in
        another queue.

        Raises ``ValidationError`` (naming the field) for bad input — with an app attached, a
        handler it does not know, unless ``check_handler=False`` (for tasks that another
        application's workers run) —, ``IDConflict`` if ``id`` exists in another queue,
        ``StorageUnavailable`` on outage."""
        task, wait = self._envelope(
            Submission(
                handler,
                payload,
                queue=queue,
                id=id,
                delay=delay,
                headers=headers,
                retry=retry,
                priority=priority,
                keys=keys,
                check_handler=check_handler,
            ),
            id if id is not None else new_task_ids(1)[0],
            tracing.trace_headers(),
        )
        dedup = dedup_of(dedup_key, dedup_window, dedup_mode, dedup_max_age)
        task, blob = await self._offload(task)
        await self._provision([task])
        if dedup is not None:
            if connection is not None:
                raise ValidationError(
                    "a submit under a dedup key is not taken in the application's transaction",
                    field="dedup_key",
                )
            submitted = await self._admit(task, dedup, wait, id is not None)
            await self._keep([blob])
            return submitted
        if connection is not None:
            [created] = await self._enqueue_in(connection, [task], wait)
        else:
            created = await self.storage.enqueue(task, delay=wait)
        await self._keep([blob])
        return Submitted(task.id, task.queue, created, "added" if created else "skipped")

    @property
    def blobs(self) -> Blobs:
        """Where this client puts payloads above the inline limit (the app's, else
        ``RDQ_BLOBS``, else ``./rdq-blobs``: see :mod:`rdq.blobs`)."""
        if self._blobs is None:
            self._blobs = self.app.blobs if self.app is not None else blobs_from(None)
        return self._blobs

    async def _offload(self, task: Envelope) -> tuple[Envelope, Offloaded | None]:
        """``task`` with its payload in the blob store when it is above the inline limit and
        the store indexes payload references (else as it is: the store checks its size)."""
        if not self.storage.capabilities().payload_refs:
            return task, None
        return await self.blobs.offload(task)

    async def _keep(self, blobs: Sequence[Offloaded | None]) -> None:
        if any(blob is not None for blob in blobs):
            await self.blobs.keep(blobs)

    async def _admit(
        self, task: Envelope, dedup: Dedup, wait: timedelta | None, id_given: bool
    ) -> Submitted:
        admitted = await admit_under_key(
            self.storage, task, dedup, wait, actor=self.actor, id_given=id_given
        )
        added = admitted.outcome == AdmitOutcome.ADDED
        return Submitted(admitted.task_id, admitted.queue, added, admitted.outcome.value)

    async def submit_many(
        self, submissions: Iterable[Submission], *, connection: object | None = None
    ) -> list[Submitted]:
        """Submit many tasks, in order; one round trip per batch (per delay) where the store
        has ``batch_enqueue``. Every submission is validated before any is stored. With
        ``connection``, they are stored by the application's transaction (see
        :meth:`submit`)."""
        items = list(submissions)
        if any(s.dedup_key is not None for s in items):  # each under its key, in order
            return [await self._submit_one(s, connection) for s in items]
        ids = new_task_ids(sum(1 for s in items if s.id is None))
        trace = tracing.trace_headers()
        built = [self._envelope(s, s.id if s.id is not None else ids.pop(), trace) for s in items]
        if not built:
            return []
        blobs: list[Offloaded] = []
        for index, (task, wait) in enumerate(built):
            stored, blob = await self._offload(task)
            if blob is not None:
                built[index] = (stored, wait)
                blobs.append(blob)
        await self._provision([task for task, _ in built])
        created: list[bool] = [False] * len(built)
        if connection is not None or self.storage.capabilities().batch_enqueue:
            groups: dict[timedelta | None, list[int]] = {}
            for index, (_, wait) in enumerate(built):
                groups.setdefault(wait, []).append(index)
            if len(groups) > 1 or len(built) > MAX_BATCH:  # several calls: check all first
                for task, _ in built:
                    bounds.check_task(task)
            for wait, indexes in groups.items():
                for start in range(0, len(indexes), MAX_BATCH):
                    chunk = indexes[start : start + MAX_BATCH]
                    tasks = [built[i][0] for i in chunk]
                    if connection is not None:
                        flags = await self._enqueue_in(connection, tasks, wait)
                    else:
                        flags = await self.storage.enqueue_batch(tasks, delay=wait)
                    for i, flag in zip(chunk, flags, strict=True):
                        created[i] = flag
        else:
            if len(built) > 1:
                for task, _ in built:
                    bounds.check_task(task)
            for index, (task, wait) in enumerate(built):
                created[index] = await self.storage.enqueue(task, delay=wait)
        await self._keep(blobs)
        return [
            Submitted(task.id, task.queue, flag, "added" if flag else "skipped")
            for (task, _), flag in zip(built, created, strict=True)
        ]

    async def _submit_one(self, s: Submission, connection: object | None) -> Submitted:
        return await self.submit(
            s.handler,
            s.payload,
            queue=s.queue,
            id=s.id,
            delay=s.delay,
            headers=s.headers,
            retry=s.retry,
            priority=s.priority,
            keys=s.keys,
            check_handler=s.check_handler,
            connection=connection,
            dedup_key=s.dedup_key,
            dedup_window=s.dedup_window,
            dedup_mode=s.dedup_mode,
            dedup_max_age=s.dedup_max_age,
        )

    async def get(self, task_id: str) -> Envelope:
        """The task with its full history. ``NotFound`` if there is none."""
        return await self.storage.get(task_id)

    async def _provision(self, tasks: list[Envelope]) -> None:
        """Create the control record of each limit key of ``tasks`` that has none yet (see
        :mod:`rdq.flow._provision`), before any of them is stored."""
        if self.app is not None and any(task.keys for task in tasks):
            await self._limit_controls.ensure(self.storage, self.app.limit_plan, tasks)

    async def _enqueue_in(
        self, connection: object, tasks: list[Envelope], delay: timedelta | None
    ) -> list[bool]:
        require(
            self.storage, "transactional_enqueue", "submitting in the application's transaction"
        )
        return await self.storage.enqueue_in(connection, tasks, delay=delay)

    def _envelope(
        self, s: Submission, task_id: str, trace: dict[str, str] | None = None
    ) -> tuple[Envelope, timedelta | None]:
        """The envelope and delay of one submission. Checks what the store does not see
        (delay, retry override); the envelope itself is validated by the store."""
        ref = self._handler_ref(s.handler)
        if s.check_handler and self.app is not None and not self.app.knows(ref):
            raise ValidationError(unknown_handler(self.app, ref), field="handler_ref")
        queue = s.queue or (self.app.handler_queue(ref) if self.app else None) or DEFAULT_QUEUE
        wait: timedelta | None
        if s.delay is None:
            wait = None
        elif isinstance(s.delay, timedelta):
            wait = s.delay
        elif isinstance(s.delay, int | float) and not isinstance(s.delay, bool):
            wait = timedelta(seconds=s.delay)
        else:
            raise ValidationError("must be seconds or a timedelta", field="delay")
        if wait is not None and wait < timedelta(0):
            raise ValidationError("must not be negative", field="delay")
        if isinstance(s.keys, str | bytes):
            raise ValidationError("must be a list of keys, not one string", field="keys")
        if s.retry is not None and not isinstance(s.retry, RetryOverride):
            raise ValidationError("must be an rdq.spi.RetryOverride", field="retry")
        headers = dict(s.headers) if s.headers else {}
        if trace:
            for key, value in trace.items():
                headers.setdefault(key, value)
        if s.priority is not None:
            priority = s.priority
        elif self.app is not None:
            priority = self.app.queue_config(queue).priority
        else:
            priority = DEFAULT_PRIORITY
        if priority != DEFAULT_PRIORITY and not self.storage.capabilities().priorities:
            raise Unsupported(
                type(self.storage).__name__, "priorities", f"a task of priority {priority}"
            )
        task = Envelope(
            id=task_id,
            queue=queue,
            handler_ref=ref,
            payload=s.payload,
            headers=headers,
            retry=s.retry,
            priority=priority,
            keys=list(dict.fromkeys(s.keys)),
        )
        if self.app is not None:
            task = task_keys_for(self.app, task)
        return self._sealed(task), wait

    def _sealed(self, task: Envelope) -> Envelope:
        """``task`` with its payload sealed when its queue and the keyring say so."""
        wanted = self.app.queue_config(task.queue).encrypt if self.app is not None else None
        return sealed_for(task, self.keys, wanted)

    def _handler_ref(self, handler: str | Callable[..., Any]) -> str:
        if isinstance(handler, str):
            return handler
        if self.app is not None:
            return self.app.handler_name(handler)
        if callable(handler):
            return import_path(handler)
        raise ValidationError("must be a handler name or function", field="handler_ref")


def task_keys_for(app: App, task: Envelope) -> Envelope:
    """``task`` with its flow-control keys added: its dependency's, when the app names one,
    and those its limits give it (see :mod:`rdq.flow`; kept only by stores with
    ``control``). ``ValidationError`` (field ``limits.<name>``) when a limit's key function
    fails on it."""
    keys = list(task.keys)
    dependency = app.dependency_for(task.queue, task.handler_ref)
    if dependency is not None and DEPENDENCY_PREFIX + dependency not in keys:
        keys.append(DEPENDENCY_PREFIX + dependency)
    plan = app.limit_plan(task.queue)
    if plan.keyers:
        keys += [k for k in plan.keys_of(task) if k not in keys]
    return msgspec.structs.replace(task, keys=keys) if keys != task.keys else task


class SyncClient:
    """A blocking client for code that is not async (Django, Flask, scripts).

    It runs a private event loop in a daemon thread and forwards each call to a
    :class:`Client` on it; the semantics and errors are the same. Use it as a context manager
    or call :meth:`close`. Without ``url`` it chooses the store as :meth:`Client.open` does."""

    def __init__(
        self,
        url: str | None = None,
        app: App | None = None,
        *,
        keys: Keyring | Literal["env"] | None = "env",
        **options: Any,
    ) -> None:
        url = storage_url(url)
        keyring = Keyring.from_env() if keys == "env" else keys  # a bad one fails first
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rdq-sync-client", daemon=True
        )
        self._thread.start()
        self._closed = False
        try:
            self._storage = open_storage(url, **options)
            self._run(self._storage.connect())
        except BaseException:
            self._stop_loop()
            raise
        self._client = Client(self._storage, app, keys=keyring)

    def submit(
        self,
        handler: str | Callable[..., Any],
        payload: Any = None,
        *,
        queue: str | None = None,
        id: str | None = None,
        delay: float | timedelta | None = None,
        headers: dict[str, str] | None = None,
        retry: RetryOverride | None = None,
        priority: int | None = None,
        check_handler: bool = True,
        dedup_key: str | None = None,
        dedup_window: float | timedelta | None = None,
        dedup_mode: str = "skip",
        dedup_max_age: float | timedelta | None = None,
    ) -> Submitted:
        """See :meth:`Client.submit`."""
        return self._run(
            self._client.submit(
                handler,
                payload,
                queue=queue,
                id=id,
                delay=delay,
                headers=headers,
                retry=retry,
                priority=priority,
                check_handler=check_handler,
                dedup_key=dedup_key,
                dedup_window=dedup_window,
                dedup_mode=dedup_mode,
                dedup_max_age=dedup_max_age,
            )
        )

    def submit_many(self, submissions: Sequence[Submission]) -> list[Submitted]:
        """See :meth:`Client.submit_many`."""
        return self._run(self._client.submit_many(submissions))

    def get(self, task_id: str) -> Envelope:
        """See :meth:`Client.get`."""
        return self._run(self._client.get(task_id))

    @property
    def storage(self) -> Storage:
        """The underlying store (its methods are async and belong to the client's loop)."""
        return self._storage

    def close(self) -> None:
        """Close the store and stop the client's loop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._storage.aclose())
        finally:
            self._stop_loop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed and not self._loop.is_running():
            coro.close()
            raise RuntimeError("the SyncClient is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

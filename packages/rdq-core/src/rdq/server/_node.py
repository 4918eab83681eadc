"""What every request handler of a node shares: storage, admin, auth, its settings."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from rdq.admin import TaskAdmin
from rdq.app import App
from rdq.audit import AuditSink, JsonLinesAuditSink
from rdq.blobs import Blobs, blobs_from
from rdq.errors import StorageUnavailable
from rdq.flow import Breaker, LimitControls
from rdq.keys import Keyring
from rdq.retention import Archive, archive_from
from rdq.server._auth import Authenticator
from rdq.server._gauges import QueueGauges
from rdq.server._settings import ServerSettings
from rdq.server._upkeep import NodeUpkeep, node_id
from rdq.spi import ForwardingStorage, Stats, Storage

T = TypeVar("T")

__all__ = ["Node", "TimeLimitedStorage"]


class Node:
    """The state of one server node. Nodes keep nothing that others need: several nodes on
    one storage cooperate through it alone (a UI logout is remembered by the node that
    served it, see :mod:`rdq.server._auth`)."""

    def __init__(
        self,
        settings: ServerSettings,
        storage: Storage,
        *,
        audit_sinks: Sequence[AuditSink] = (),
        engine_app: App | None = None,
        keys: Keyring | None = None,
    ) -> None:
        self.settings = settings
        self.keys = keys
        """Seals what is submitted through the node, and opens sealed payloads for the
        roles that may read them (see :mod:`rdq.server._payloads`)."""
        self.engine_app = engine_app
        """The application whose queue configs the node knows (``--app``), if any."""
        self.storage: Storage = TimeLimitedStorage(storage, settings.request_timeout)
        self.blobs: Blobs = engine_app.blobs if engine_app is not None else blobs_from(None)
        """Where payloads above the inline limit go, and are read back from (the app's
        ``[blobs]``, else ``RDQ_BLOBS``, else ``./rdq-blobs``: see :mod:`rdq.blobs`)."""
        self.auth = Authenticator(settings)
        sinks = list(audit_sinks)
        if settings.audit_log:
            sinks.append(JsonLinesAuditSink(settings.audit_log))
        self.admin = TaskAdmin(
            self.storage,
            sinks=sinks,
            app=engine_app,
            declared=list(settings.queues),
            archive=_purge_archive(settings, engine_app),
            blobs=self.blobs,
        )
        self.id = node_id()
        """The node's id in the worker registry and as the driver of paced redrives."""
        self.upkeep = NodeUpkeep(
            self.id, self.admin, list(settings.queues) if settings.work else []
        )
        self.limit_controls = LimitControls()
        self.gauges = QueueGauges(self.admin, self.queues)
        """The queue gauges ``/metrics`` serves, read from the store (cached)."""
        """The limit keys whose control records submits through this node know exist."""

    def breaker_config(self, queue: str) -> Breaker | None:
        """The breaker settings of ``queue`` when the node's application declares it (its
        ramp applies when a breaker is closed by hand); ``None``: the defaults."""
        app = self.engine_app
        if app is None or queue not in app.queues:
            return None
        try:
            return app.queue_config(queue).breaker
        except Exception:
            return None

    async def queues(self) -> list[Stats]:
        """Every queue the store holds tasks for, and the queues this node works (even when
        empty), by name."""
        try:
            found = {s.queue: s for s in await self.admin.list_queues()}
        except NotImplementedError:  # a store without list_queues: the configured ones
            found = {}
        for queue in self.settings.queues:
            if queue not in found:
                found[queue] = await self.storage.stats(queue)
        return [found[name] for name in sorted(found)]


READS = frozenset(
    {
        "get",
        "stats",
        "list_tasks",
        "dlq_list",
        "list_queues",
        "dlq_groups",
        "list_audit",
        "now",
        "list_controls",
        "list_workers",
        "read_counts",
    }
)
"""The operations a node bounds by ``request_timeout``. Mutations (submit, redrive, purge,
cancel, the audit entry) are bounded by the store's own ``timeout`` only: cutting one short on
the client side would not stop the backend from finishing it, and a large redrive may
legitimately take longer than a page view."""


class TimeLimitedStorage(ForwardingStorage):
    """A view of a store whose read operations give up after ``seconds`` with
    ``StorageUnavailable`` (a frozen database is an outage, and a request must say so while
    its client still waits). The store's own ``timeout`` applies underneath."""

    def __init__(self, storage: Storage, seconds: float) -> None:
        super().__init__(storage)
        self._seconds = seconds

    async def _forward(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        if name not in READS:
            return await call()
        try:
            async with asyncio.timeout(self._seconds):
                return await call()
        except TimeoutError:
            raise StorageUnavailable(
                f"the storage did not answer {name} within {self._seconds:g}s"
            ) from None


def _purge_archive(settings: ServerSettings, engine_app: App | None) -> Archive | None:
    """Where the node's purges archive what they delete (``None``: they do not)."""
    if not settings.archive_purges:
        return None
    return engine_app.archive if engine_app is not None else archive_from(None)

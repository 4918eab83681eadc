"""What every request handler of a node shares: storage, admin, auth, the queues it knows."""

from __future__ import annotations

from collections.abc import Sequence

from rdq.admin import DLQAdmin
from rdq.audit import AuditSink, JsonLinesAuditSink
from rdq.server._auth import Authenticator
from rdq.server._settings import ServerSettings
from rdq.spi import Storage

__all__ = ["Node"]

MAX_KNOWN_QUEUES = 1000
"""Queues seen in requests are remembered up to this many (configured ones always are)."""


class Node:
    """The state of one server node. Nodes keep nothing that others need: several nodes on
    one storage cooperate through it alone."""

    def __init__(
        self,
        settings: ServerSettings,
        storage: Storage,
        *,
        audit_sinks: Sequence[AuditSink] = (),
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.auth = Authenticator(settings)
        sinks = list(audit_sinks)
        if settings.audit_log:
            sinks.append(JsonLinesAuditSink(settings.audit_log))
        self.admin = DLQAdmin(storage, sinks=sinks)
        self._seen: dict[str, None] = dict.fromkeys(settings.queues)

    @property
    def known_queues(self) -> list[str]:
        """Configured queues, then queues seen in requests to this node, sorted.

        The storage contract has no "list queues" operation, so a node lists what it was
        configured with and what it has seen since it started."""
        return sorted(self._seen)

    def saw_queue(self, queue: str) -> None:
        if queue not in self._seen and len(self._seen) < MAX_KNOWN_QUEUES:
            self._seen[queue] = None

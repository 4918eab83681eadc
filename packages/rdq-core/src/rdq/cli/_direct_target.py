"""``DirectTarget``: the operator commands acting on a store directly, through
:class:`rdq.admin.TaskAdmin` (every change audited as the operator).

A paced redrive started here is driven by the command that follows it, unless it is left to a
node (``detach``). The drivers and admin modules are imported when a command first needs them,
so that ``rdq --help`` stays quick.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Literal, Self

import msgspec

from rdq.admin import TaskSelector
from rdq.cli._targets import (
    Action,
    AuditQuery,
    Listed,
    Listing,
    OpProgress,
    Progress,
    Target,
    TargetError,
)
from rdq.spi import DLQFilter, Envelope, Selector, TaskFilter

__all__ = ["DirectTarget"]

_EXPORT_PAGE = 500
_EXPORT_PART = 10


class DirectTarget(Target):
    """Acts on a store through :class:`rdq.admin.TaskAdmin` (audited as ``actor``)."""

    def __init__(
        self,
        storage_url: str,
        *,
        actor: str,
        audit_log: str | None = None,
        archive: str | None = "",
    ) -> None:
        """``archive``: where a purge writes what it deletes (a directory or
        ``module:attribute``; ``""``: the default, ``RDQ_ARCHIVE`` or ``./rdq-archive``;
        ``None``: nowhere)."""
        from rdq.admin import TaskAdmin
        from rdq.audit import AuditSink, JsonLinesAuditSink
        from rdq.blobs import blobs_from
        from rdq.plugins import open_storage
        from rdq.retention import archive_from

        self._storage = open_storage(storage_url)
        sinks: list[AuditSink] = [JsonLinesAuditSink(audit_log)] if audit_log else []
        chosen = None if archive is None else archive_from(archive or None)
        self._admin = TaskAdmin(self._storage, sinks=sinks, archive=chosen, blobs=blobs_from(None))
        self._actor = actor
        self._driver = f"cli:{_host_pid()}"

    async def __aenter__(self) -> Self:
        await self._storage.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._storage.aclose()

    async def stats(self, queues: list[str]) -> list[dict[str, Any]]:
        if queues:
            return [msgspec.to_builtins(await self._admin.stats(q)) for q in queues]
        try:
            found = await self._admin.list_queues()
        except NotImplementedError:
            raise TargetError("this store cannot list its queues yet: name them") from None
        return [msgspec.to_builtins(s) for s in found]

    async def retention(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        from rdq.retention import read_records

        found = await read_records(self._storage)
        return {
            queue: {"queue": queue, "recorded": True, **msgspec.to_builtins(record)}
            for queue, record in found.items()
            if queue in queues
        }

    async def get(self, task_id: str) -> dict[str, Any]:
        return _opened(await self._admin.get(task_id))

    async def page(self, listing: Listing) -> tuple[list[dict[str, Any]], str | None]:
        from rdq.spi import Page

        page = Page(
            limit=listing.limit, cursor=listing.cursor, include_attempts=listing.include_attempts
        )
        if isinstance(listing.filter, TaskFilter):
            tasks, cursor = await self._admin.list_tasks(listing.queue, listing.filter, page)
        else:
            tasks, cursor = await self._admin.list_dlq(listing.queue, listing.filter, page)
        return [_opened(t) for t in tasks], cursor

    async def export(
        self, queue: str, chosen: DLQFilter | None
    ) -> AsyncIterator[list[dict[str, Any]]]:
        from rdq.spi import Page, envelope_to_builtins

        cursor: str | None = None
        while True:
            page = Page(limit=_EXPORT_PAGE, cursor=cursor, include_attempts=True)
            tasks, cursor = await self._admin.list_dlq(queue, chosen, page)
            for start in range(0, len(tasks), _EXPORT_PART):  # payloads read back a few at a time
                part = await self._admin.read_payloads(tasks[start : start + _EXPORT_PART])
                yield [envelope_to_builtins(t) for t in part]
            if cursor is None:
                return

    async def groups(self, queue: str) -> list[dict[str, Any]]:
        return [msgspec.to_builtins(g) for g in await self._admin.dlq_groups(queue)]

    async def preview(self, action: Action) -> dict[str, Any]:
        if not action.force:
            await self._admin.check_names(action.queue)
        seen = await self._admin.preview(action.verb, action.queue, action.selector)
        return dict(msgspec.to_builtins(seen))

    async def outlooks(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from rdq.spi import envelope_from_builtins

        found = await self._admin.outlook([envelope_from_builtins(t) for t in tasks])
        return [msgspec.to_builtins(o) for o in found]

    async def pauses(self, queue: str | None) -> Listed:
        from rdq.errors import Unsupported

        try:
            found = await self._admin.pauses(queue)
        except Unsupported as exc:
            return [], str(exc)
        return [msgspec.to_builtins(p) for p in found], None

    async def act(self, action: Action, progress: Progress = None) -> dict[str, Any]:
        if action.verb == "retry_now" and isinstance(action.selector, TaskSelector):
            if action.dry_run:
                count = await self._admin.count_retry_now(action.queue, action.selector)
            else:
                count = await self._admin.retry_now(
                    action.queue, action.selector, actor=self._actor, reason=action.reason
                )
            return {"matched": count, "done": count, "gone": 0}
        report = await self._admin.act(
            action.verb,
            action.queue,
            action.selector,
            actor=self._actor,
            reason=action.reason,
            dry_run=action.dry_run,
            progress=progress,
        )
        return report.to_builtins()

    async def submit(self, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        from rdq.client import Client
        from rdq.spi import envelope_to_builtins

        options = dict(request)
        handler = options.pop("handler_ref")
        submitted = await Client(self._storage, actor=self._actor).submit(handler, **options)
        return submitted.outcome, envelope_to_builtins(await self._storage.get(submitted.id))

    async def import_dead(
        self, queue: str, tasks: list[dict[str, Any]], reason: str | None
    ) -> dict[str, Any]:
        from rdq.spi import envelope_from_builtins

        report = await self._admin.import_dead(
            [envelope_from_builtins(t) for t in tasks],
            actor=self._actor,
            queue=queue,
            reason=reason,
        )
        return dict(msgspec.to_builtins(report))

    async def audit(self, query: AuditQuery) -> tuple[list[dict[str, Any]], str | None]:
        from rdq.spi import Page

        entries, cursor = await self._admin.list_audit(
            query.filter, Page(limit=query.limit, cursor=query.cursor)
        )
        return [msgspec.to_builtins(e) for e in entries], cursor

    async def controls(self, queue: str) -> Listed:
        from rdq.errors import Unsupported
        from rdq.flow import control_builtins

        try:
            found = await self._admin.controls(queue)
        except Unsupported as exc:
            return [], str(exc)
        return [control_builtins(c) for c in found], None

    async def set_paused(
        self,
        queue: str,
        handler: str | None,
        dependency: str | None,
        paused: bool,
        reason: str | None,
        force: bool = False,
    ) -> dict[str, Any]:
        from rdq.flow import control_builtins, control_key
        from rdq.spi import require

        key = control_key(handler=handler, dependency=dependency)
        require(self._storage, "control", "pauses")
        if not force:
            await self._admin.check_names(queue, key)
        run = self._admin.pause if paused else self._admin.resume
        return control_builtins(await run(queue, key, actor=self._actor, reason=reason))

    async def breakers(self, queue: str | None) -> Listed:
        from rdq.errors import Unsupported

        try:
            found = await self._admin.breakers(queue)
        except Unsupported as exc:
            return [], str(exc)
        return [msgspec.to_builtins(b) for b in found], None

    async def limits(self, queue: str | None) -> Listed:
        from rdq.errors import Unsupported

        try:
            found = await self._admin.limits(queue)
        except Unsupported as exc:
            return [], str(exc)
        return [msgspec.to_builtins(v) for v in found], None

    async def set_breaker(
        self,
        queue: str,
        key: str,
        change: Literal["open", "close"],
        reason: str | None,
        force: bool = False,
    ) -> dict[str, Any]:
        from rdq.flow import breaker_view, held_by
        from rdq.spi import require

        require(self._storage, "control", "breakers")
        if not force:
            await self._admin.check_names(queue, key)
        control = await self._admin.set_breaker(
            queue, key, change, actor=self._actor, reason=reason
        )
        held, more = await held_by(self._storage, queue, key)
        view = msgspec.structs.replace(breaker_view(control), held=held, held_more=more)
        return dict(msgspec.to_builtins(view))

    async def workers(self) -> tuple[list[dict[str, Any]], str | None, str | None]:
        from rdq.errors import Unsupported

        try:
            now, found = await self._admin.workers()
        except Unsupported as exc:
            return [], None, str(exc)
        return [msgspec.to_builtins(w) for w in found], msgspec.to_builtins(now), None

    async def redrives(self, queue: str | None) -> Listed:
        from rdq.errors import Unsupported
        from rdq.spi import require

        try:
            require(self._storage, "control", "paced redrives")
        except Unsupported as exc:
            return [], str(exc)
        return [msgspec.to_builtins(op) for op in await self._admin.paced_redrives(queue)], None

    async def start_paced(
        self, queue: str, selector: Selector, rate: float, reason: str | None, detach: bool
    ) -> dict[str, Any]:
        op = await self._admin.start_paced_redrive(
            queue,
            selector,
            rate,
            actor=self._actor,
            reason=reason,
            driver=None if detach else self._driver,
        )
        return dict(msgspec.to_builtins(op))

    async def follow(self, op: dict[str, Any], progress: OpProgress = None) -> dict[str, Any]:
        def report(current: Any) -> None:
            if progress is not None:
                progress(msgspec.to_builtins(current))

        ended = await self._admin.drive_paced_redrive(
            op["queue"], op["id"], driver=self._driver, progress=report
        )
        return dict(msgspec.to_builtins(ended))

    async def cancel_redrive(self, queue: str, op_id: str, reason: str | None) -> dict[str, Any]:
        await self._admin.paced_redrive(queue, op_id)  # NotFound: "no paced redrive …"
        op = await self._admin.cancel_paced_redrive(queue, op_id, actor=self._actor, reason=reason)
        return dict(msgspec.to_builtins(op))


def _host_pid() -> str:
    import os
    import secrets
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _opened(task: Envelope) -> dict[str, Any]:
    """The JSON form of ``task`` with a sealed payload opened by the keyring this
    environment configures (``payload_state`` ``decrypted``), or withheld when it has not
    the key (``encrypted``), as the node shows it to a role that may read payloads."""
    from rdq.errors import PayloadKeyError
    from rdq.keys import Keyring, is_sealed, unsealed
    from rdq.spi import envelope_to_builtins

    if not is_sealed(task):
        return envelope_to_builtins(task)
    try:
        body = envelope_to_builtins(unsealed(task, Keyring.from_env()))
        body["payload_state"] = "decrypted"
    except PayloadKeyError:
        body = envelope_to_builtins(msgspec.structs.replace(task, payload=None))
        body["payload_state"] = "encrypted"
    return body

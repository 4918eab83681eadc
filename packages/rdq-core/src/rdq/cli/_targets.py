"""Where the operator commands act: a store directly, or a server node over HTTP.

Both take the same typed requests (:class:`Listing`, :class:`Action`, :class:`AuditQuery`) and
give the same plain-data answers (envelopes and stats as JSON-ready dicts), so the commands
print the same tables and JSON either way.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import quote

import msgspec

from rdq.admin import TaskSelector
from rdq.errors import RdqError, ValidationError
from rdq.spi import AuditFilter, DLQFilter, Selector, Status, TaskFilter

__all__ = [
    "Action",
    "AuditQuery",
    "DirectTarget",
    "HttpTarget",
    "Listing",
    "Target",
    "TargetError",
    "status_of",
]

Progress = Callable[[int, int | None], None] | None
OpProgress = Callable[[dict[str, Any]], None] | None
"""Called with a paced redrive (as ``GET /v1/queues/{q}/redrives/{id}`` answers it) as it
goes."""
Verb = Literal["redrive", "purge", "cancel", "retry_now"]
_VERBS: tuple[Verb, ...] = ("redrive", "purge", "cancel", "retry_now")
Listed = tuple[list[dict[str, Any]], str | None]
"""Rows, and what the store lacks (``None`` when it offers what the listing needs)."""
FOLLOW_EVERY = 0.5
"""Seconds between two looks at a paced redrive a node drives."""
_HTTP_ID_CHUNK = 1000


class TargetError(RdqError):
    """The server answered with an error, or could not be reached."""


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of a queue's tasks: the DLQ (``filter`` a :class:`DLQFilter` or None) or the
    tasks in one status (``filter`` a :class:`TaskFilter`)."""

    queue: str
    filter: DLQFilter | TaskFilter | None
    limit: int
    cursor: str | None
    include_attempts: bool


@dataclass(frozen=True, slots=True)
class Action:
    """A redrive or purge (``selector`` a :class:`Selector`) or a cancel or retry now
    (``selector`` a :class:`TaskSelector`)."""

    verb: Verb
    queue: str
    selector: Selector | TaskSelector
    dry_run: bool
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.verb not in _VERBS:
            raise ValidationError(f"must be one of {', '.join(_VERBS)}", field="action")
        wanted = TaskSelector if self.verb in ("cancel", "retry_now") else Selector
        if not isinstance(self.selector, wanted):
            raise ValidationError(f"{self.verb} needs a {wanted.__name__}", field="selector")


@dataclass(frozen=True, slots=True)
class AuditQuery:
    filter: AuditFilter | None
    limit: int
    cursor: str | None


class Target(abc.ABC):
    """The operations the commands need."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    @abc.abstractmethod
    async def stats(self, queues: list[str]) -> list[dict[str, Any]]:
        """Stats of ``queues``, or of every queue when empty."""

    @abc.abstractmethod
    async def get(self, task_id: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def page(self, listing: Listing) -> tuple[list[dict[str, Any]], str | None]: ...

    @abc.abstractmethod
    async def groups(self, queue: str) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    async def act(self, action: Action, progress: Progress = None) -> int: ...

    @abc.abstractmethod
    async def audit(self, query: AuditQuery) -> tuple[list[dict[str, Any]], str | None]: ...

    # --- flow control and the fleet --------------------------------------------------------

    @abc.abstractmethod
    async def controls(self, queue: str) -> Listed: ...

    @abc.abstractmethod
    async def set_paused(
        self,
        queue: str,
        handler: str | None,
        dependency: str | None,
        paused: bool,
        reason: str | None,
    ) -> dict[str, Any]:
        """Pause (or resume) a handler, a dependency, or the whole queue; the control after."""

    @abc.abstractmethod
    async def breakers(self, queue: str | None) -> Listed: ...

    @abc.abstractmethod
    async def limits(self, queue: str | None) -> Listed:
        """The declared limits of ``queue`` (of every queue), with their use and what waits."""

    @abc.abstractmethod
    async def set_breaker(
        self, queue: str, key: str, change: Literal["open", "close"], reason: str | None
    ) -> dict[str, Any]:
        """Open or close the breaker of ``key`` by hand; the breaker after."""

    @abc.abstractmethod
    async def workers(self) -> tuple[list[dict[str, Any]], str | None, str | None]:
        """The workers, the store's now (ISO text) and what the store lacks."""

    @abc.abstractmethod
    async def redrives(self, queue: str | None) -> Listed: ...

    @abc.abstractmethod
    async def start_paced(
        self, queue: str, selector: Selector, rate: float, reason: str | None, detach: bool
    ) -> dict[str, Any]:
        """Start a paced redrive: driven by whoever follows it (:meth:`follow`), or, with
        ``detach``, left to a node (through a node: that node drives it either way)."""

    @abc.abstractmethod
    async def follow(self, op: dict[str, Any], progress: OpProgress = None) -> dict[str, Any]:
        """Until the paced redrive ``op`` is finished: drive it here (on a store) or watch
        the node drive it; return it as it ended."""

    @abc.abstractmethod
    async def cancel_redrive(
        self, queue: str, op_id: str, reason: str | None
    ) -> dict[str, Any]: ...

    async def drivers(self, op: dict[str, Any]) -> list[str]:
        """Who will drive the detached paced redrive ``op``: the live nodes on the store."""
        rows, _, unsupported = await self.workers()
        if unsupported is not None:
            return []
        return [w["id"] for w in rows if w["kind"] == "node" and w["status"] == "live"]


class DirectTarget(Target):
    """Acts on a store through :class:`rdq.admin.TaskAdmin` (audited as ``actor``)."""

    def __init__(self, storage_url: str, *, actor: str, audit_log: str | None = None) -> None:
        from rdq.admin import TaskAdmin
        from rdq.audit import AuditSink, JsonLinesAuditSink
        from rdq.plugins import open_storage

        self._storage = open_storage(storage_url)
        sinks: list[AuditSink] = [JsonLinesAuditSink(audit_log)] if audit_log else []
        self._admin = TaskAdmin(self._storage, sinks=sinks)
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

    async def get(self, task_id: str) -> dict[str, Any]:
        from rdq.spi import envelope_to_builtins

        return envelope_to_builtins(await self._admin.get(task_id))

    async def page(self, listing: Listing) -> tuple[list[dict[str, Any]], str | None]:
        from rdq.spi import Page, envelope_to_builtins

        page = Page(
            limit=listing.limit, cursor=listing.cursor, include_attempts=listing.include_attempts
        )
        if isinstance(listing.filter, TaskFilter):
            tasks, cursor = await self._admin.list_tasks(listing.queue, listing.filter, page)
        else:
            tasks, cursor = await self._admin.list_dlq(listing.queue, listing.filter, page)
        return [envelope_to_builtins(t) for t in tasks], cursor

    async def groups(self, queue: str) -> list[dict[str, Any]]:
        return [msgspec.to_builtins(g) for g in await self._admin.dlq_groups(queue)]

    async def act(self, action: Action, progress: Progress = None) -> int:
        common: dict[str, Any] = {
            "actor": self._actor,
            "reason": action.reason,
            "dry_run": action.dry_run,
            "progress": progress,
        }
        if action.verb == "retry_now" and isinstance(action.selector, TaskSelector):
            if action.dry_run:
                return await self._admin.count_retry_now(action.queue, action.selector)
            return await self._admin.retry_now(
                action.queue, action.selector, actor=self._actor, reason=action.reason
            )
        if isinstance(action.selector, TaskSelector):
            return await self._admin.cancel(action.queue, action.selector, **common)
        if action.verb == "redrive":
            return await self._admin.redrive(action.queue, action.selector, **common)
        return await self._admin.purge(action.queue, action.selector, **common)

    async def audit(self, query: AuditQuery) -> tuple[list[dict[str, Any]], str | None]:
        from rdq.spi import Page

        entries, cursor = await self._admin.list_audit(
            query.filter, Page(limit=query.limit, cursor=query.cursor)
        )
        return [msgspec.to_builtins(e) for e in entries], cursor

    async def controls(self, queue: str) -> Listed:
        from rdq.admin._views import control_builtins
        from rdq.errors import Unsupported

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
    ) -> dict[str, Any]:
        from rdq.admin import control_key
        from rdq.admin._views import control_builtins

        key = control_key(handler=handler, dependency=dependency)
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
        self, queue: str, key: str, change: Literal["open", "close"], reason: str | None
    ) -> dict[str, Any]:
        from rdq.admin._views import breaker_view, held_by

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


class HttpTarget(Target):
    """Acts through a server node's HTTP API with a bearer token."""

    def __init__(self, server_url: str, token: str) -> None:
        import httpx

        self._url = server_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self._url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=120.0,
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, *, key: str | None = None, **kwargs: Any) -> Any:
        """The JSON answer (its ``key`` when given); one clear ``TargetError`` otherwise."""
        import httpx

        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise TargetError(f"cannot reach {self._url}: {exc or type(exc).__name__}") from None
        if response.status_code >= 400 and _is_rdq_error(response):
            raise TargetError(_describe(response))
        try:
            if response.status_code >= 400:
                raise ValueError(response.status_code)
            body = response.json()
            return body if key is None else body[key]
        except (ValueError, KeyError, TypeError):
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            raise TargetError(
                f"{self._url} does not answer like an rdq server node "
                f"(HTTP {response.status_code}, {kind}, for {method} {path})"
            ) from None

    async def stats(self, queues: list[str]) -> list[dict[str, Any]]:
        if not queues:
            rows: list[dict[str, Any]] = await self._call("GET", "/v1/queues", key="queues")
            return rows
        return [await self._call("GET", f"/v1/queues/{_seg(q)}/stats") for q in queues]

    async def get(self, task_id: str) -> dict[str, Any]:
        task = await self._call("GET", f"/v1/tasks/{_seg(task_id)}")
        if not isinstance(task, dict) or "id" not in task:
            raise TargetError(f"{self._url} does not answer like an rdq server node")
        return task

    async def page(self, listing: Listing) -> tuple[list[dict[str, Any]], str | None]:
        params: dict[str, Any] = dict(msgspec.to_builtins(listing.filter or {}))
        params["limit"] = listing.limit
        params["include_attempts"] = "true" if listing.include_attempts else "false"
        if listing.cursor:
            params["cursor"] = listing.cursor
        if isinstance(listing.filter, TaskFilter):
            path = f"/v1/queues/{_seg(listing.queue)}/tasks"
        else:
            path = f"/v1/queues/{_seg(listing.queue)}/dlq"
        body = await self._call("GET", path, params=params)
        return body["tasks"], body["next_cursor"]

    async def groups(self, queue: str) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = await self._call(
            "GET", f"/v1/queues/{_seg(queue)}/dlq/groups", key="groups"
        )
        return groups

    async def act(self, action: Action, progress: Progress = None) -> int:
        if action.verb == "cancel":
            path = f"/v1/queues/{_seg(action.queue)}/tasks/cancel"
        elif action.verb == "retry_now":
            path = f"/v1/queues/{_seg(action.queue)}/retry-now"
        else:
            path = f"/v1/queues/{_seg(action.queue)}/dlq/{action.verb}"
        extra: dict[str, Any] = {"dry_run": action.dry_run}
        if action.reason:
            extra["reason"] = action.reason
        selector = action.selector
        if selector.filter is not None:
            chosen = dict(msgspec.to_builtins(selector.filter))
            if action.verb == "retry_now":
                chosen.pop("status", None)  # PENDING, always
            body = {"filter": chosen, **extra}
            count: int = await self._call("POST", path, key="count", json=body)
            if progress is not None:
                progress(count, count)
            return count
        ids = list(selector.ids or [])
        total = 0
        for start in range(0, len(ids), _HTTP_ID_CHUNK):
            chunk = ids[start : start + _HTTP_ID_CHUNK]
            total += await self._call("POST", path, key="count", json={"ids": chunk, **extra})
            if progress is not None:
                progress(min(start + _HTTP_ID_CHUNK, len(ids)), len(ids))
        return total

    async def audit(self, query: AuditQuery) -> tuple[list[dict[str, Any]], str | None]:
        params: dict[str, Any] = dict(msgspec.to_builtins(query.filter or {}))
        params["limit"] = query.limit
        if query.cursor:
            params["cursor"] = query.cursor
        body = await self._call("GET", "/v1/audit", params=params)
        return body["entries"], body["next_cursor"]

    async def _listed(self, path: str, key: str, **kwargs: Any) -> Listed:
        body = await self._call("GET", path, **kwargs)
        return body[key], body.get("unsupported")

    async def controls(self, queue: str) -> Listed:
        return await self._listed(f"/v1/queues/{_seg(queue)}/controls", "controls")

    async def set_paused(
        self,
        queue: str,
        handler: str | None,
        dependency: str | None,
        paused: bool,
        reason: str | None,
    ) -> dict[str, Any]:
        body = {"handler": handler, "dependency": dependency, "reason": reason}
        path = f"/v1/queues/{_seg(queue)}/{'pause' if paused else 'resume'}"
        control: dict[str, Any] = await self._call(
            "POST", path, json={k: v for k, v in body.items() if v is not None}
        )
        return control

    async def breakers(self, queue: str | None) -> Listed:
        params = {"queue": queue} if queue else {}
        return await self._listed("/v1/breakers", "breakers", params=params)

    async def limits(self, queue: str | None) -> Listed:
        if queue:
            return await self._listed(f"/v1/queues/{_seg(queue)}/limits", "limits")
        return await self._listed("/v1/limits", "limits")

    async def set_breaker(
        self, queue: str, key: str, change: Literal["open", "close"], reason: str | None
    ) -> dict[str, Any]:
        body = {"key": key, **({"reason": reason} if reason else {})}
        path = f"/v1/queues/{_seg(queue)}/breakers/{change}"
        breaker: dict[str, Any] = await self._call("POST", path, json=body)
        return breaker

    async def workers(self) -> tuple[list[dict[str, Any]], str | None, str | None]:
        body = await self._call("GET", "/v1/workers")
        return body["workers"], body.get("as_of"), body.get("unsupported")

    async def redrives(self, queue: str | None) -> Listed:
        path = f"/v1/queues/{_seg(queue)}/redrives" if queue else "/v1/redrives"
        return await self._listed(path, "redrives")

    async def start_paced(
        self, queue: str, selector: Selector, rate: float, reason: str | None, detach: bool
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"rate": rate}
        if selector.ids is not None:
            body["ids"] = list(selector.ids)
        else:
            body["filter"] = msgspec.to_builtins(selector.filter)
        if reason:
            body["reason"] = reason
        path = f"/v1/queues/{_seg(queue)}/dlq/redrive"
        op: dict[str, Any] = await self._call("POST", path, key="operation", json=body)
        return op

    async def follow(self, op: dict[str, Any], progress: OpProgress = None) -> dict[str, Any]:
        import asyncio

        path = f"/v1/queues/{_seg(op['queue'])}/redrives/{_seg(op['id'])}"
        while True:
            op = await self._call("GET", path)
            if progress is not None:
                progress(op)
            if op["status"] != "running":
                return op
            await asyncio.sleep(FOLLOW_EVERY)

    async def cancel_redrive(self, queue: str, op_id: str, reason: str | None) -> dict[str, Any]:
        path = f"/v1/queues/{_seg(queue)}/redrives/{_seg(op_id)}/cancel"
        op: dict[str, Any] = await self._call(
            "POST", path, json={"reason": reason} if reason else {}
        )
        return op

    async def drivers(self, op: dict[str, Any]) -> list[str]:
        return [op["driver"]] if op.get("driver") else await super().drivers(op)


def _host_pid() -> str:
    import os
    import secrets
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _seg(text: str) -> str:
    """``text`` as one URL path segment."""
    return quote(text, safe="")


def _is_rdq_error(response: Any) -> bool:
    try:
        error = response.json()["error"]
        return isinstance(error, dict) and "code" in error
    except (ValueError, KeyError, TypeError):
        return False


def _describe(response: Any) -> str:
    error = response.json()["error"]
    text = f"{error['code']}: {error['message']}"
    if error.get("field"):
        text += f" (field {error['field']})"
    return f"server answered HTTP {response.status_code}: {text}"


def status_of(text: str) -> Status:
    """A :class:`Status` from its name, any letter case."""
    try:
        return Status(text.upper())
    except ValueError:
        names = ", ".join(s.value for s in Status)
        raise ValidationError(f"must be one of {names}", field="status") from None

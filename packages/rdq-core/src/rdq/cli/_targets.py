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
Verb = Literal["redrive", "purge", "cancel"]
_VERBS: tuple[Verb, ...] = ("redrive", "purge", "cancel")
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
    """A redrive or purge (``selector`` a :class:`Selector`) or a cancel (``selector`` a
    :class:`TaskSelector`)."""

    verb: Verb
    queue: str
    selector: Selector | TaskSelector
    dry_run: bool
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.verb not in _VERBS:
            raise ValidationError(f"must be one of {', '.join(_VERBS)}", field="action")
        wanted = TaskSelector if self.verb == "cancel" else Selector
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
        else:
            path = f"/v1/queues/{_seg(action.queue)}/dlq/{action.verb}"
        extra: dict[str, Any] = {"dry_run": action.dry_run}
        if action.reason:
            extra["reason"] = action.reason
        selector = action.selector
        if selector.filter is not None:
            body = {"filter": msgspec.to_builtins(selector.filter), **extra}
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

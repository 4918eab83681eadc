"""Where the operator commands act: a store directly, or a server node over HTTP.

Both give the same plain-data answers (envelopes as JSON-ready dicts), so the commands print
the same tables and JSON either way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import msgspec

from rdq.errors import RdqError

__all__ = ["DirectTarget", "HttpTarget", "Target", "TargetError"]

Progress = Callable[[int, int | None], None] | None
_HTTP_ID_CHUNK = 1000


class TargetError(RdqError):
    """The server answered with an error, or could not be reached."""


class Target:
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

    async def stats(self, queues: list[str]) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def get(self, task_id: str) -> dict[str, Any]:
        raise NotImplementedError

    async def list_dlq(
        self,
        queue: str,
        dlq_filter: dict[str, Any] | None,
        limit: int,
        cursor: str | None,
        *,
        include_attempts: bool,
    ) -> tuple[list[dict[str, Any]], str | None]:
        raise NotImplementedError

    async def act(
        self,
        action: str,
        queue: str,
        selector: dict[str, Any],
        *,
        dry_run: bool,
        reason: str | None,
        progress: Progress = None,
    ) -> int:
        raise NotImplementedError


class DirectTarget(Target):
    """Acts on a store through :class:`rdq.admin.DLQAdmin` (audited as ``actor``)."""

    def __init__(self, storage_url: str, *, actor: str, audit_log: str | None = None) -> None:
        from rdq._plugins.manager import open_storage
        from rdq.admin import DLQAdmin
        from rdq.audit import AuditSink, JsonLinesAuditSink

        self._storage = open_storage(storage_url)
        sinks: list[AuditSink] = [JsonLinesAuditSink(audit_log)] if audit_log else []
        self._admin = DLQAdmin(self._storage, sinks=sinks)
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
        if not queues:
            raise TargetError("name the queues (a store has no list of queues)")
        return [msgspec.to_builtins(await self._storage.stats(q)) for q in queues]

    async def get(self, task_id: str) -> dict[str, Any]:
        from rdq.spi import envelope_to_builtins

        return envelope_to_builtins(await self._admin.get(task_id))

    async def list_dlq(
        self,
        queue: str,
        dlq_filter: dict[str, Any] | None,
        limit: int,
        cursor: str | None,
        *,
        include_attempts: bool,
    ) -> tuple[list[dict[str, Any]], str | None]:
        from rdq.spi import Page, envelope_to_builtins

        page = Page(limit=limit, cursor=cursor, include_attempts=include_attempts)
        tasks, next_cursor = await self._admin.list_dlq(queue, _dlq_filter(dlq_filter), page)
        return [envelope_to_builtins(t) for t in tasks], next_cursor

    async def act(
        self,
        action: str,
        queue: str,
        selector: dict[str, Any],
        *,
        dry_run: bool,
        reason: str | None,
        progress: Progress = None,
    ) -> int:
        from rdq.spi import Selector

        if "ids" in selector:
            chosen = Selector(ids=list(selector["ids"]))
        else:
            chosen = Selector(filter=_dlq_filter(selector["filter"]) or _empty_filter())
        run = self._admin.redrive if action == "redrive" else self._admin.purge
        return await run(
            queue, chosen, actor=self._actor, reason=reason, dry_run=dry_run, progress=progress
        )


def _dlq_filter(body: dict[str, Any] | None) -> Any:
    from rdq.spi import DLQFilter

    if not body:
        return None
    values = dict(body)
    for key in ("dead_lettered_after", "dead_lettered_before"):
        if values.get(key):
            values[key] = datetime.fromisoformat(values[key])
    return DLQFilter(**values)


def _empty_filter() -> Any:
    from rdq.spi import DLQFilter

    return DLQFilter()


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

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise TargetError(f"cannot reach {self._url}: {exc or type(exc).__name__}") from None
        if response.status_code >= 400:
            raise TargetError(_describe(response))
        return response.json()

    async def stats(self, queues: list[str]) -> list[dict[str, Any]]:
        if not queues:
            body = await self._call("GET", "/v1/queues")
            rows: list[dict[str, Any]] = body["queues"]
            return rows
        return [await self._call("GET", f"/v1/queues/{q}/stats") for q in queues]

    async def get(self, task_id: str) -> dict[str, Any]:
        task: dict[str, Any] = await self._call("GET", f"/v1/tasks/{task_id}")
        return task

    async def list_dlq(
        self,
        queue: str,
        dlq_filter: dict[str, Any] | None,
        limit: int,
        cursor: str | None,
        *,
        include_attempts: bool,
    ) -> tuple[list[dict[str, Any]], str | None]:
        params: dict[str, Any] = dict(dlq_filter or {})
        params["limit"] = limit
        params["include_attempts"] = "true" if include_attempts else "false"
        if cursor:
            params["cursor"] = cursor
        body = await self._call("GET", f"/v1/queues/{queue}/dlq", params=params)
        return body["tasks"], body["next_cursor"]

    async def act(
        self,
        action: str,
        queue: str,
        selector: dict[str, Any],
        *,
        dry_run: bool,
        reason: str | None,
        progress: Progress = None,
    ) -> int:
        path = f"/v1/queues/{queue}/dlq/{action}"
        extra: dict[str, Any] = {"dry_run": dry_run}
        if reason:
            extra["reason"] = reason
        if "ids" not in selector:
            body = await self._call("POST", path, json={**selector, **extra})
            count: int = body["count"]
            if progress is not None:
                progress(count, count)
            return count
        ids = list(selector["ids"])
        total = 0
        for start in range(0, len(ids), _HTTP_ID_CHUNK):
            chunk = ids[start : start + _HTTP_ID_CHUNK]
            body = await self._call("POST", path, json={"ids": chunk, **extra})
            total += body["count"]
            if progress is not None:
                progress(min(start + _HTTP_ID_CHUNK, len(ids)), len(ids))
        return total


def _describe(response: Any) -> str:
    try:
        error = response.json()["error"]
        text = f"{error['code']}: {error['message']}"
        if error.get("field"):
            text += f" (field {error['field']})"
    except (ValueError, KeyError, TypeError):
        text = response.text[:200] or response.reason_phrase
    return f"server answered HTTP {response.status_code}: {text}"

"""``HttpTarget``: the operator commands acting through a server node's HTTP API.

Each operation is one request (a cancel or retry of many ids is sent in chunks of
``_HTTP_ID_CHUNK``); an error the node answers becomes :class:`~rdq.cli._targets.TargetError`
with its code, message and field. A paced redrive is driven by the node and watched here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import msgspec

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
from rdq.spi import DLQFilter, Selector, TaskFilter

__all__ = ["HttpTarget"]

FOLLOW_EVERY = 0.5
"""Seconds between two looks at a paced redrive a node drives."""
_HTTP_ID_CHUNK = 1000


class HttpTarget(Target):
    """Acts through a server node's HTTP API with a bearer token."""

    def __init__(self, server_url: str, token: str) -> None:
        import httpx

        self._url = server_url.rstrip("/")
        self._outlooks: dict[str, dict[str, Any]] = {}
        """What the last pages said of their tasks (asked with ``outlook=true``)."""
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

    async def retention(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for queue in queues:
            doc: dict[str, Any] = await self._call("GET", f"/v1/queues/{_seg(queue)}/retention")
            if doc.get("archived") or doc.get("expired") or doc.get("last_run"):
                found[queue] = doc
        return found

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
            params["outlook"] = "true"
        else:
            path = f"/v1/queues/{_seg(listing.queue)}/dlq"
        body = await self._call("GET", path, params=params)
        for seen in body.get("outlook") or []:
            self._outlooks[seen["id"]] = seen
        return body["tasks"], body["next_cursor"]

    async def export(
        self, queue: str, chosen: DLQFilter | None
    ) -> AsyncIterator[list[dict[str, Any]]]:
        import httpx

        params = {k: v for k, v in msgspec.to_builtins(chosen or {}).items() if v is not None}
        path = f"/v1/queues/{_seg(queue)}/dlq/export"
        try:
            async with self._http.stream("GET", path, params=params) as response:
                if response.status_code >= 400:
                    await response.aread()
                    if _is_rdq_error(response):
                        raise TargetError(_describe(response))
                    raise TargetError(
                        f"{self._url} does not answer like an rdq server node "
                        f"(HTTP {response.status_code}, for GET {path})"
                    )
                async for line in response.aiter_lines():
                    if line.strip():
                        yield [msgspec.json.decode(line)]
        except httpx.HTTPError as exc:
            raise TargetError(f"cannot reach {self._url}: {exc or type(exc).__name__}") from None

    async def outlooks(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found = []
        for task in tasks:
            seen = self._outlooks.get(task["id"])
            if seen is None:
                seen = await self._call("GET", f"/v1/tasks/{_seg(task['id'])}/outlook")
            found.append(seen)
        return found

    async def pauses(self, queue: str | None) -> Listed:
        params = {"queue": queue} if queue else {}
        return await self._listed("/v1/pauses", "pauses", params=params)

    async def groups(self, queue: str) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = await self._call(
            "GET", f"/v1/queues/{_seg(queue)}/dlq/groups", key="groups"
        )
        return groups

    async def preview(self, action: Action) -> dict[str, Any]:
        import dataclasses

        dry = dataclasses.replace(action, dry_run=True)
        found: dict[str, Any] = {"count": 0, "skipped": [], "hint": None}
        for answer in await self._send(dry):
            found["count"] += answer["count"]
            found["skipped"] += answer.get("skipped") or []
            found["hint"] = found["hint"] or answer.get("hint")
        return found

    async def act(self, action: Action, progress: Progress = None) -> dict[str, Any]:
        report: dict[str, Any] = {"matched": 0, "done": 0, "gone": 0}
        for answer in await self._send(action, progress):
            report["done"] += answer["count"]
            report["matched"] += answer.get("matched", answer["count"])
            report["gone"] += answer.get("gone", 0)
            if answer.get("archive"):
                report["archived"] = report.get("archived", 0) + (answer.get("archived") or 0)
                report["archive"] = answer["archive"]
        return report

    async def _send(self, action: Action, progress: Progress = None) -> list[dict[str, Any]]:
        """The action's request(s) (ids in chunks), and each answer."""
        if action.verb == "cancel":
            path = f"/v1/queues/{_seg(action.queue)}/tasks/cancel"
        elif action.verb == "retry_now":
            path = f"/v1/queues/{_seg(action.queue)}/retry-now"
        else:
            path = f"/v1/queues/{_seg(action.queue)}/dlq/{action.verb}"
        extra: dict[str, Any] = {"dry_run": action.dry_run}
        if action.reason:
            extra["reason"] = action.reason
        if action.force:
            extra["force"] = True
        selector = action.selector
        if selector.filter is not None:
            chosen = dict(msgspec.to_builtins(selector.filter))
            if action.verb == "retry_now":
                chosen.pop("status", None)  # PENDING, always
            answer: dict[str, Any] = await self._call(
                "POST", path, json={"filter": chosen, **extra}
            )
            if progress is not None:
                progress(answer["count"], answer["count"])
            return [answer]
        ids = list(selector.ids or [])
        answers = []
        for start in range(0, len(ids), _HTTP_ID_CHUNK):
            chunk = ids[start : start + _HTTP_ID_CHUNK]
            answers.append(await self._call("POST", path, json={"ids": chunk, **extra}))
            if progress is not None:
                progress(min(start + _HTTP_ID_CHUNK, len(ids)), len(ids))
        return answers

    async def submit(self, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        import httpx

        body = {k: v for k, v in request.items() if v is not None}
        try:
            response = await self._http.post("/v1/tasks", json=body)
        except httpx.HTTPError as exc:
            raise TargetError(f"cannot reach {self._url}: {exc or type(exc).__name__}") from None
        if response.status_code >= 400:
            raise TargetError(_describe(response))
        outcome = response.headers.get("rdq-outcome") or (
            "added" if response.status_code == 201 else "skipped"
        )
        task: dict[str, Any] = response.json()
        return outcome, task

    async def import_dead(
        self, queue: str, tasks: list[dict[str, Any]], reason: str | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"tasks": tasks}
        if reason:
            body["reason"] = reason
        answer: dict[str, Any] = await self._call(
            "POST", f"/v1/queues/{_seg(queue)}/dlq/import", json=body
        )
        return answer

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
        force: bool = False,
    ) -> dict[str, Any]:
        body = {
            "handler": handler,
            "dependency": dependency,
            "reason": reason,
            "force": True if force else None,
        }
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
        self,
        queue: str,
        key: str,
        change: Literal["open", "close"],
        reason: str | None,
        force: bool = False,
    ) -> dict[str, Any]:
        body = {
            "key": key,
            **({"reason": reason} if reason else {}),
            **({"force": True} if force else {}),
        }
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

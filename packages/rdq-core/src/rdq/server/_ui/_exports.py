"""The console's downloads: a queue's DLQ (or the part its filters select) as a JSON Lines file,
one task per line with every attempt — what ``rdq dlq export`` writes and ``rdq dlq import``
takes back —, and a task's payload whole (the task page shows the start of a large one). They
need the ``read`` right, like the pages."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import msgspec
from litestar import Request, get
from litestar.exceptions import NotAuthorizedException
from litestar.response import Response, Stream

from rdq.server._api_common import node_of
from rdq.server._api_retention import NDJSON, dlq_lines
from rdq.server._payloads import shown
from rdq.server._ui._common import session, text
from rdq.server._ui._pages import FILTER_KEYS, PathText, dlq_filter
from rdq.spi import bounds

__all__ = ["download_payload", "export_dlq"]


@get("/queues/{queue:str}/export", include_in_schema=False)
async def export_dlq(request: Request[Any, Any, Any], queue: PathText) -> Stream:
    session(request)
    bounds.check_queue(queue)
    filters = {k: text(request.query_params.get(k)) for k in FILTER_KEYS}
    chosen = dlq_filter(filters) if any(filters.values()) else None
    lines = await dlq_lines(node_of(request), queue, chosen)
    name = quote(f"{queue}-dlq.jsonl", safe="")
    return Stream(
        lines,
        media_type=NDJSON,
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{name}",
            "Cache-Control": "no-store",
        },
    )


@get("/tasks/{task_id:str}/payload", include_in_schema=False)
async def download_payload(request: Request[Any, Any, Any], task_id: PathText) -> Response[bytes]:
    """The task's payload as a JSON file (one kept by reference read back from the blob
    store, one sealed opened), for a role that may read payloads, as the task page shows it."""
    principal, _ = session(request)
    node = node_of(request)
    task, state = shown(await node.admin.get(task_id), principal.can("payloads"), node.keys)
    if state not in ("clear", "decrypted"):
        raise NotAuthorizedException("this payload is not readable for your role or this node")
    name = quote(f"{task.id}-payload.json", safe="")
    return Response(
        msgspec.json.encode(task.payload),
        media_type="application/json",
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{name}",
            "Cache-Control": "no-store",
        },
    )

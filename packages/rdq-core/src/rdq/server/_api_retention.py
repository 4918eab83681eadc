"""The API's retention endpoints: what retention kept and removed for a queue, the DLQ as JSON
Lines (an export), and dead tasks put back from an export or an archive (an import)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Request, get, post
from litestar.params import JSONBody, QueryParameter
from litestar.response import Stream

from rdq.admin import ImportReport
from rdq.blobs import reference_of
from rdq.errors import ValidationError
from rdq.retention import read_record
from rdq.server._api_common import QueuePath, errors, node_of, principal_owner
from rdq.server._body import check_time, json_body
from rdq.server._models import ImportRequest, ImportResult, ImportSkippedDoc, RetentionDoc
from rdq.server._node import Node
from rdq.spi import DLQFilter, Envelope, Page, bounds, encode_envelope, envelope_from_builtins

__all__ = ["NDJSON", "dlq_lines", "export_dlq", "import_dlq", "queue_retention", "retention_of"]

NDJSON = "application/x-ndjson"
_EXPORT_PAGE = 500


@get(
    "/v1/queues/{queue:str}/retention",
    opt={"right": "read"},
    summary="How long the queue's finished tasks stay, and what retention did",
    description="The queue's `dead_ttl`, `task_ttl`, `archive_succeeded` and `keep_succeeded` "
    "(false: succeeded tasks are deleted as they complete) as the node's "
    "application sets them (null without one), and the retention record the workers keep in "
    "the store: tasks written to the archive and then removed, by status, and the last round.",
    responses=errors(422),
    tags=["queues"],
)
async def queue_retention(request: Request[Any, Any, Any], queue: QueuePath) -> RetentionDoc:
    bounds.check_queue(queue)
    return await retention_of(node_of(request), queue)


async def retention_of(node: Node, queue: str) -> RetentionDoc:
    """What the API and the console say of a queue's retention."""
    doc = RetentionDoc(queue=queue)
    app = node.engine_app
    if app is not None:
        config = app.queue_config(queue)
        doc.dead_ttl = config.dead_ttl
        doc.task_ttl = config.task_ttl
        doc.archive_succeeded = config.archive_succeeded
        doc.keep_succeeded = config.keep_succeeded
    record = await read_record(node.storage, queue)
    if record is not None:
        doc.recorded = True
        doc.archived = dict(record.archived)
        doc.expired = dict(record.expired)
        doc.last_run = record.last_run
        doc.last_archived = record.last_archived
        doc.last_expired = record.last_expired
        doc.archive = record.where
        doc.error = record.error
        doc.runner = record.runner
    elif node.storage.capabilities().control:
        doc.recorded = True
    return doc


@get(
    "/v1/queues/{queue:str}/dlq/export",
    opt={"right": "read"},
    media_type=NDJSON,
    summary="The DLQ as JSON Lines: one task per line, every attempt included",
    description="Oldest first; the same filters as the DLQ listing. What `rdq dlq export` "
    "writes and `POST /v1/queues/{queue}/dlq/import` (or `rdq dlq import`) takes back.",
    responses=errors(400, 404, 422),
    tags=["dlq"],
)
async def export_dlq(
    request: Request[Any, Any, Any],
    queue: QueuePath,
    error_type: Annotated[
        str | None, QueryParameter(max_length=bounds.MAX_ERROR_TYPE_LENGTH)
    ] = None,
    handler_ref: Annotated[
        str | None, QueryParameter(max_length=bounds.MAX_HANDLER_REF_LENGTH)
    ] = None,
    dead_lettered_after: Annotated[
        str | None,
        QueryParameter(
            format="date-time", max_length=64, description="RFC 3339 with offset; inclusive"
        ),
    ] = None,
    dead_lettered_before: Annotated[
        str | None,
        QueryParameter(
            format="date-time", max_length=64, description="RFC 3339 with offset; exclusive"
        ),
    ] = None,
) -> Stream:
    bounds.check_queue(queue)
    node = node_of(request)
    chosen = _filter(error_type, handler_ref, dead_lettered_after, dead_lettered_before)
    return Stream(await dlq_lines(node, queue, chosen), media_type=NDJSON)


async def dlq_lines(node: Node, queue: str, chosen: DLQFilter | None) -> AsyncIterator[bytes]:
    """The DLQ of ``queue`` as JSON Lines, page by page (the first page is read before this
    returns, so a bad filter or a store error is an error answer, not a cut stream); a payload
    kept by reference is read back and written whole."""
    first, cursor = await _page(node.admin, queue, chosen, None)

    async def lines() -> AsyncIterator[bytes]:
        page, after = first, cursor
        while True:
            inline: list[bytes] = []
            for task in page:
                if reference_of(task) is None:
                    inline.append(encode_envelope(task) + b"\n")
                    continue
                yield b"".join(inline)  # a payload kept by reference: read back one at a time
                inline = []
                (whole,) = await node.admin.read_payloads([task])
                yield encode_envelope(whole) + b"\n"
            yield b"".join(inline)
            if after is None:
                return
            page, after = await _page(node.admin, queue, chosen, after)

    return lines()


async def _page(
    admin: Any, queue: str, chosen: DLQFilter | None, cursor: str | None
) -> tuple[list[Envelope], str | None]:
    page = Page(limit=_EXPORT_PAGE, cursor=cursor, include_attempts=True)
    tasks, after = await admin.list_dlq(queue, chosen, page)
    return tasks, after


def _filter(
    error_type: str | None,
    handler_ref: str | None,
    after: datetime | str | None,
    before: datetime | str | None,
) -> DLQFilter | None:
    start = check_time(after, "dead_lettered_after")
    end = check_time(before, "dead_lettered_before")
    if not any(v is not None for v in (error_type, handler_ref, start, end)):
        return None
    return DLQFilter(
        error_type=error_type or None,
        handler_ref=handler_ref or None,
        dead_lettered_after=start,
        dead_lettered_before=end,
    )


@post(
    "/v1/queues/{queue:str}/dlq/import",
    opt={"right": "operate"},
    before_request=json_body(ImportRequest),
    status_code=200,
    summary="Put dead tasks back into the DLQ (from an export or an archive)",
    description="Each DEAD task of the queue goes back as it was (id, attempts, counters and "
    "times kept); idempotent by id: a task the store already holds is counted in `existing` "
    "and left alone. Tasks that are not DEAD, of another queue, invalid, or whose id another "
    "queue holds are `skipped`, each with why. Audited (`import`) with the token's owner. "
    "Needs a store that imports tasks (501 otherwise).",
    responses=errors(400, 413, 415, 422, 501),
    tags=["dlq"],
)
async def import_dlq(
    request: Request[Any, Any, Any], queue: QueuePath, data: JSONBody[ImportRequest]
) -> ImportResult:
    bounds.check_queue(queue)
    node = node_of(request)
    report = ImportReport()
    tasks: list[Envelope] = []
    for i, raw in enumerate(data.tasks):
        try:
            tasks.append(envelope_from_builtins(raw))
        except ValidationError as exc:
            name = raw.get("id") if isinstance(raw.get("id"), str) else None
            report.skip(name[: bounds.MAX_ID_LENGTH] if name else f"tasks[{i}]", f"invalid: {exc}")
    report = await node.admin.import_dead(
        tasks, actor=principal_owner(request), queue=queue, reason=data.reason, report=report
    )
    return ImportResult(
        queue=queue,
        imported=report.imported,
        existing=report.existing,
        skipped=[msgspec.convert(s, ImportSkippedDoc) for s in report.skipped],
    )

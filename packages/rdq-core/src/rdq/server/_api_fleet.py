"""The API's fleet endpoints: the registered workers (live or silent by the store's clock) and a
queue's attempts per minute. A store without the capability they read (``worker_registry``,
``counters``) answers an empty list with ``unsupported`` saying what it lacks."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, get
from litestar.params import QueryParameter

from rdq.admin import MAX_RATE_MINUTES
from rdq.errors import Unsupported
from rdq.server._api_common import QueuePath, errors, node_of
from rdq.server._models import MinuteDoc, RateList, WorkerDoc, WorkerList
from rdq.spi import bounds

__all__ = ["list_workers", "queue_rates"]


@get(
    "/v1/workers",
    opt={"right": "read"},
    summary="Every registered worker and node",
    description="Each worker registers before its first claim and heartbeats what it serves "
    "and holds; `status` is `live` when it was seen within two of its heartbeats by the "
    "store's clock (`as_of`), `silent` otherwise (a silent worker's leases lapse and its "
    "tasks are claimed again). A worker that stops leaves the registry; a dead one stays, "
    "silent, for an hour. A node registers itself too (`kind` `node`): it drives paced "
    "redrives.",
    responses=errors(),
    tags=["fleet"],
)
async def list_workers(request: Request[Any, Any, Any]) -> WorkerList:
    try:
        now, found = await node_of(request).admin.workers()
    except Unsupported as exc:
        return WorkerList(workers=[], unsupported=str(exc))
    workers = [msgspec.convert(msgspec.to_builtins(w), WorkerDoc) for w in found]
    return WorkerList(workers=workers, as_of=now)


@get(
    "/v1/queues/{queue:str}/rates",
    opt={"right": "read"},
    summary="A queue's attempts per minute",
    description="How the attempts of each of the last `minutes` minutes (by the store's "
    "clock, ending with the current one) ended: succeeded, failed (to be retried), dead, "
    "deferred (held back by a breaker, no attempt used up). Workers add their counts every "
    "ten seconds, so the current minute fills in as it goes.",
    responses=errors(422),
    tags=["fleet"],
)
async def queue_rates(
    request: Request[Any, Any, Any],
    queue: QueuePath,
    minutes: Annotated[int, QueryParameter(ge=1, le=MAX_RATE_MINUTES)] = 60,
) -> RateList:
    bounds.check_queue(queue)
    try:
        now, series = await node_of(request).admin.rates(queue, minutes)
    except Unsupported as exc:
        return RateList(queue=queue, minutes=[], unsupported=str(exc))
    rows = [
        MinuteDoc(
            minute=c.minute,
            succeeded=c.succeeded,
            failed=c.failed,
            dead=c.dead,
            deferred=c.deferred,
        )
        for c in series.get(queue, [])
    ]
    return RateList(queue=queue, minutes=rows, as_of=now)

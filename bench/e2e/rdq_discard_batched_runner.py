"""``rdq_discard`` (a queue with ``keep_succeeded=False``) with ``rdq_batched``'s bigger
completion batches (``max_unrecorded``): the two documented settings together, the rdq a user
who wants graphile-worker's batched throughput would deploy. Its crash bound is
``rdq_batched``'s: a ``kill -9`` can leave at most ``MAX_UNRECORDED`` plus the worker's
concurrency tasks run but unrecorded, to run again after their lease."""

from __future__ import annotations

from typing import Any, ClassVar

from bench.e2e import rdq_discard_runner
from bench.e2e.rdq_batched_runner import MAX_UNRECORDED

__all__ = ["System", "Worker"]


class System(rdq_discard_runner.System):
    name = "rdq_discard_batched"


class Worker(rdq_discard_runner.Worker):
    worker_options: ClassVar[dict[str, Any]] = {"max_unrecorded": MAX_UNRECORDED}

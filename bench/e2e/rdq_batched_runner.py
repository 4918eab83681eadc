"""rdq on the same PostgreSQL as ``rdq_runner`` with bigger completion batches: each worker
process runs with ``max_unrecorded=MAX_UNRECORDED`` (docs/engine.md, "Bigger completion
batches"), a documented setting whose crash cost is a bound: a ``kill -9`` can leave at most
``MAX_UNRECORDED`` plus the worker's concurrency tasks run but unrecorded, to run again after
their lease. Everything else is ``rdq_runner``'s, so the two side by side show what the
setting alone changes."""

from __future__ import annotations

from typing import Any, ClassVar

from bench.e2e import rdq_runner

__all__ = ["MAX_UNRECORDED", "System", "Worker"]

MAX_UNRECORDED = 400


class System(rdq_runner.System):
    name = "rdq_batched"


class Worker(rdq_runner.Worker):
    worker_options: ClassVar[dict[str, Any]] = {"max_unrecorded": MAX_UNRECORDED}

"""The Prometheus metrics rdq exports, on ``prometheus_client``'s default registry.

Workers update the task metrics; the maintenance loop sets the queue gauges from
``Storage.stats``; the DLQ admin API counts redrives and purges. A server node (``rdq
server``, with or without a worker) also sets the queue gauges of every queue, the breakers'
states, what pauses and breakers hold, and the pauses, from the store, at most every few
seconds when ``/metrics`` is read. Serve them with
:func:`start_http_server` (``rdq worker --metrics-port``) or ``prometheus_client.generate_latest``.
"""

from __future__ import annotations

import threading

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "ARCHIVED",
    "ARCHIVE_FAILURES",
    "ATTEMPTS",
    "AUDIT_FAILURES",
    "BLOBS_DELETED",
    "BREAKER_OPEN_TOO_LONG",
    "BREAKER_STATE",
    "BREAKER_TRANSITIONS",
    "CLAIMS",
    "DEAD_LETTERED",
    "DEFERRED",
    "DLQ_DEPTH",
    "EXPIRED",
    "HANDLER_DURATION",
    "HELD",
    "IN_FLIGHT",
    "LIMIT_CONCURRENCY",
    "LIMIT_IN_USE",
    "LIMIT_KEYS",
    "LIMIT_LOWERED",
    "LIMIT_RATE",
    "LIMIT_SATURATED",
    "LIMIT_WAITING",
    "LOOP_STALLS",
    "LOOP_STALL_SECONDS",
    "OLDEST_PENDING_AGE",
    "PAUSED",
    "PAYLOADS_OFFLOADED",
    "PENDING",
    "PURGED",
    "REDRIVEN",
    "STALE_CLAIMS",
    "STORAGE_ERRORS",
    "SUCCEEDED_PURGED",
    "WORKER_IN_FLIGHT",
    "start_http_server",
]

CLAIMS = Counter("rdq_claims", "Tasks claimed by this process.", ["queue"])
ATTEMPTS = Counter("rdq_attempts", "Attempts finished, by outcome.", ["queue", "outcome"])
HANDLER_DURATION = Histogram(
    "rdq_handler_duration_seconds",
    "Handler run time per attempt.",
    ["queue"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
STALE_CLAIMS = Counter("rdq_stale_claims", "Resolutions refused: the lease was lost.", ["queue"])
DEAD_LETTERED = Counter("rdq_dead_lettered", "Tasks moved to the DLQ.", ["queue"])
DEFERRED = Counter(
    "rdq_deferred", "Attempts held while their breaker was open (no attempt used).", ["queue"]
)
BREAKER_STATE = Gauge(
    "rdq_breaker_state",
    "A breaker's state as this process last saw it: 0 closed, 1 half-open, 2 open.",
    ["queue", "key"],
)
HELD = Gauge(
    "rdq_held",
    "PENDING tasks a pause or an open or half-open breaker holds back, where the store counts "
    "them cheaply (a whole queue's, a handler's; a dependency's are not counted); served by "
    "every rdq server node from the store.",
    ["queue", "key", "by"],
)
PAUSED = Gauge(
    "rdq_paused",
    "1 for each paused key of a queue (* the whole queue, handler:REF, dep:NAME); served by "
    "every rdq server node from the store.",
    ["queue", "key"],
)
BREAKER_TRANSITIONS = Counter(
    "rdq_breaker_transitions",
    "Breaker transitions this process made, by the state entered.",
    ["queue", "key", "state"],
)
BREAKER_OPEN_TOO_LONG = Gauge(
    "rdq_breaker_open_too_long",
    "1 while a breaker has been open longer than its alert_after.",
    ["queue", "key"],
)
LIMIT_CONCURRENCY = Gauge(
    "rdq_limit_concurrency",
    "A declared concurrency limit: tasks of its key (of each value) that may hold a claim.",
    ["queue", "limit"],
)
LIMIT_IN_USE = Gauge(
    "rdq_limit_in_use",
    "Tasks with a limit's key (any value) holding a live lease, as the store counts them.",
    ["queue", "limit"],
)
LIMIT_SATURATED = Gauge(
    "rdq_limit_saturated",
    "Keys of a limit at their concurrency limit (of a per-value limit: values).",
    ["queue", "limit"],
)
LIMIT_KEYS = Gauge(
    "rdq_limit_keys", "Control records of a limit (one, or one per value).", ["queue", "limit"]
)
LIMIT_RATE = Gauge(
    "rdq_limit_rate",
    "Claims per second a rate limit lets through now (lowered or ramping included; of a "
    "per-value limit: the declared rate of each value).",
    ["queue", "limit"],
)
LIMIT_WAITING = Gauge(
    "rdq_limit_waiting",
    "Due PENDING tasks with a limit's key, of the first 1,000 due (at the last count).",
    ["queue", "limit"],
)
LIMIT_LOWERED = Counter(
    "rdq_limit_lowered",
    "Rate limits this process lowered because a handler raised rdq.RetryAfter.",
    ["queue", "limit"],
)
REDRIVEN = Counter("rdq_redriven", "DLQ tasks returned to their queue.", ["queue"])
PURGED = Counter("rdq_purged", "DLQ tasks deleted.", ["queue"])
AUDIT_FAILURES = Counter(
    "rdq_audit_failures",
    "Operator actions whose audit record a destination (the storage's audit trail or a sink) "
    "did not take, after retries; the action itself was applied (or failed) all the same.",
    ["queue", "action", "destination"],
)
SUCCEEDED_PURGED = Counter(
    "rdq_succeeded_purged", "Succeeded tasks deleted after their task_ttl.", ["queue"]
)
ARCHIVED = Counter(
    "rdq_archived",
    "Finished tasks written to the archive before leaving the store (retention and purges).",
    ["queue", "status"],
)
EXPIRED = Counter(
    "rdq_expired",
    "Finished tasks retention removed from the store (each archived first).",
    ["queue", "status"],
)
BLOBS_DELETED = Counter(
    "rdq_blobs_deleted", "Payload blobs the sweep deleted: no task referred to them any more."
)
PAYLOADS_OFFLOADED = Counter(
    "rdq_payloads_offloaded",
    "Payloads above the inline limit put in the blob store by this process.",
    ["queue"],
)
ARCHIVE_FAILURES = Counter(
    "rdq_archive_failures",
    "Retention rounds stopped by an error (the archive refused a batch, or the store failed).",
    ["queue"],
)
PENDING = Gauge("rdq_pending", "PENDING tasks (due or not), by the storage.", ["queue"])
IN_FLIGHT = Gauge("rdq_in_flight", "IN_FLIGHT tasks over all workers, by the storage.", ["queue"])
WORKER_IN_FLIGHT = Gauge("rdq_worker_in_flight", "Handlers running in this process.", ["queue"])
DLQ_DEPTH = Gauge("rdq_dlq_depth", "Tasks in the DLQ.", ["queue"])
OLDEST_PENDING_AGE = Gauge(
    "rdq_oldest_pending_age_seconds", "How long the oldest due PENDING task has waited.", ["queue"]
)
LOOP_STALLS = Counter(
    "rdq_loop_stalls",
    "Worker event-loop stalls longer than the watchdog threshold, by the queue of the handler "
    "that was running (empty when it was not a handler).",
    ["queue"],
)
LOOP_STALL_SECONDS = Histogram(
    "rdq_loop_stall_seconds",
    "How long each stall the watchdog saw lasted.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 300),
)
STORAGE_ERRORS = Counter("rdq_storage_errors", "Storage operations that failed.", ["op"])

_server_lock = threading.Lock()


def start_http_server(port: int, addr: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread."""
    with _server_lock:
        prometheus_client.start_http_server(port, addr=addr)

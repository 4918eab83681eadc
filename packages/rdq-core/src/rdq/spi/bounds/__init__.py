"""The documented bounds of the contract's inputs, and the checks every entry point applies.

(Called ``rdq.spi.limits`` before contract version 4's fleet-wide limits took the word: that
name still imports this module, for backends written before.)

Storage plugins call these at the top of each operation, so every backend rejects the same
inputs with the same :class:`~rdq.errors.ValidationError` naming the field.

=====================  =====================================================================
task id                1–200 characters of ``A–Z a–z 0–9 . _ - : @ + = ~``
queue name             1–100 characters of ``A–Z a–z 0–9 . _ - :``, starting with a letter or digit
handler_ref            1–1024 characters, no whitespace or control characters
headers                at most 64; names 1–128 characters, values at most 4096
payload                at most 1 MiB once encoded as JSON, nesting arrays and objects at most
                       64 levels deep (``MAX_DEPTH``; unknown fields in ``extra`` too);
                       at submit through the API the unknown fields' JSON object counts
                       towards the 1 MiB (``check_submitted_size``)
retry override         ``max_attempts`` an integer, ``backoff`` a string, ``base``/``cap``/
                       ``timeout`` finite numbers (each may be ``None``)
limit                  1–1000 (``claim_due``, pages, ``import_tasks``)
lease                  more than 0 s, at most 24 h
delay                  a ``timedelta`` from 0 s to 36 500 days (``MAX_DELAY``), or ``None``
times                  timezone-aware, within the years 1–9999 once converted to UTC
priority               an integer from -10 to 10 (default 0)
task keys              at most 8, each 1–200 characters without whitespace, not ``*`` or
                       ``handler:…``
control                key 1–1100 characters without whitespace; ``gate``/``concurrency``
                       ≥ 0, ``rate``/``burst`` ≥ 1 or ``None``; ``per`` in (0, 86 400] s;
                       ``state`` at most 64 KiB encoded; ``fair`` (a key prefix, 1–200
                       characters without whitespace) and ``aging`` (in (0, 86 400] s) on the
                       queue's own control (key ``*``) only
worker info            a worker id; ``pid``/``concurrency``/``held`` ≥ 0; at most 1 000
                       queues; ``heartbeat`` in (0, 3 600] s
counts                 at most 1 000 entries per call, each of a whole minute
selector ids           at most 10 000 per call (redrive, purge, cancel, expire_tasks)
dedup                  a key of 1–200 characters without whitespace; ``window`` and
                       ``max_age`` in (0 s, ``MAX_DELAY``]; ``extend`` needs a window,
                       ``debounce`` a ``max_age``
worker id              1–200 characters, no control characters
attempt                ``number`` ≥ 1; ``error_type`` at most 1024 characters,
                       ``error_message`` at most 8 192, ``traceback`` at most 32 768 (the
                       records an enqueued or imported task carries, too)
audit entry            ``actor`` and ``action`` 1–200 characters, ``reason`` at most 2 000
=====================  =====================================================================

Every store also has an operation timeout (``DEFAULT_OPERATION_TIMEOUT`` seconds unless its URL
says otherwise) and may estimate counts above ``EXACT_COUNT_THRESHOLD``.

The numbers are in ``_values``; the checks of single fields in ``_fields``, of whole
arguments in ``_arguments``.
"""

from rdq.spi._models import MAX_PRIORITY, MIN_PRIORITY
from rdq.spi.bounds._arguments import (
    check_audit_entry,
    check_audit_filter,
    check_completions,
    check_control,
    check_counts,
    check_dedup,
    check_discard,
    check_filter,
    check_ids,
    check_imported_task,
    check_imported_tasks,
    check_page,
    check_payload_refs,
    check_resolution,
    check_selector,
    check_task_filter,
    check_tasks,
    check_version,
    check_wait,
    check_worker_info,
)
from rdq.spi.bounds._fields import (
    check_attempt,
    check_aware,
    check_control_key,
    check_delay,
    check_depth,
    check_lease,
    check_limit,
    check_priority,
    check_queue,
    check_retry,
    check_submitted_size,
    check_task,
    check_task_id,
    check_task_keys,
    check_token,
    check_worker_id,
)
from rdq.spi.bounds._values import (
    DEFAULT_OPERATION_TIMEOUT,
    EXACT_COUNT_THRESHOLD,
    MAX_AGING,
    MAX_AUDIT_REASON_LENGTH,
    MAX_AUDIT_WORD_LENGTH,
    MAX_CONTROL_KEY_LENGTH,
    MAX_CONTROL_STATE_BYTES,
    MAX_COUNTS,
    MAX_DEDUP_KEY_LENGTH,
    MAX_DELAY,
    MAX_DEPTH,
    MAX_ERROR_MESSAGE_LENGTH,
    MAX_ERROR_TYPE_LENGTH,
    MAX_HANDLER_REF_LENGTH,
    MAX_HEADER_NAME_LENGTH,
    MAX_HEADER_VALUE_LENGTH,
    MAX_HEADERS,
    MAX_ID_LENGTH,
    MAX_LEASE,
    MAX_LIMIT,
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_REF_LENGTH,
    MAX_QUEUE_LENGTH,
    MAX_SELECTOR_IDS,
    MAX_TASK_KEY_LENGTH,
    MAX_TASK_KEYS,
    MAX_TRACEBACK_LENGTH,
    MAX_WORKER_ID_LENGTH,
    MAX_WORKER_QUEUES,
)

__all__ = [
    "DEFAULT_OPERATION_TIMEOUT",
    "EXACT_COUNT_THRESHOLD",
    "MAX_AGING",
    "MAX_AUDIT_REASON_LENGTH",
    "MAX_AUDIT_WORD_LENGTH",
    "MAX_CONTROL_KEY_LENGTH",
    "MAX_CONTROL_STATE_BYTES",
    "MAX_COUNTS",
    "MAX_DEDUP_KEY_LENGTH",
    "MAX_DELAY",
    "MAX_DEPTH",
    "MAX_ERROR_MESSAGE_LENGTH",
    "MAX_ERROR_TYPE_LENGTH",
    "MAX_HANDLER_REF_LENGTH",
    "MAX_HEADERS",
    "MAX_HEADER_NAME_LENGTH",
    "MAX_HEADER_VALUE_LENGTH",
    "MAX_ID_LENGTH",
    "MAX_LEASE",
    "MAX_LIMIT",
    "MAX_PAYLOAD_BYTES",
    "MAX_PAYLOAD_REF_LENGTH",
    "MAX_PRIORITY",
    "MAX_QUEUE_LENGTH",
    "MAX_SELECTOR_IDS",
    "MAX_TASK_KEYS",
    "MAX_TASK_KEY_LENGTH",
    "MAX_TRACEBACK_LENGTH",
    "MAX_WORKER_ID_LENGTH",
    "MAX_WORKER_QUEUES",
    "MIN_PRIORITY",
    "check_attempt",
    "check_audit_entry",
    "check_audit_filter",
    "check_aware",
    "check_completions",
    "check_control",
    "check_control_key",
    "check_counts",
    "check_dedup",
    "check_delay",
    "check_depth",
    "check_discard",
    "check_filter",
    "check_ids",
    "check_imported_task",
    "check_imported_tasks",
    "check_lease",
    "check_limit",
    "check_page",
    "check_payload_refs",
    "check_priority",
    "check_queue",
    "check_resolution",
    "check_retry",
    "check_selector",
    "check_submitted_size",
    "check_task",
    "check_task_filter",
    "check_task_id",
    "check_task_keys",
    "check_tasks",
    "check_token",
    "check_version",
    "check_wait",
    "check_worker_id",
    "check_worker_info",
]

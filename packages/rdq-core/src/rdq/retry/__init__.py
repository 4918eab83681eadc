"""Where a retry is decided: pure functions from an attempt's end to what happens next.

=====================================  ==========================================================
the handler returns                    SUCCEEDED, complete
it raises ``rdq.Permanent`` or a type  PERMANENT, dead-letter at once
the queue lists as ``non_retryable``
it raises ``rdq.RetryAfter(delay)``    FAILED, retry after ``delay``
it raises ``rdq.Snooze(delay)``        SNOOZED, run again after ``delay``, no attempt used
it exceeds its timeout                 TIMEOUT, retry after backoff
it raises anything else                FAILED, retry after backoff
a retry when attempts are exhausted    dead-letter (the attempt keeps its outcome)
=====================================  ==========================================================

- :mod:`~rdq.retry._classify`: the table above (:func:`classify_error`, :func:`classify_timeout`);
- :mod:`~rdq.retry._backoff`: the delay before the next attempt (:func:`backoff_delay`);
- :mod:`~rdq.retry._overrides`: a task's own override over its queue's config (:func:`resolve`);
- :mod:`~rdq.retry._exhaustion`: which attempts count (a failure during an outage of its
  dependency does not), and the decisions made before a handler runs (attempts exhausted,
  corrupt task, unknown handler);
- :mod:`~rdq.retry._outage`: which failures say the dependency is down;
- :mod:`~rdq.retry._status`: what an HTTP status says (outage, retryable, rejected), the one
  table of handlers' HTTP errors, callbacks and docs/engine.md;
- :mod:`~rdq.retry._decision`: :class:`Decision`, what an attempt comes to (the leaf the
  others speak in);
- :mod:`~rdq.retry._tracebacks`: the tracebacks attempts record (bounded, the engine's own
  frames left out), and where a handler was when its timeout ran out.

Nothing here does I/O or reads a clock: the worker (:mod:`rdq.worker`) calls these and writes
what they decide.
"""

from rdq.retry._backoff import backoff_bounds, backoff_delay
from rdq.retry._classify import (
    MAX_DELAY,
    classify_error,
    classify_import_error,
    classify_timeout,
    describe,
    error_type_name,
    timeout_message,
    truncate_message,
)
from rdq.retry._decision import (
    ATTEMPTS_EXHAUSTED,
    CORRUPT_TASK,
    HANDLER_IMPORT_ERROR,
    INTERRUPTED_ERROR,
    PAYLOAD_KEY_UNAVAILABLE,
    SNOOZE,
    SNOOZED_TOO_OFTEN,
    SUCCESS,
    TIMEOUT_ERROR,
    UNDECODABLE_PAYLOAD,
    UNKNOWN_HANDLER,
    Action,
    Decision,
)
from rdq.retry._exhaustion import (
    INTERRUPTED_UNSTARTED,
    KEY_WAIT_CAP,
    KEY_WAIT_FIRST,
    UNCHARGED_OUTCOMES,
    OutageWindow,
    attempts_used,
    bound_snoozes,
    corrupt,
    exhausted,
    payload_unreadable,
    uncharged,
    unknown_handler,
)
from rdq.retry._outage import is_outage, is_outage_type
from rdq.retry._overrides import resolve
from rdq.retry._status import (
    MAX_RETRY_AFTER,
    StatusClass,
    StatusFailure,
    parse_retry_after,
    status_class,
    status_failure,
)
from rdq.retry._tracebacks import (
    bound_head,
    bound_tail,
    cancelled_at,
    coroutine_stack,
    format_failure,
    thread_stack,
)

__all__ = [
    "ATTEMPTS_EXHAUSTED",
    "CORRUPT_TASK",
    "HANDLER_IMPORT_ERROR",
    "INTERRUPTED_ERROR",
    "INTERRUPTED_UNSTARTED",
    "KEY_WAIT_CAP",
    "KEY_WAIT_FIRST",
    "MAX_DELAY",
    "MAX_RETRY_AFTER",
    "PAYLOAD_KEY_UNAVAILABLE",
    "SNOOZE",
    "SNOOZED_TOO_OFTEN",
    "SUCCESS",
    "TIMEOUT_ERROR",
    "UNCHARGED_OUTCOMES",
    "UNDECODABLE_PAYLOAD",
    "UNKNOWN_HANDLER",
    "Action",
    "Decision",
    "OutageWindow",
    "StatusClass",
    "StatusFailure",
    "attempts_used",
    "backoff_bounds",
    "backoff_delay",
    "bound_head",
    "bound_snoozes",
    "bound_tail",
    "cancelled_at",
    "classify_error",
    "classify_import_error",
    "classify_timeout",
    "coroutine_stack",
    "corrupt",
    "describe",
    "error_type_name",
    "exhausted",
    "format_failure",
    "is_outage",
    "is_outage_type",
    "parse_retry_after",
    "payload_unreadable",
    "resolve",
    "status_class",
    "status_failure",
    "thread_stack",
    "timeout_message",
    "truncate_message",
    "uncharged",
    "unknown_handler",
]

"""The field types the HTTP API's bodies share: ids, queue names, handler refs, durations and
reasons, each bounded by the contract's limits (:mod:`rdq.spi.bounds`), so that a body out of
bounds is refused with the field named before anything is stored.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from rdq.spi import bounds

__all__ = [
    "TASK_ID_PATTERN",
    "VISIBLE",
    "DedupKey",
    "Delay",
    "ErrorType",
    "FilterHandlerRef",
    "HandlerRef",
    "QueueName",
    "Reason",
    "Seconds",
    "TaskId",
]

TASK_ID_PATTERN = r"^[A-Za-z0-9._\-:@+=~]+$"
VISIBLE = r"[^\x00-\x20\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
"""One character that is neither a control character nor white space, spelled out: ``\\s``
means other characters in Python's ``re`` (the node's checks) than in the ECMA-262 regular
expressions of JSON Schema (the OpenAPI document, and the clients generated from it), so a
pattern written with it would call a name valid in one and not in the other."""
TaskId = Annotated[
    str, Meta(min_length=1, max_length=bounds.MAX_ID_LENGTH, pattern=TASK_ID_PATTERN)
]
QueueName = Annotated[
    str,
    Meta(
        min_length=1, max_length=bounds.MAX_QUEUE_LENGTH, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-:]*$"
    ),
]
HandlerRef = Annotated[
    str,
    Meta(min_length=1, max_length=bounds.MAX_HANDLER_REF_LENGTH, pattern=f"^{VISIBLE}+$"),
]
Delay = Annotated[float, Meta(ge=0, le=366 * 86400)]
Seconds = Annotated[float, Meta(ge=0, le=366 * 86400)]
Reason = Annotated[str, Meta(max_length=bounds.MAX_AUDIT_REASON_LENGTH)]
DedupKey = Annotated[
    str, Meta(min_length=1, max_length=bounds.MAX_DEDUP_KEY_LENGTH, pattern=f"^{VISIBLE}+$")
]
ErrorType = Annotated[str, Meta(min_length=1, max_length=bounds.MAX_ERROR_TYPE_LENGTH)]
FilterHandlerRef = Annotated[str, Meta(min_length=1, max_length=bounds.MAX_HANDLER_REF_LENGTH)]

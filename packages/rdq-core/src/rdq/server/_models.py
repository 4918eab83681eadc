"""The request and response bodies of the HTTP API (they also generate its OpenAPI document).

They are grouped by concern: the shared field types in :mod:`rdq.server._fields`, the bodies of
tasks, queues, the DLQ and the audit trail in :mod:`rdq.server._task_models`, those of flow
control and the fleet in :mod:`rdq.server._flow_models`. This module gathers them: the routes
and the OpenAPI document (which walks :data:`__all__`) import them from here. ``LimitDoc`` and
``LimitList`` are re-exported too, outside ``__all__`` as they always were.
"""

from __future__ import annotations

from rdq.server._fields import TASK_ID_PATTERN
from rdq.server._flow_models import (
    BreakerDoc,
    BreakerList,
    BreakerRequest,
    ControlDoc,
    ControlList,
    MinuteDoc,
    OutageDoc,
    PausedDoc,
    PauseDoc,
    PauseList,
    PauseRequest,
    PendingFilterRequest,
    RateList,
    ReasonRequest,
    RedriveList,
    RedriveRequest,
    RetryNowRequest,
    WorkerDoc,
    WorkerList,
)
from rdq.server._flow_models import LimitDoc as LimitDoc
from rdq.server._flow_models import LimitList as LimitList
from rdq.server._task_models import (
    ActionRequest,
    ActionResult,
    AttemptDoc,
    AttemptsDoc,
    AuditDoc,
    AuditPage,
    CancelRequest,
    DLQPage,
    FilterRequest,
    GroupDoc,
    GroupList,
    HoldDoc,
    HolderDoc,
    OperationDoc,
    OutlookDoc,
    QueueList,
    RetryRequest,
    SkippedDoc,
    StatsDoc,
    SubmitRequest,
    TaskDoc,
    TaskFilterRequest,
    TaskPage,
)

__all__ = [
    "TASK_ID_PATTERN",
    "ActionRequest",
    "ActionResult",
    "AttemptDoc",
    "AttemptsDoc",
    "AuditDoc",
    "AuditPage",
    "BreakerDoc",
    "BreakerList",
    "BreakerRequest",
    "CancelRequest",
    "ControlDoc",
    "ControlList",
    "DLQPage",
    "FilterRequest",
    "GroupDoc",
    "GroupList",
    "HoldDoc",
    "HolderDoc",
    "MinuteDoc",
    "OperationDoc",
    "OutageDoc",
    "OutlookDoc",
    "PauseDoc",
    "PauseList",
    "PauseRequest",
    "PausedDoc",
    "PendingFilterRequest",
    "QueueList",
    "RateList",
    "ReasonRequest",
    "RedriveList",
    "RedriveRequest",
    "RetryNowRequest",
    "RetryRequest",
    "SkippedDoc",
    "StatsDoc",
    "SubmitRequest",
    "TaskDoc",
    "TaskFilterRequest",
    "TaskPage",
    "WorkerDoc",
    "WorkerList",
]

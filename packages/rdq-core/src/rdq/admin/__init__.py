"""The operator's admin layer: find, inspect, redrive, purge and cancel tasks; pause and
resume queues, open and close breakers by hand, retry waiting tasks now, redrive at a pace —
every action audited — and read the limits that hold across the fleet.

:class:`TaskAdmin` is what the HTTP API, the web UI and the ``rdq`` commands share.
:class:`TaskSelector` names the tasks a cancel acts on (ids or a task filter), as
:class:`rdq.spi.Selector` does for redrive and purge. :class:`Operation` is a paced redrive.
"""

from rdq.admin._admin import DLQAdmin, ProgressCallback, TaskAdmin
from rdq.admin._controls import control_key
from rdq.admin._limit_views import LimitValue, LimitView
from rdq.admin._pace import Operation, parse_rate, resume_orphans
from rdq.admin._selectors import CANCELLABLE, TaskSelector
from rdq.admin._views import BreakerView, PauseView, WorkerView, key_kind

__all__ = [
    "CANCELLABLE",
    "BreakerView",
    "DLQAdmin",
    "LimitValue",
    "LimitView",
    "Operation",
    "PauseView",
    "ProgressCallback",
    "TaskAdmin",
    "TaskSelector",
    "WorkerView",
    "control_key",
    "key_kind",
    "parse_rate",
    "resume_orphans",
]

"""The operator's admin layer: find, inspect, redrive, purge and cancel tasks, audited.

:class:`TaskAdmin` is what the HTTP API, the web UI and the ``rdq`` commands share.
:class:`TaskSelector` names the tasks a cancel acts on (ids or a task filter), as
:class:`rdq.spi.Selector` does for redrive and purge.
"""

from rdq.admin._admin import DLQAdmin, ProgressCallback, TaskAdmin
from rdq.admin._selectors import CANCELLABLE, TaskSelector

__all__ = ["CANCELLABLE", "DLQAdmin", "ProgressCallback", "TaskAdmin", "TaskSelector"]

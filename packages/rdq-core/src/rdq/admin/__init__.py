"""The operator's admin layer: find, inspect, redrive, purge and cancel tasks; pause and
resume queues, open and close breakers by hand, retry waiting tasks now, redrive at a pace —
every action audited — and read the fleet.

:class:`TaskAdmin` is what the HTTP API, the web UI and the ``rdq`` commands share.
:class:`TaskSelector` names the tasks a cancel acts on (ids or a task filter), as
:class:`rdq.spi.Selector` does for redrive and purge. :class:`Operation` is a paced redrive.
The rules of pauses, breakers and limits, and their views, are :mod:`rdq.flow`'s.

- ``_admin``: :class:`TaskAdmin` and :class:`DLQAdmin` (find, count, preview); ``_acting``:
  its acting half (redrive, purge, cancel — a purge with an archive writes there first);
  ``_reports``: :class:`ActionReport`, what an action came to (matched, done, already gone);
  ``_imports``: DEAD tasks put back from an archive or export (:class:`ImportReport`);
- ``_flow_admin``: the flow-control half of :class:`TaskAdmin` (through :mod:`rdq.flow`);
- ``_retry_now``: retry now and its count; ``_pace``: paced redrives;
- ``_rotate``: :func:`rotate_keys`, re-sealing stored payloads under the active key
  (resumable from its journal);
- ``_fleet``: the workers judged live or silent, and the rates of the last hour;
- ``_names``: the queues, handlers and dependencies known on the store (an operator's typo
  is refused with the closest one); ``_preview``: what an action would act on, the named
  tasks it would skip and why, and what is close to a filter that matches nothing;
- ``_outlook``: what holds a task and what happens next (pauses, breakers, full limits, a
  silent holder, a lapsed lease, the attempts charged and left), for every surface;
- ``_finish``: a storage call that changes tasks, finished even when its caller is
  cancelled (the audit entry counts what was applied);
- ``_selectors``: :class:`TaskSelector`; ``_scan``, ``_fallback``, ``_paging``: reading
  through stores that cannot filter or page a selection themselves.
"""

from rdq.admin._admin import DLQAdmin, ProgressCallback, TaskAdmin
from rdq.admin._fleet import MAX_RATE_MINUTES, WorkerView
from rdq.admin._imports import ImportReport
from rdq.admin._names import Names
from rdq.admin._outlook import Attempts, Hold, Holder, Outlook
from rdq.admin._pace import MAX_PACED_IDS, Operation, parse_rate, resume_orphans
from rdq.admin._preview import Preview, Skipped
from rdq.admin._reports import ActionReport
from rdq.admin._rotate import Rotation, RotationProgress, rotate_keys
from rdq.admin._selectors import CANCELLABLE, TaskSelector

__all__ = [
    "CANCELLABLE",
    "MAX_PACED_IDS",
    "MAX_RATE_MINUTES",
    "ActionReport",
    "Attempts",
    "DLQAdmin",
    "Hold",
    "Holder",
    "ImportReport",
    "Names",
    "Operation",
    "Outlook",
    "Preview",
    "ProgressCallback",
    "Rotation",
    "RotationProgress",
    "Skipped",
    "TaskAdmin",
    "TaskSelector",
    "WorkerView",
    "parse_rate",
    "resume_orphans",
    "rotate_keys",
]

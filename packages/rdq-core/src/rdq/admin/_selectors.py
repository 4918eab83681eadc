"""What a cancel acts on: explicit task ids, or the tasks a :class:`~rdq.spi.TaskFilter` selects."""

from __future__ import annotations

import msgspec

from rdq.errors import ValidationError
from rdq.spi import Status, TaskFilter, bounds

__all__ = ["CANCELLABLE", "TaskSelector", "check_task_selector"]

CANCELLABLE = (Status.PENDING, Status.IN_FLIGHT)
"""The statuses a task can be cancelled in."""


class TaskSelector(msgspec.Struct, kw_only=True, frozen=True):
    """Tasks of a queue to cancel: ``ids`` *or* ``filter`` (whose status must be PENDING or
    IN_FLIGHT), never both — the cancel counterpart of :class:`rdq.spi.Selector`."""

    ids: list[str] | None = None
    filter: TaskFilter | None = None

    def __post_init__(self) -> None:
        if (self.ids is None) == (self.filter is None):
            raise ValidationError("give either ids or filter (exactly one)", field="selector")
        if self.filter is not None and self.filter.status not in CANCELLABLE:
            raise ValidationError(
                "only PENDING or IN_FLIGHT tasks can be cancelled", field="filter.status"
            )

    @classmethod
    def by_ids(cls, *ids: str) -> TaskSelector:
        return cls(ids=list(ids))

    @classmethod
    def by_filter(cls, task_filter: TaskFilter) -> TaskSelector:
        return cls(filter=task_filter)


def check_task_selector(selector: object) -> TaskSelector:
    if not isinstance(selector, TaskSelector):
        raise ValidationError("must be an rdq.admin.TaskSelector", field="selector")
    if selector.ids is not None:
        if len(selector.ids) > bounds.MAX_SELECTOR_IDS:
            raise ValidationError(f"more than {bounds.MAX_SELECTOR_IDS} ids", field="selector.ids")
        bounds.check_ids(selector.ids, "selector.ids")
    if selector.filter is not None:
        bounds.check_task_filter(selector.filter, "selector.filter")
    return selector

"""The control records of limit keys, created by the submitter before the first task with
the key is stored.

A per-value limit (``limit:<name>:<value>``) has one control record per value, and values are
not known before tasks bring them: the first submit of a value creates its record, with the
limits its app declares, before the task is stored — so no task with the key can be claimed
before the store holds its limit. Creating is a compare-and-set over "no record yet"
(``put_control(..., expected_version=0)``): of two submitters of one new value exactly one
writes, and the other's ``ControlConflict`` says that the record exists, which is all it
needs. Either way the client remembers the key, so each value costs one store call per client
process, and nothing after. A named key's record is created the same way when no worker has
written it yet. What the workers declare wins over what a submitter wrote (see
:func:`rdq.flow.declare`); records are never deleted while the limit is declared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from rdq.errors import ControlConflict
from rdq.flow._limit_config import LIMIT_PREFIX, LimitPlan
from rdq.flow._limit_rules import declare
from rdq.spi import Control, Envelope, Storage

__all__ = ["MAX_REMEMBERED", "LimitControls"]

MAX_REMEMBERED = 100_000
"""Keys a client remembers as having a record; past that it forgets them all and asks again
(one call per key), so a client that sees endless values does not grow for ever."""
SUBMITTER = "client"


class LimitControls:
    """The limit keys whose records one client knows to exist."""

    def __init__(self) -> None:
        self._known: set[tuple[str, str]] = set()

    async def ensure(
        self, storage: Storage, plan_of: Callable[[str], LimitPlan], tasks: Sequence[Envelope]
    ) -> None:
        """Create the record of every limit key of ``tasks`` that has none yet, with the limits
        ``plan_of(queue)`` declares for it (the app's :meth:`~rdq.App.limit_plan`)."""
        missing = {
            (task.queue, key)
            for task in tasks
            for key in task.keys
            if key.startswith(LIMIT_PREFIX) and (task.queue, key) not in self._known
        }
        if not missing or not storage.capabilities().control:
            return
        if len(self._known) + len(missing) > MAX_REMEMBERED:
            self._known.clear()
        for queue, key in sorted(missing):
            spec = plan_of(queue).spec_of(key)
            if spec is None:
                continue
            control = declare(Control(queue=queue, key=key), spec, None, SUBMITTER)
            if control is None:  # pragma: no cover - a new record always changes
                continue
            with contextlib.suppress(ControlConflict):  # another submitter or a worker was first
                await storage.put_control(control, expected_version=0)
            self._known.add((queue, key))

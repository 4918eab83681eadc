"""The claim order a worker's queue configs declare (``fair``, ``priority_aging``): written to
each queue's own control record (key ``*``) when the worker starts — again at each refresh of
its controls until the store has it —, so that every worker and node claiming the queue
follows it. A setting not declared (``None``) is left as the store holds it, so workers of an
older release do not undo it; a declaration of "off" (``fair = ""``, ``priority_aging = 0``)
removes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from rdq.app import App
from rdq.flow import update_control
from rdq.spi import QUEUE_KEY, Control, Storage, require

__all__ = ["DeclaredOrder"]


class DeclaredOrder:
    """What the configs of ``queues`` declare, and what is still to be written."""

    def __init__(self, app: App, storage: Storage, queues: Sequence[str], log: Any) -> None:
        self.storage = storage
        self.log = log
        self.pending: dict[str, tuple[str | None, float | None]] = {}
        for queue in queues:
            declared = app.queue_config(queue).claim_order
            if declared is not None:
                self.pending[queue] = declared

    def check(self) -> None:
        """Raise ``Unsupported`` naming the flag when a queue asks for what the store lacks."""
        for queue, (fair, aging) in self.pending.items():
            if fair is not None:
                require(self.storage, "fair_shares", f"queue {queue!r} with fair = {fair!r}")
            if aging is not None:
                require(
                    self.storage, "priority_aging", f"queue {queue!r} with priority_aging = {aging}"
                )

    async def apply(self) -> None:
        """Write each declaration the store does not hold yet."""
        for queue, (fair, aging) in list(self.pending.items()):
            if not self.storage.capabilities().control:  # declared off: strict already
                del self.pending[queue]
                continue

            def change(
                control: Control, fair: str | None = fair, aging: float | None = aging
            ) -> Control | None:
                if (control.fair, control.aging) == (fair, aging):
                    return None
                return msgspec.structs.replace(control, fair=fair, aging=aging)

            before, after = await update_control(self.storage, queue, QUEUE_KEY, change)
            del self.pending[queue]
            if after is not None:
                self.log.info(
                    "the queue's claim order follows its config",
                    queue=queue,
                    fair=fair,
                    priority_aging=aging,
                    was={"fair": before.fair, "priority_aging": before.aging},
                )

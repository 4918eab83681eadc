"""The contract machine's flow-control rules (for a store with ``control``): control records
read, changed and written back as the engine's compare-and-set loop does — pauses and their
lifting, a breaker opening, probing and closing, concurrency limits, gates and rate limits set,
changed and cleared, records deleted, writes over a stale version —, ``retry_now``, and the
check of every queue's records against the model (:mod:`rdq_compliance._flow_model`). The
claims and extensions of :class:`~rdq_compliance.stateful.ContractMachine` go through them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from rdq.errors import ControlConflict
from rdq.spi import QUEUE_KEY, Control, Status, handler_key
from rdq_compliance._flow_model import PER
from rdq_compliance._machine_base import ContractMachineBase, queue_indexes, slots

__all__ = ["CONTROL_KEYS", "KEY_SETS", "FlowRules"]

HANDLERS = ("kit.handlers:even", "kit.handlers:odd")
KEY_SETS = (["dep:a"], ["dep:b"], ["dep:a", "dep:b"])
"""A task's keys, by its slot (for a store with ``control``)."""
CONTROL_KEYS = (QUEUE_KEY, *(handler_key(h) for h in HANDLERS), "dep:a", "dep:b", "dep:a")
"""The keys a step changes the record of (a task key, most often)."""

Change = Callable[[st.DataObject], dict[str, Any]]


def _rate(data: st.DataObject) -> dict[str, Any]:
    rate = data.draw(st.sampled_from([None, 1]), label="rate")
    if rate is None:
        return {"rate": None, "per": 1.0, "burst": None}
    return {"rate": rate, "per": PER, "burst": data.draw(st.integers(1, 2), label="burst")}


CHANGES: dict[str, Change] = {
    "pause": lambda data: {"paused": True, "state": {"paused_by": "sm-operator"}},
    "resume": lambda data: {"paused": False, "state": {}},
    "limit": lambda data: {
        "concurrency": data.draw(st.sampled_from([None, 0, 1, 1, 2]), label="concurrency")
    },
    "gate": lambda data: {"gate": data.draw(st.sampled_from([None, 0, 1, 2]), label="gate")},
    "rate": _rate,
    "breaker-open": lambda data: {"paused": True, "gate": None, "state": {"breaker": "open"}},
    "breaker-probe": lambda data: {"paused": False, "gate": 1, "state": {"breaker": "half_open"}},
    "breaker-close": lambda data: {"paused": False, "gate": None, "state": {"breaker": "closed"}},
    "clear": lambda data: {
        "paused": False,
        "gate": None,
        "concurrency": None,
        "rate": None,
        "per": 1.0,
        "burst": None,
        "state": {},
    },
}
"""How a step changes a record (read, changed, written back over the version read)."""


class FlowRules(ContractMachineBase):
    """The flow-control steps of the contract machine; they do nothing for a store without
    ``control`` (then no task has keys, and no claim meets a control)."""

    control: bool

    def enqueue(self, slot: int, queue: int, *, delayed: bool, priority: int) -> None:
        """Admit the task of ``slot`` to ``queue`` (the machine's own rule)."""
        raise NotImplementedError

    def keys_of(self, slot: int) -> list[str]:
        """The keys a task of ``slot`` is admitted with."""
        return list(KEY_SETS[slot % len(KEY_SETS)]) if self.control else []

    def pick_extended(self, data: st.DataObject) -> int:
        """A slot for ``extend_lease``: as :meth:`pick_held` picks, but with ``control``
        often a lapsed lease whose slot another task took (its extension must be refused)."""
        if self.control:
            taken = sorted(
                int(t.id.rsplit("-", 1)[1])
                for t in self.model.with_status(Status.IN_FLIGHT)
                if t.token is not None and self.slot_taken(t.id)
            )
            aim: bool = bool(taken) and data.draw(st.booleans(), label="slot taken")
            if aim:
                return taken[data.draw(slots, label="slot") % len(taken)]
        return self.pick_held(data)

    def slot_taken(self, task_id: str) -> bool:
        """Whether the held lease of ``task_id`` lapsed and another task took its slot of a
        concurrency limit meanwhile (its extension then raises ``StaleClaim``)."""
        return self.control and self.model.flow.extension_refused(
            self.model.tasks[task_id], self.model.tasks.values(), self.lapsed_by
        )

    def limit_from_start(self, data: st.DataObject) -> None:
        """With ``control``, mostly: a concurrency limit of 1 on ``dep:a`` of the second queue
        and on ``dep:a`` or the whole of the first, and two tasks with ``dep:a`` due in the
        first (so that a lapsed lease's slot can be taken by another task early on)."""
        how = data.draw(st.integers(0, 3), label="limited") if self.control else 0
        if not how:
            return
        first = QUEUE_KEY if how > 1 else "dep:a"
        for name, key in ((self.queues[0], first), (self.queues[1], "dep:a")):
            control = Control(queue=name, key=key, concurrency=1)
            stored = self.call(self.storage.put_control(control, expected_version=0))
            assert stored.version == self.model.flow.put(control).version
        for slot in (0, 3):  # both with dep:a (KEY_SETS)
            self.enqueue(slot, 0, delayed=False, priority=0)

    def control_any(self, data: st.DataObject) -> None:
        """Read a record, change it, write it back over the version read (or over another
        version, or delete it), and check the store against the model."""
        if not self.control:
            return
        name = self.queues[data.draw(queue_indexes, label="queue")]
        key = data.draw(st.sampled_from(CONTROL_KEYS), label="key")
        how = data.draw(st.sampled_from([*CHANGES, "delete", "stale"]), label="change")
        expected = self.model.flow.get(name, key)
        version = expected.version if expected is not None else 0
        read = {c.key: c for c in self.call(self.storage.list_controls(name))}.get(key)
        assert (read.version if read is not None else 0) == version, f"{name} {key}: version"
        if how == "delete":
            deleted = self.call(self.storage.delete_control(name, key, expected_version=version))
            assert deleted == (expected is not None)
            self.model.flow.delete(name, key)
            return
        if how == "stale":
            control = Control(queue=name, key=key, paused=True)
            conflict = self.expect(
                ControlConflict, self.storage.put_control(control, expected_version=version + 1)
            )
            found = conflict.found
            assert (found.version if found is not None else 0) == version, "found as stored"
            return
        base = read or Control(queue=name, key=key)
        written = Control(
            **{f: getattr(base, f) for f in base.__struct_fields__} | CHANGES[how](data)
        )
        stored = self.call(self.storage.put_control(written, expected_version=version))
        assert stored.version == self.model.flow.put(written).version

    def retry_now_any(self, data: st.DataObject) -> None:
        """``retry_now`` of a few tasks: the waiting PENDING ones of the queue move, no other."""
        if not self.control:
            return
        name = self.queues[self.pick_queue(data, Status.PENDING)]
        size = data.draw(st.integers(min_value=1, max_value=3), label="size")
        ids = [self.task_id(self.pick_slot(data, Status.PENDING)) for _ in range(size)]
        waiting = [
            task_id
            for task_id in dict.fromkeys(ids)
            if (t := self.model.tasks.get(task_id)) is not None
            and t.queue == name
            and t.status == Status.PENDING
            and t.due_at is None
        ]
        before = self.now()
        assert self.call(self.storage.retry_now(name, ids)) == len(waiting)
        for task_id in waiting:
            due = self.stored(task_id).next_attempt_at
            assert due is not None and before <= due <= self.now(), "due at the store's now"
            self.model.tasks[task_id].due_at = due
            self.check_task(task_id)

    def check_controls(self) -> None:
        """Every queue's records, with ``in_use``, as the model says."""
        if not self.control:
            return
        tasks = list(self.model.tasks.values())
        for name in self.queues:
            listed = self.call(self.storage.list_controls(name))
            keys = [c.key for c in listed]
            assert keys == sorted(keys), "list_controls lists by key"
            got = {
                c.key: {
                    "paused": c.paused,
                    "gate": c.gate,
                    "concurrency": c.concurrency,
                    "rate": c.rate,
                    "per": c.per,
                    "burst": c.burst,
                    "state": c.state,
                    "version": c.version,
                    "in_use": c.in_use,
                }
                for c in listed
            }
            expected = self.model.flow.expected(name, tasks, self.lapsed_by)
            assert got == expected, f"controls of {name}: {got}, the model says {expected}"

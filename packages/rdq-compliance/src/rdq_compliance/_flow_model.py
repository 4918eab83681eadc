"""The flow-control part of the contract's model, for the stateful test: control records as
``put_control`` and ``delete_control`` leave them, and which due tasks a claim takes through
them (the rule of :class:`rdq.spi.Control`, restated naively).

The machine's rate limits have a period of an hour (:data:`PER`), so that no bucket refills a
whole token while an example runs: a bucket holds ``burst`` tokens when its rate is set or
changed and one fewer per task claimed, which makes a claim's answer a property of the
sequence, not of the machine's speed. Leases are live or lapsed as the machine says
(``lapsed_by``: every lease that ends by then has lapsed, every other one is live).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from rdq.spi import QUEUE_KEY, Control, Status, handler_key

__all__ = ["PER", "FlowModel", "ModelControl", "flow_keys"]

PER = 3600.0
"""The period of every rate limit the machine sets: an hour."""


class _Task(Protocol):
    """What the flow model reads of a task of :class:`~rdq_compliance.model.ContractModel`."""

    id: str
    queue: str
    handler_ref: str
    keys: list[str]
    status: Status
    lease_expires_at: datetime | None


def flow_keys(task: _Task) -> list[str]:
    """Every key of ``task`` (``rdq.spi.task_keys``)."""
    return [QUEUE_KEY, handler_key(task.handler_ref), *task.keys]


@dataclass
class ModelControl:
    """A control record as the store must hold it; ``tokens`` is its rate bucket (``None``:
    no rate)."""

    paused: bool = False
    gate: int | None = None
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0
    burst: int | None = None
    state: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    tokens: int | None = None

    @property
    def restricts(self) -> bool:
        return self.paused or any(v is not None for v in (self.gate, self.concurrency, self.rate))

    def bucket(self) -> int:
        if self.burst is not None:
            return self.burst
        return max(1, (self.rate or 0) // 10)


@dataclass
class Plan:
    """What one claim through the controls takes: the tasks, in the model's order, and the
    gates and buckets it leaves."""

    ids: list[str]
    gates: dict[str, int]
    tokens: dict[str, int]


class FlowModel:
    """The control records of every queue of an example."""

    def __init__(self) -> None:
        self.controls: dict[str, dict[str, ModelControl]] = {}

    def of(self, queue: str) -> dict[str, ModelControl]:
        return self.controls.get(queue, {})

    def get(self, queue: str, key: str) -> ModelControl | None:
        return self.of(queue).get(key)

    def restricting(self, queue: str) -> bool:
        """True when a control of ``queue`` can hold a task back."""
        return any(c.restricts for c in self.of(queue).values())

    # --- writes ----------------------------------------------------------------------------

    def put(self, written: Control) -> ModelControl:
        """Record ``written`` as stored: every field as given, one version more, the bucket
        refilled when its rate, period or size changed (or it is new)."""
        before = self.get(written.queue, written.key)
        stored = ModelControl(
            paused=written.paused,
            gate=written.gate,
            concurrency=written.concurrency,
            rate=written.rate,
            per=written.per,
            burst=written.burst,
            state=dict(written.state),
            version=(before.version if before is not None else 0) + 1,
        )
        if stored.rate is not None:
            same = before is not None and (before.rate, before.per, before.bucket()) == (
                stored.rate,
                stored.per,
                stored.bucket(),
            )
            kept = before.tokens if same and before is not None else None
            stored.tokens = stored.bucket() if kept is None else kept
        self.controls.setdefault(written.queue, {})[written.key] = stored
        return stored

    def delete(self, queue: str, key: str) -> None:
        self.controls.get(queue, {}).pop(key, None)

    # --- claims and leases -------------------------------------------------------------------

    @staticmethod
    def live(tasks: Iterable[_Task], queue: str, key: str, lapsed_by: datetime) -> int:
        """How many tasks of ``queue`` with ``key`` hold a live lease."""
        return sum(
            1
            for t in tasks
            if t.queue == queue
            and t.status == Status.IN_FLIGHT
            and t.lease_expires_at is not None
            and t.lease_expires_at > lapsed_by
            and key in flow_keys(t)
        )

    def plan(
        self,
        queue: str,
        in_order: Sequence[_Task],
        limit: int,
        tasks: Iterable[_Task],
        lapsed_by: datetime,
    ) -> Plan:
        """What a claim of up to ``limit`` of the due tasks ``in_order`` takes: each one in
        turn that every control of its keys lets through (not paused, a gate of at least 1, a
        free slot, a token), taking one of each; the others are skipped."""
        controls = self.of(queue)
        gates = {k: c.gate for k, c in controls.items() if c.gate is not None}
        tokens = {k: c.tokens for k, c in controls.items() if c.tokens is not None}
        everyone = list(tasks)
        used = {
            k: self.live(everyone, queue, k, lapsed_by)
            for k, c in controls.items()
            if c.concurrency is not None
        }

        def room(key: str) -> bool:
            c = controls[key]
            return (
                not c.paused
                and gates.get(key, 1) >= 1
                and (c.concurrency is None or used[key] < c.concurrency)
                and tokens.get(key, 1) >= 1
            )

        ids: list[str] = []
        for task in in_order:
            if len(ids) == limit:
                break
            keys = [k for k in flow_keys(task) if k in controls]
            if not all(room(k) for k in keys):
                continue
            for key in keys:
                if key in gates:
                    gates[key] -= 1
                if key in tokens:
                    tokens[key] -= 1
                if key in used:
                    used[key] += 1
            ids.append(task.id)
        return Plan(ids, gates, tokens)

    def commit(self, queue: str, plan: Plan) -> None:
        """Store what a claim took from the gates and buckets (no change of version)."""
        for key, left in plan.gates.items():
            self.controls[queue][key].gate = left
        for key, left in plan.tokens.items():
            self.controls[queue][key].tokens = left

    def extension_refused(self, task: _Task, tasks: Iterable[_Task], lapsed_by: datetime) -> bool:
        """Whether ``extend_lease`` of ``task``'s lease must raise ``StaleClaim``: it lapsed,
        and a concurrency limit of one of its keys has no free slot."""
        if task.lease_expires_at is None or task.lease_expires_at > lapsed_by:
            return False
        everyone = list(tasks)
        for key in flow_keys(task):
            c = self.get(task.queue, key)
            limit = None if c is None else c.concurrency
            if limit is not None and self.live(everyone, task.queue, key, lapsed_by) >= limit:
                return True
        return False

    def expected(
        self, queue: str, tasks: Iterable[_Task], lapsed_by: datetime
    ) -> dict[str, Mapping[str, object]]:
        """``list_controls(queue)`` as the model says it must read, key by key."""
        everyone = list(tasks)
        return {
            key: {
                "paused": c.paused,
                "gate": c.gate,
                "concurrency": c.concurrency,
                "rate": c.rate,
                "per": c.per,
                "burst": c.burst,
                "state": c.state,
                "version": c.version,
                "in_use": self.live(everyone, queue, key, lapsed_by),
            }
            for key, c in sorted(self.of(queue).items())
        }

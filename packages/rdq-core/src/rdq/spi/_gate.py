"""``ClaimGate``: the rule by which a claim honours control records, for a store that decides
claims in Python inside one atomic step (the memory store under its lock, SQLite inside its
write transaction). A store that claims in the backend (SQL, a script) implements the same
rule there; the compliance kit checks either against :class:`~rdq.spi.Control`'s promise."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from rdq.spi._flow import Control

__all__ = ["Bucket", "ClaimGate", "refill", "slots_free"]


@dataclass
class Bucket:
    """A rate limit's tokens as of ``at`` (the store's time of the last refill)."""

    tokens: float
    at: datetime


def refill(control: Control, bucket: Bucket | None, now: datetime) -> Bucket:
    """``bucket`` refilled to ``now`` at ``control.rate`` per ``control.per`` seconds, holding
    at most ``control.bucket``; a new bucket (a new or changed rate) starts full."""
    if bucket is None:
        return Bucket(float(control.bucket), now)
    rate = control.rate or 0
    elapsed = max(0.0, (now - bucket.at).total_seconds())
    return Bucket(min(float(control.bucket), bucket.tokens + elapsed * rate / control.per), now)


def slots_free(
    controls: Mapping[str, Control], in_use: Mapping[str, int], keys: Iterable[str]
) -> bool:
    """Whether a lapsed lease of a task with ``keys`` may be extended: True when every
    concurrency limit among ``controls`` of those keys has a free slot now (``in_use``: the
    live leases per key, of which the lapsed one is not). An extension is no new claim, so
    pauses, gates and rates do not hold it back; a live lease is extended whatever this says
    (it holds its slots already)."""
    for key in keys:
        control = controls.get(key)
        limit = None if control is None else control.concurrency
        if limit is not None and in_use.get(key, 0) >= limit:
            return False
    return True


class ClaimGate:
    """The controls of one queue during one claim.

    ``controls`` by key; ``buckets`` the stored rate buckets by key (refilled here to
    ``now``); ``in_use`` how many tasks hold a live lease per concurrency-limited key. Ask
    :meth:`admits` for each candidate task's keys in claim order and :meth:`take` for each one
    claimed; afterwards :attr:`gates` and :attr:`buckets` hold what to store back."""

    def __init__(
        self,
        controls: Mapping[str, Control],
        buckets: Mapping[str, Bucket],
        in_use: Mapping[str, int],
        now: datetime,
    ) -> None:
        self.controls = dict(controls)
        self.gates = {k: c.gate for k, c in self.controls.items() if c.gate is not None}
        self.buckets = {
            k: refill(c, buckets.get(k), now)
            for k, c in self.controls.items()
            if c.rate is not None
        }
        self.in_use: Counter[str] = Counter(in_use)
        self.paused = frozenset(k for k, c in self.controls.items() if c.paused)
        self.closed = frozenset(k for k in self.controls if not self._room(k))
        """The keys that let no task through at the start of the claim (paused, a gate or a
        bucket at zero, every slot taken): a fair claim ranks none of their tasks."""

    @property
    def idle(self) -> bool:
        """True when no control restricts anything (the claim can ignore the gate)."""
        return not (self.paused or self.gates or self.buckets) and not any(
            c.concurrency is not None for c in self.controls.values()
        )

    def blocks_everything(self, queue_key: str) -> bool:
        """True when the queue's own control lets no task through (paused, a gate of 0, a
        concurrency of 0): the claim can stop before looking at a task."""
        control = self.controls.get(queue_key)
        if control is None:
            return False
        return control.paused or self.gates.get(queue_key) == 0 or control.concurrency == 0

    def admits(self, keys: Iterable[str]) -> bool:
        """True if every control of ``keys`` lets one more task through now."""
        return all(key not in self.controls or self._room(key) for key in keys)

    def closed_from_start(self, keys: Iterable[str]) -> bool:
        """True if a control of ``keys`` let no task through when the claim began."""
        return not self.closed.isdisjoint(keys)

    def _room(self, key: str) -> bool:
        control = self.controls[key]
        if control.paused:
            return False
        gate = self.gates.get(key)
        if gate is not None and gate < 1:
            return False
        if control.concurrency is not None and self.in_use[key] >= control.concurrency:
            return False
        bucket = self.buckets.get(key)
        return bucket is None or bucket.tokens >= 1

    def take(self, keys: Iterable[str]) -> None:
        """One task with ``keys`` was claimed: take it from every gate, slot and bucket."""
        for key in keys:
            control = self.controls.get(key)
            if control is None:
                continue
            if key in self.gates:
                self.gates[key] = (self.gates[key] or 0) - 1
            if control.concurrency is not None:
                self.in_use[key] += 1
            bucket = self.buckets.get(key)
            if bucket is not None:
                bucket.tokens -= 1

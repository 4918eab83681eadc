"""``Plan``: what one decision of a claim under limits let through, and what it took."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Plan"]


@dataclass
class Plan:
    """What one decision let through: the limited keys of each task, in claim order, what
    they take in all (``totals``: what the claim takes from the records), the keys that held
    a task back, and what the leases used of ``totals`` so far."""

    admitted: list[frozenset[str]] = field(default_factory=list)
    totals: Counter[str] = field(default_factory=Counter)
    held: set[str] = field(default_factory=set)
    used: Counter[str] = field(default_factory=Counter)

    @property
    def unused(self) -> dict[str, int]:
        return {k: n - self.used[k] for k, n in self.totals.items()}

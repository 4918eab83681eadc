"""``Doubling``: the one backoff every retry loop of rdq uses (an outage, a busy lock, a write
that could not be made), in the engine and in stores alike."""

from __future__ import annotations

import random

__all__ = ["Doubling"]


class Doubling:
    """Waits that start at ``first`` seconds and double after each failure up to ``cap``,
    each drawn with jitter from ``[wait * (1 - jitter / 2), wait * (1 + jitter / 2)]``, so that
    many clients that failed together do not retry together. :meth:`reset` after a success.

    ``rng`` makes the draws repeatable in tests."""

    __slots__ = ("_current", "_rng", "cap", "first", "jitter")

    def __init__(
        self,
        first: float,
        cap: float,
        *,
        jitter: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < first <= cap:
            raise ValueError("need 0 < first <= cap")
        if not 0 <= jitter <= 1:
            raise ValueError("jitter is a fraction from 0 to 1")
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self._rng = rng
        self._current = first

    @property
    def current(self) -> float:
        """The wait the next :meth:`next` draws around (seconds, before jitter)."""
        return self._current

    def next(self) -> float:
        """The wait after one more failure (seconds); the one after it doubles."""
        wait = self._current
        self._current = min(self.cap, wait * 2)
        if not self.jitter:
            return wait
        spread = (self._rng or random).random() - 0.5
        return wait * (1 + self.jitter * spread)

    def reset(self) -> None:
        """A success: the next failure waits ``first`` again."""
        self._current = self.first

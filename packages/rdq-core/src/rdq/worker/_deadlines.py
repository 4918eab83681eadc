"""One timer for the timeouts of every handler a worker runs.

A handler's timeout is its run's ``deadline`` (monotonic seconds). Instead of a timer per call
(``asyncio.timeout`` schedules one and cancels it again for every task), the worker keeps the
deadlines of the handlers it runs in one heap and one event-loop timer armed for the earliest
of them. Deadlines are added in start order, so a later one rarely re-arms the timer; a
handler that ends leaves its entry behind, emptied (its :class:`Watch` no longer names the
run, so a stale entry does not keep the run's task and payload alive until its deadline
passes), and the heap is rebuilt from the live entries once the stale ones outnumber them.
When the timer fires, every handler past its deadline has its task cancelled with
``run.expired`` set (the call then ends as a timeout, see :mod:`rdq.worker._invoke`); a
deadline moved later meanwhile (a stall excused, see
:meth:`rdq.worker._runner.Run.excuse_stall`) is put back at its new time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time

from rdq.worker._clock import Monotonic
from rdq.worker._run import Run, Watch

__all__ = ["Deadlines"]

_SLACK = 64
"""Stale entries tolerated beyond the live ones before the heap is rebuilt."""


class Deadlines:
    """The running handlers' deadlines of one worker, on its event loop."""

    def __init__(self, mono: Monotonic = time.monotonic) -> None:
        self.mono = mono
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._live = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = float("inf")

    def add(self, run: Run) -> None:
        """Watch ``run.deadline`` from now until :meth:`discard`."""
        watch = run.timing = Watch(run)
        self._live += 1
        heap = self._heap
        if len(heap) > 2 * self._live + _SLACK:
            heap[:] = [entry for entry in heap if entry[2].run is not None]
            heapq.heapify(heap)
        heapq.heappush(heap, (run.deadline, next(self._order), watch))
        if run.deadline < self._armed_for:
            self._arm(run.deadline)

    def discard(self, run: Run) -> None:
        """``run``'s handler ended: its deadline no longer matters."""
        if run.timing is not None:
            run.timing.run = None
            run.timing = None
            self._live -= 1

    def close(self) -> None:
        """Cancel the timer (the worker is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed_for = float("inf")

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = when
        delay = max(0.0, when - self.mono())
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._armed_for = float("inf")
        heap = self._heap
        now = self.mono()
        while heap and heap[0][0] <= now:
            _, _, watch = heapq.heappop(heap)
            run = watch.run
            if run is None:
                continue
            if run.deadline > now:  # moved later since it was added
                heapq.heappush(heap, (run.deadline, next(self._order), watch))
                continue
            self.discard(run)
            run.expire()
        while heap and heap[0][2].run is None:
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0])

"""The worker: claims due tasks, runs their handlers under their timeouts, writes each outcome
back with the claim's fencing token, renews leases, runs schedules and upkeep, and shuts down
gracefully.

:class:`Worker` is the entry point (also ``rdq.Worker``); the modules behind it:

- ``_worker``: :class:`Worker` itself: start, the tasks it runs beside the claims, stop;
- ``_claiming``: the claim loop of each queue, and waiting when nothing is due;
- ``_slots``: concurrency slots and claiming ahead;
- ``_run``: the state of one held task (the leaf every other module imports);
- ``_runner``, ``_invoke``, ``_deadlines``, ``_threads``: running one task to its outcome
  (the runner, the call under its timeout, the timers, the thread pool of plain functions);
- ``_completer``: batched successes;
- ``_heartbeat``, ``_watchdog``: lease renewal, and event-loop stalls;
- ``_flow``, ``_limits``, ``_order``: the worker's side of flow control — outcomes fed to the
  breakers and held tasks, the declared limits and claim order kept in the store's records
  (the rules are :mod:`rdq.flow`'s);
- ``_fleet``: the worker's registration and its per-minute counts;
- ``_maintenance``: queue gauges and the finished-task TTL; ``_trim``: freed memory given
  back to the system;
- ``_scheduler``: periodic schedules; ``_shutdown``: the grace period;
- ``_clock``: the storage clock as learned from claims; ``_preflight``: checks before the
  first claim; ``_loop``: the event loop ``rdq worker`` runs on.

What a retry comes to is decided in :mod:`rdq.retry`, not here.
"""

from rdq.worker._loop import run as run_on_event_loop
from rdq.worker._worker import DEFAULT_MAX_UNRECORDED, MAX_UNRECORDED, Worker, default_worker_id

__all__ = [
    "DEFAULT_MAX_UNRECORDED",
    "MAX_UNRECORDED",
    "Worker",
    "default_worker_id",
    "run_on_event_loop",
]

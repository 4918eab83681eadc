"""The worker: claims due tasks, runs their handlers under their timeouts, writes each outcome
back with the claim's fencing token, renews leases, runs schedules and upkeep, and shuts down
gracefully.

:class:`Worker` is the entry point (also ``rdq.Worker``); the modules behind it:

- ``_worker``: the claim loop per queue, start and stop;
- ``_run``: the state of one held task (a leaf every other module imports);
- ``_runner``, ``_invoke``, ``_deadlines``, ``_threads``: running one task to its outcome;
- ``_slots``: concurrency slots and claiming ahead; ``_completer``: batched successes;
- ``_heartbeat``, ``_watchdog``: lease renewal and event-loop stalls;
- ``_shutdown``: the grace period; ``_scheduler``: periodic schedules;
  ``_maintenance``: queue gauges and the finished-task TTL; ``_clock``: the storage clock as
  learned from claims; ``_preflight``: checks before the first claim; ``_loop``: the event
  loop ``rdq worker`` runs on.

What a retry comes to is decided in :mod:`rdq.retry`, not here.
"""

from rdq.worker._worker import DEFAULT_MAX_UNRECORDED, Worker, default_worker_id

__all__ = ["DEFAULT_MAX_UNRECORDED", "Worker", "default_worker_id"]

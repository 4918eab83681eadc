"""rdq on the same PostgreSQL as ``rdq_runner``, its worker processes on uvloop: what
``rdq worker`` runs on once the ``rdq-core[uvloop]`` extra is installed. Everything else (the
producer, the store's defaults, the verification) is ``rdq_runner``'s, so the two side by
side show what the event loop alone changes."""

from __future__ import annotations

from bench.e2e import rdq_runner

__all__ = ["System", "Worker"]


class System(rdq_runner.System):
    name = "rdq_uvloop"


class Worker(rdq_runner.Worker):
    event_loop = "uvloop"

"""Throwaway test servers for the backends, shared by every package's tests.

Each module (``postgres``, ``redis``, ``mongo``) offers a context manager ``server_url()`` that
yields a URL to an empty, reachable server:

1. the URL in the backend's environment variable if set (``RDQ_TEST_POSTGRES_URL``,
   ``RDQ_TEST_REDIS_URL``, ``RDQ_TEST_MONGO_URL``);
2. else a throwaway server started from local binaries (or in-process), on a free loopback
   port, in a temporary directory removed afterwards;
3. else testcontainers, where a Docker engine answers.

If none is possible the function raises :class:`ServerUnavailable`; the pytest fixtures turn
that into a failure when ``CI`` is set (nothing is skipped silently in CI) and a skip with the
reason otherwise.
"""

from __future__ import annotations

import os

__all__ = ["ServerUnavailable", "in_ci"]


class ServerUnavailable(RuntimeError):
    """No way to get a test server of this kind on this machine; the message says why."""


def in_ci() -> bool:
    """True when running in CI (``CI`` set to a true-ish value)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")

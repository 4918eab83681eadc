"""A durable redis-server of the benchmark's own: ``--appendonly yes --appendfsync always``
(an fsync before every reply), no RDB snapshots, in a temporary directory on the local disk,
so every acknowledged write is as durable as the PostgreSQL systems' are. ``--redis-fsync
everysec`` (:data:`SETTINGS`) runs it with ``appendfsync everysec`` instead: an fsync a
second, up to about a second of acknowledged writes lost on power loss (docs/redis.md)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from bench.e2e.cluster import process_tree_cpu

__all__ = ["FSYNC_POLICIES", "SETTINGS", "DurableRedis"]

FSYNC_POLICIES = ("always", "everysec")


class Settings:
    """How the run's redis-servers are started (set from the command line)."""

    def __init__(self) -> None:
        self.appendfsync = "always"


SETTINGS = Settings()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DurableRedis:
    """One redis-server process on 127.0.0.1; ``url`` is ``redis://127.0.0.1:PORT/0``."""

    def __init__(self, system: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(f"{system} needs redis-server (apt-get install redis-server)")
        self._dir = Path(tempfile.mkdtemp(prefix="rdq-bench-redis-"))
        port = _free_port()
        self._server = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self._dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                SETTINGS.appendfsync,
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._server.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{port}/0"

    def cpu_seconds(self) -> float:
        """CPU seconds the server (and any AOF rewrite child) has used so far."""
        return process_tree_cpu(self._server.pid)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self._server.terminate()
        self._server.wait(30)
        shutil.rmtree(self._dir, ignore_errors=True)

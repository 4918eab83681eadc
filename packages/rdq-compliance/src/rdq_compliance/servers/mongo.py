"""A throwaway MongoDB-protocol server for tests (see :mod:`rdq_compliance.servers`).

1. ``RDQ_TEST_MONGO_URL`` if set (a real ``mongod``, e.g. ``mongodb://127.0.0.1:27017``);
2. else **SecantusDB** (PyPI ``secantusdb``, a MongoDB-wire-protocol server over WiredTiger,
   a test-only dependency) started as a subprocess on a free loopback port, its data in a
   temporary directory removed afterwards;
3. else testcontainers ``mongo:7`` where a Docker engine answers;
4. else :class:`ServerUnavailable`.

:class:`SecantusProcess` is public so fault tests can stop and restart the server on the
same port and data directory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rdq_compliance.servers import ServerUnavailable

__all__ = ["SecantusProcess", "server_url"]

ENV_VAR = "RDQ_TEST_MONGO_URL"
_START_TIMEOUT = 60.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SecantusProcess:
    """A SecantusDB server in a child process, listening on ``127.0.0.1:port``, storing its
    data in ``data_dir``. ``stop()`` then ``start()`` restarts it on the same port and data."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        auth: bool = False,
        standalone: bool = False,
    ) -> None:
        """``auth``: require credentials (no user exists, so every login fails);
        ``standalone``: present as a standalone server, not a single-node replica set (so
        drivers refuse change streams, as with a standalone ``mongod``)."""
        self.data_dir = data_dir
        self.port = port or free_port()
        self.auth = auth
        self.standalone = standalone
        self._process: subprocess.Popen[bytes] | None = None
        self._log = data_dir.parent / f"secantus-{self.port}.log"

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs (fault tests freeze it with SIGSTOP)."""
        return None if self._process is None else self._process.pid

    @property
    def url(self) -> str:
        """The server's URL (direct connection: a single node, never a discovered set)."""
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self) -> None:
        """Start the server and wait until it answers; ``ServerUnavailable`` if it does not."""
        if self._process is not None:
            return
        command = [
            sys.executable,
            "-m",
            "secantus",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--storage-path",
            str(self.data_dir),
            "--log-level",
            "WARNING",
        ]
        if self.auth:
            command.append("--auth")
        if self.standalone:
            command.append("--standalone")
        with open(self._log, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir.parent,
            )
        self._wait_until_listening()

    def stop(self) -> None:
        """Stop the server cleanly (SIGTERM, then SIGKILL after a grace period)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        assert self._process is not None
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                self._process = None
                raise ServerUnavailable(
                    f"SecantusDB exited at start (code {code}): {self._log_tail()}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return
            time.sleep(0.1)
        self.stop()
        raise ServerUnavailable(f"SecantusDB did not listen within {_START_TIMEOUT:.0f}s")

    def _log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def server_url() -> Iterator[str]:
    """Yield the URL of an empty, reachable MongoDB-protocol server (see the module doc)."""
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        yield from_env
        return
    if importlib.util.find_spec("secantus") is not None:
        with tempfile.TemporaryDirectory(prefix="rdq-mongo-") as tmp:
            server = SecantusProcess(Path(tmp) / "data")
            server.data_dir.mkdir()
            server.start()
            try:
                yield server.url
            finally:
                server.stop()
        return
    with _container() as url:
        yield url


@contextlib.contextmanager
def _container() -> Iterator[str]:
    try:
        from testcontainers.mongodb import MongoDbContainer
    except ImportError:
        raise ServerUnavailable(
            f"set {ENV_VAR}, or install secantusdb (the rdq-mongo test extra), "
            "or testcontainers with a Docker engine"
        ) from None
    try:
        container = MongoDbContainer("mongo:7")
        container.start()
    except Exception as exc:  # Docker absent or refusing: say why
        raise ServerUnavailable(f"no SecantusDB and no Docker for testcontainers: {exc}") from exc
    try:
        yield container.get_connection_url()
    finally:
        container.stop()

"""A Redis server for tests: ``RDQ_TEST_REDIS_URL``, else a throwaway ``redis-server``, else
testcontainers.

``server_url()`` yields a ``redis://`` URL. The throwaway server listens on a free loopback
port, keeps no data on disk (``--save "" --appendonly no``), runs in a temporary directory and
is stopped afterwards. Tests share it and isolate themselves by queue name or key prefix.

:class:`RedisServer` is the building block, also used directly by tests that need a server
of their own (persistence on, a password, a memory limit, a restart).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rdq_compliance.servers import ServerUnavailable

__all__ = ["RedisServer", "server_url"]

ENV_VAR = "RDQ_TEST_REDIS_URL"
_START_TIMEOUT = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A ``redis-server`` process on 127.0.0.1, in its own data directory.

    ``args`` are extra ``redis-server`` options (``["--appendonly", "yes"]``); by default
    nothing is persisted. :meth:`kill` and :meth:`start` again keep the port and directory,
    so a test can restart the server and find what it persisted."""

    def __init__(self, args: Sequence[str] = (), *, binary: str | None = None) -> None:
        found = binary or shutil.which("redis-server")
        if found is None:
            raise ServerUnavailable("redis-server is not installed (Debian: redis-server)")
        self.binary = found
        self.args = list(args)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="rdq-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        """Start the server and wait until it answers; ``ServerUnavailable`` if it does not."""
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self.dir / "redis.log"),
            *self.args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = (
                    self.process.stderr.read().decode(errors="replace")
                    if self.process.stderr
                    else ""
                )
                raise ServerUnavailable(f"redis-server exited at start: {err}{self.log[-2000:]}")
            if _answers(self.port):
                return
            time.sleep(0.05)
        self.kill()
        raise ServerUnavailable(f"redis-server did not answer within {_START_TIMEOUT:.0f}s")

    def kill(self) -> None:
        """SIGKILL the server (no shutdown save) and wait for it to go."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        if process is not None and process.stderr is not None:
            process.stderr.close()

    def close(self) -> None:
        """Kill the server and remove its directory."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _answers(port: int) -> bool:
    """True once the server on ``port`` answers PING (with PONG or a NOAUTH refusal)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


@contextmanager
def server_url() -> Iterator[str]:
    """Yield the URL of a reachable Redis for a test session (see the module docstring)."""
    url = os.environ.get(ENV_VAR)
    if url:
        yield url
        return
    if shutil.which("redis-server"):
        with RedisServer() as server:
            yield server.url
        return
    with _container_url() as url:
        yield url


@contextmanager
def _container_url() -> Iterator[str]:
    try:
        from testcontainers.redis import RedisContainer
    except ImportError:
        raise ServerUnavailable(
            f"set {ENV_VAR}, install redis-server (Debian package), or install testcontainers"
        ) from None
    try:
        container = RedisContainer("redis:7-alpine").start()
    except Exception as exc:
        raise ServerUnavailable(f"testcontainers could not start Redis: {exc}") from None
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        yield f"redis://{host}:{port}/0"
    finally:
        container.stop()

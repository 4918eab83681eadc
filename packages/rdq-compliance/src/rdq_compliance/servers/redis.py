"""A Redis server for tests: ``RDQ_TEST_REDIS_URL``, else a throwaway ``redis-server``, else
testcontainers; and a Redis Cluster: ``RDQ_TEST_REDIS_CLUSTER_URL``, else three throwaway
cluster-mode ``redis-server`` processes joined by ``redis-cli --cluster create``.

``server_url()`` yields a ``redis://`` URL. The throwaway server listens on a free loopback
port, keeps no data on disk (``--save "" --appendonly no``), runs in a temporary directory and
is stopped afterwards. Tests share it and isolate themselves by queue name or key prefix.

:class:`RedisServer` is the building block, also used directly by tests that need a server
of their own (persistence on, a password, a memory limit, a restart).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rdq_compliance.servers import ServerUnavailable

__all__ = ["RedisCluster", "RedisSentinelSetup", "RedisServer", "cluster_url", "server_url"]

ENV_VAR = "RDQ_TEST_REDIS_URL"
CLUSTER_ENV_VAR = "RDQ_TEST_REDIS_CLUSTER_URL"
_START_TIMEOUT = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 45000)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise ServerUnavailable("no free port pair for a cluster node")


class RedisServer:
    """A ``redis-server`` process on 127.0.0.1, in its own data directory.

    ``args`` are extra ``redis-server`` options (``["--appendonly", "yes"]``); by default
    nothing is persisted. :meth:`kill` and :meth:`start` again keep the port and directory,
    so a test can restart the server and find what it persisted."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        binary: str | None = None,
        port: int | None = None,
        config: str | None = None,
    ) -> None:
        found = binary or shutil.which("redis-server")
        if found is None:
            raise ServerUnavailable("redis-server is not installed (Debian: redis-server)")
        self.binary = found
        self.args = list(args)
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="rdq-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.config_file: Path | None = None
        if config is not None:  # a config file of its own (a Sentinel rewrites it)
            self.config_file = self.dir / "redis.conf"
            self.config_file.write_text(config)

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
            *([str(self.config_file)] if self.config_file else []),
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


class RedisSentinelSetup:
    """A primary, one replica and one Sentinel watching them as ``mymaster`` (quorum 1,
    down-after 1 s), for tests of Sentinel discovery and failover. ``url`` names the Sentinel
    with rdq's ``sentinel_master`` option."""

    MASTER = "mymaster"

    def __init__(self, args: Sequence[str] = ()) -> None:
        self.primary = RedisServer(args)
        self.replica = RedisServer([*args, "--replicaof", "127.0.0.1", str(self.primary.port)])
        self.sentinel = RedisServer(
            ["--sentinel"],
            config=(
                f"sentinel monitor {self.MASTER} 127.0.0.1 {self.primary.port} 1\n"
                f"sentinel down-after-milliseconds {self.MASTER} 1000\n"
                f"sentinel failover-timeout {self.MASTER} 5000\n"
            ),
        )

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.sentinel.port}/0?sentinel_master={self.MASTER}"

    def master_port(self) -> int | None:
        """The port the Sentinel currently names as the master (None if it cannot say)."""
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ServerUnavailable("redis-cli is not installed (Debian: redis-tools)")
        reply = subprocess.run(
            [cli, "-p", str(self.sentinel.port), "sentinel", "get-master-addr-by-name",
             self.MASTER],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        lines = reply.stdout.split()
        return int(lines[1]) if len(lines) == 2 and lines[1].isdigit() else None

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        self.sentinel.start()

    def close(self) -> None:
        self.sentinel.close()
        self.replica.close()
        self.primary.close()

    def __enter__(self) -> RedisSentinelSetup:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisCluster:
    """Three cluster-mode ``redis-server`` primaries (no replicas) on loopback ports, their
    16384 slots assigned by ``redis-cli --cluster create``. ``url`` names the first node and
    carries rdq's ``cluster=true`` option."""

    def __init__(self, nodes: int = 3) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ServerUnavailable("redis-cli is not installed (Debian: redis-tools)")
        self.cli = cli
        self.nodes = [
            RedisServer(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ],
                port=free_cluster_port(),
            )
            for _ in range(nodes)
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0?cluster=true"

    def start(self) -> None:
        """Start the nodes, assign the slots and wait until every node reports the cluster
        ok; ``ServerUnavailable`` if that fails."""
        for node in self.nodes:
            node.start()
        create = subprocess.run(
            [
                self.cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if create.returncode != 0:
            self.close()
            raise ServerUnavailable(f"redis-cli --cluster create failed: {create.stdout[-2000:]}")
        deadline = time.monotonic() + _START_TIMEOUT
        while not all(self._ok(node) for node in self.nodes):
            if time.monotonic() > deadline:
                self.close()
                raise ServerUnavailable("the test Redis Cluster never reported cluster_state:ok")
            time.sleep(0.1)

    def _ok(self, node: RedisServer) -> bool:
        info = subprocess.run(
            [self.cli, "-p", str(node.port), "cluster", "info"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return "cluster_state:ok" in info.stdout

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> RedisCluster:
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


@contextmanager
def cluster_url() -> Iterator[str]:
    """Yield the URL of a reachable Redis Cluster (``cluster=true`` set) for a test session."""
    url = os.environ.get(CLUSTER_ENV_VAR)
    if url:
        yield url
        return
    if not shutil.which("redis-server"):
        raise ServerUnavailable(f"set {CLUSTER_ENV_VAR} or install redis-server (Debian package)")
    with RedisCluster() as cluster:
        yield cluster.url

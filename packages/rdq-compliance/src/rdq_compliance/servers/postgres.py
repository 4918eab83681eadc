"""A PostgreSQL server for tests: the environment's, a throwaway local cluster, or a container.

``server_url()`` yields ``postgresql://postgres:PASSWORD@127.0.0.1:PORT/postgres``:

1. ``RDQ_TEST_POSTGRES_URL`` if set;
2. else a throwaway cluster built with the local ``initdb``/``pg_ctl`` (on ``PATH`` or under
   ``/usr/lib/postgresql/*/bin``) in a temporary directory, listening on 127.0.0.1 only, on a
   free port, durable (``fsync`` on, as users run it). ``initdb`` refuses to run as root, so
   under root the binaries run as the ``postgres`` user (``runuser``) and the directory is
   handed to that user;
3. else a testcontainers PostgreSQL where a Docker engine answers;
4. else :class:`~rdq_compliance.servers.ServerUnavailable`.

Why not pytest-postgresql (and mirakuru under it): its process fixture runs ``initdb``/``pg_ctl``
as the current user, so it cannot work as root; it is a pytest fixture factory rather than a
context manager the benchmark and chaos runner can use outside pytest; and it needs psycopg.
The cluster logic here is ~150 lines with no dependency, and the restart test needs
:meth:`LocalCluster.restart`, which it does not offer.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rdq_compliance.servers import ServerUnavailable

__all__ = ["LocalCluster", "find_bindir", "server_url"]

ENV_VAR = "RDQ_TEST_POSTGRES_URL"
_SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": "200",
    "shared_buffers": "128MB",
    "fsync": "on",
    "synchronous_commit": "on",
    "log_min_messages": "warning",
}


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(os.path.realpath(initdb)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
        reverse=True,
    )
    for candidate in candidates:
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LocalCluster:
    """A throwaway PostgreSQL cluster in a temporary directory (start, restart, stop)."""

    def __init__(self, bindir: Path, *, settings: dict[str, str] | None = None) -> None:
        self.bindir = bindir
        self.password = secrets.token_hex(8)
        self.settings = {**_SERVER_SETTINGS, **(settings or {})}
        self.port = 0
        self._dir: Path | None = None
        self._prefix: list[str] = []

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    @property
    def datadir(self) -> Path:
        assert self._dir is not None, "the cluster is not initialised"
        return self._dir / "data"

    def _run(self, *args: str, timeout: float = 120) -> None:
        result = subprocess.run(
            [*self._prefix, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            log = self._log_tail()
            raise ServerUnavailable(
                f"{Path(args[0]).name} failed ({result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}{log}"
            )

    def _log_tail(self) -> str:
        if self._dir is None:
            return ""
        log = self._dir / "server.log"
        with contextlib.suppress(OSError):
            return "\nserver log:\n" + "\n".join(log.read_text().splitlines()[-20:])
        return ""

    def init(self) -> None:
        """Create the cluster directory with ``initdb`` (password auth over TCP)."""
        self._dir = Path(tempfile.mkdtemp(prefix="rdq-pg-"))
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise ServerUnavailable(
                    "running as root and there is no 'postgres' user to run initdb as"
                ) from None
            runuser = shutil.which("runuser")
            if runuser is None:
                raise ServerUnavailable("running as root and runuser is not available")
            os.chown(self._dir, user.pw_uid, user.pw_gid)
            self._prefix = [runuser, "-u", "postgres", "--"]
        pwfile = self._dir / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-instructions",
        )

    def start(self) -> None:
        """Start the server (on a new free port the first time) and wait until it accepts."""
        if self._dir is None:
            self.init()
        assert self._dir is not None
        if not self.port:
            self.port = _free_port()
        options = " ".join(f"-c {key}={value}" for key, value in self.settings.items())
        options += f" -p {self.port} -k {self._dir}"
        self._run(
            str(self.bindir / "pg_ctl"),
            "start",
            "-w",
            "-t",
            "120",
            "-D",
            str(self.datadir),
            "-l",
            str(self._dir / "server.log"),
            "-o",
            options,
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back open transactions, checkpoint, exit)."""
        if self._dir is None or not (self.datadir / "postmaster.pid").exists():
            return
        self._run(str(self.bindir / "pg_ctl"), "stop", "-w", "-m", mode, "-D", str(self.datadir))

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port (clients see their connections drop)."""
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        """Stop the server and remove its directory."""
        try:
            with contextlib.suppress(ServerUnavailable, subprocess.TimeoutExpired):
                self.stop("fast")
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


@contextlib.contextmanager
def _container() -> Iterator[str]:
    try:
        from testcontainers.postgres import PostgresContainer
    except ImportError:
        raise ServerUnavailable("testcontainers is not installed") from None
    try:
        container = PostgresContainer("postgres:16-alpine", driver=None)
        container.start()
    except Exception as exc:
        raise ServerUnavailable(f"no Docker engine for testcontainers: {exc}") from None
    try:
        yield container.get_connection_url()
    finally:
        container.stop()


@contextlib.contextmanager
def server_url() -> Iterator[str]:
    """Yield the URL of a reachable PostgreSQL server; see the module docstring."""
    env = os.environ.get(ENV_VAR)
    if env:
        yield env
        return
    bindir = find_bindir()
    if bindir is not None:
        with LocalCluster(bindir) as cluster:
            yield cluster.url
        return
    try:
        with _container() as url:
            yield url
    except ServerUnavailable as exc:
        raise ServerUnavailable(
            f"{ENV_VAR} is not set, no initdb/pg_ctl on PATH or under /usr/lib/postgresql, "
            f"and {exc}"
        ) from None

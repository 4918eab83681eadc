"""``rediss://``: TLS to a real redis-server with a throwaway CA."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdq import open_storage
from rdq.errors import StorageUnavailable
from rdq.spi import Envelope
from rdq_compliance.servers import ServerUnavailable
from rdq_compliance.servers.redis import RedisServer, free_port


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=120)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[RedisServer, int, Path]]:
    """A redis-server with TLS on a second port, its certificate signed by a fresh CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make test certificates")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "1", "-subj", "/CN=rdq-test-ca", cwd=tmp_path)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
             "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=tmp_path)  # fmt: skip
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf",
             cwd=tmp_path)  # fmt: skip
    tls_port = free_port()
    try:
        server = RedisServer(
            [
                "--tls-port", str(tls_port),
                "--tls-cert-file", str(tmp_path / "server.pem"),
                "--tls-key-file", str(tmp_path / "server.key"),
                "--tls-ca-cert-file", str(tmp_path / "ca.pem"),
                "--tls-auth-clients", "no",
            ]
        )  # fmt: skip
        server.start()
    except ServerUnavailable as exc:
        pytest.skip(f"this redis-server cannot serve TLS: {exc}")
    try:
        yield server, tls_port, tmp_path / "ca.pem"
    finally:
        server.close()


@pytest.mark.asyncio
async def test_rediss_stores_tasks_over_tls(tls_server: tuple[RedisServer, int, Path]) -> None:
    _, port, ca = tls_server
    async with open_storage(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}") as store:
        task = Envelope(id="over-tls", queue="q", handler_ref="h")
        assert await store.enqueue(task) is True
        assert (await store.get(task.id)).id == task.id


@pytest.mark.asyncio
async def test_rediss_refuses_a_certificate_it_cannot_verify(
    tls_server: tuple[RedisServer, int, Path],
) -> None:
    _, port, _ = tls_server
    with pytest.raises(StorageUnavailable, match=f"127.0.0.1:{port}.*certificate verify failed"):
        async with open_storage(f"rediss://127.0.0.1:{port}/0"):
            pass

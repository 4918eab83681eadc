"""Fixtures for the server tests: a scripted local HTTP receiver for callbacks, and stores."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest
import pytest_asyncio
import uvicorn
from litestar import Litestar
from litestar.testing import AsyncTestClient

from rdq.audit import MemoryAuditSink
from rdq.server import ServerSettings, TokenSpec, create_app
from rdq_compliance.testing import eventually
from rdq_memory import MemoryStorage


@dataclass
class Reply:
    """What the receiver answers: status, headers, body. ``hold``: answer only once the test
    calls :meth:`Receiver.release` (a receiver that has gone silent)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    hold: bool = False


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """A real HTTP server on 127.0.0.1 that records every request and answers from a script
    per path (the last reply of a script repeats)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Received] = []
        self._scripts: dict[str, deque[Reply]] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                reply = receiver._record(self.path, dict(self.headers.items()), body)
                if reply.hold:
                    receiver._released.wait()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(reply.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._scripts[path] = deque(replies)

    def received(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _record(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        with self._lock:
            self.requests.append(Received(path, headers, body))
            script = self._scripts.get(path)
            if not script:
                return Reply()
            return script.popleft() if len(script) > 1 else script[0]

    def release(self) -> None:
        """Let every held reply go out (and every later one at once)."""
        self._released.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- a node over the in-memory store --------------------------------------------------------

ADMIN_TOKEN = "admin-token-0123456789"
READ_TOKEN = "read-token-0123456789ab"
SUBMIT_TOKEN = "submit-token-0123456789"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def node_settings(**overrides: object) -> ServerSettings:
    values: dict[str, object] = {
        "tokens": [
            TokenSpec(owner="alice", rights=["read", "submit", "admin"], token=ADMIN_TOKEN),
            TokenSpec(owner="reader", rights=["read"], token=READ_TOKEN),
            TokenSpec(owner="producer", rights=["submit"], token=SUBMIT_TOKEN),
        ],
        "queues": ["default"],
        "work": False,
        "secure_cookies": False,  # the test client speaks plain HTTP to "testserver.local"
    }
    values.update(overrides)
    return msgspec.convert(values, ServerSettings, from_attributes=True)


@pytest_asyncio.fixture
async def memory_store() -> AsyncIterator[MemoryStorage]:
    async with MemoryStorage() as store:
        yield store


@pytest_asyncio.fixture
async def audit_sink() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest_asyncio.fixture
async def client(
    memory_store: MemoryStorage, audit_sink: MemoryAuditSink
) -> AsyncIterator[AsyncTestClient[Litestar]]:
    app = create_app(node_settings(), storage=memory_store, audit_sinks=[audit_sink])
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


# --- a real node over HTTP -------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_node(app: Litestar) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port; yield its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(600):
            if server.started or task.done():
                break
            await asyncio.sleep(0.05)
        if task.done():
            task.result()
        assert server.started, "the node did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=60)
        sock.close()


async def wait_until(
    check: Callable[[], Awaitable[bool]], timeout: float = 60.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it is true; fail after ``timeout`` seconds (generous: the machine
    is small and shared)."""
    await eventually(check, what, timeout, interval=0.1)

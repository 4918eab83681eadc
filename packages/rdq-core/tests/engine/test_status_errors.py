"""The HTTP errors of the well-known clients, raised for real against a local HTTP server, are
classified by their status (rdq.retry._status): 408, 429, 502, 503 and 504 are outage-class,
500 and the other statuses are not, and a ``Retry-After`` is honoured. Then a handler calling
a service that answers 503 with ``raise_for_status()``, the way most handlers call a service,
costs its tasks nothing while the service is down."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import aiohttp
import httpx
import pytest
import requests

import rdq
from rdq import retry
from rdq.spi import Status

OUTAGE = [408, 429, 502, 503, 504]
NOT_OUTAGE = [400, 404, 409, 422, 425, 500, 501]


class Server:
    """A local HTTP server answering every POST and GET with ``status`` (and ``headers``)."""

    def __init__(self) -> None:
        self.status = 200
        self.headers: dict[str, str] = {}
        self.calls: Counter[int] = Counter()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                status = outer.status
                outer.calls[status] += 1
                self.send_response(status)
                for name, value in outer.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()


def httpx_error(url: str) -> BaseException:
    try:
        httpx.get(url).raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("no error")


def requests_error(url: str) -> BaseException:
    try:
        requests.get(url, timeout=5).raise_for_status()
    except requests.HTTPError as exc:
        return exc
    raise AssertionError("no error")


def aiohttp_error(url: str) -> BaseException:
    async def call() -> BaseException:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            try:
                response.raise_for_status()
            except aiohttp.ClientResponseError as exc:
                return exc
        raise AssertionError("no error")

    return asyncio.run(call())


def urllib_error(url: str) -> BaseException:
    try:
        urllib.request.urlopen(url, timeout=5)
    except urllib.error.HTTPError as exc:
        return exc
    raise AssertionError("no error")


CLIENTS: dict[str, Callable[[str], BaseException]] = {
    "httpx": httpx_error,
    "requests": requests_error,
    "aiohttp": aiohttp_error,
    "urllib": urllib_error,
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("status", OUTAGE)
def test_a_status_that_says_the_service_cannot_answer_now_is_outage_class(
    server: Server, client: str, status: int
) -> None:
    server.status, server.headers = status, {}
    exc = CLIENTS[client](server.url)
    assert retry.is_outage(exc), f"{client} {status}"
    decision = retry.classify_error(exc, 1, rdq.QueueConfig())
    assert decision.outage and decision.action is retry.Action.RESCHEDULE


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("status", NOT_OUTAGE)
def test_500_and_the_other_statuses_are_ordinary_failures(
    server: Server, client: str, status: int
) -> None:
    server.status, server.headers = status, {}
    exc = CLIENTS[client](server.url)
    assert not retry.is_outage(exc), f"{client} {status}"
    decision = retry.classify_error(exc, 1, rdq.QueueConfig())
    assert not decision.outage and decision.action is retry.Action.RESCHEDULE


def test_a_queue_that_lists_the_error_type_makes_any_status_outage_class(server: Server) -> None:
    server.status, server.headers = 500, {}
    exc = httpx_error(server.url)
    assert retry.is_outage(exc, (httpx.HTTPStatusError,))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_retry_after_is_honoured(server: Server, client: str) -> None:
    server.status, server.headers = 429, {"Retry-After": "120"}
    exc = CLIENTS[client](server.url)
    config = rdq.QueueConfig(backoff=rdq.Backoff.fixed(1.0))
    decision = retry.classify_error(exc, 1, config)
    assert decision.delay == 120.0, "not before the service said"
    assert decision.retry_after == 120.0, "adaptive rate limits are lowered for it too"


def test_status_bearing_errors_of_clients_that_are_not_imported_are_read_by_shape() -> None:
    """botocore's and gRPC's errors, as their libraries build them (duck-typed here: neither
    is a dependency of rdq, and rdq imports neither)."""

    def named(module: str, name: str, base: type[BaseException] = Exception) -> type:
        return type(name, (base,), {"__module__": module})

    client_error = named("botocore.exceptions", "ClientError")
    throttled = client_error()
    throttled.response = {  # type: ignore[attr-defined]
        "Error": {"Code": "ThrottlingException"},
        "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": {"retry-after": "3"}},
    }
    assert retry.is_outage(throttled)
    assert retry.status_failure(throttled) == retry.StatusFailure(
        retry.StatusClass.OUTAGE, 429, 3.0
    )
    bad_request = client_error()
    bad_request.response = {  # type: ignore[attr-defined]
        "Error": {"Code": "ValidationException"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    assert not retry.is_outage(bad_request)

    code = type("StatusCode", (), {})
    rpc_error = named("grpc", "RpcError")
    for name, outage in [
        ("UNAVAILABLE", True),
        ("DEADLINE_EXCEEDED", True),
        ("RESOURCE_EXHAUSTED", True),
        ("INVALID_ARGUMENT", False),
        ("NOT_FOUND", False),
    ]:
        status = code()
        status.name = name  # type: ignore[attr-defined]
        call = rpc_error()
        call.code = lambda status=status: status  # type: ignore[attr-defined]
        assert retry.is_outage(call) is outage, name


@pytest.mark.asyncio
async def test_a_service_answering_503_costs_its_tasks_nothing(server: Server) -> None:
    """Tasks whose handler does ``response.raise_for_status()`` on httpx against a service
    answering 503: the breaker trips, none is dead-lettered, every task succeeds once the
    service answers again, and none has used an attempt for the outage."""
    server.status, server.headers = 503, {}
    server.calls.clear()
    app = rdq.App()
    app.queue(
        "shop",
        max_attempts=3,
        backoff=rdq.Backoff.fixed(0.1),
        breaker=rdq.Breaker(cooldown=0.5, max_cooldown=1.0, ramp=0.5),
    )

    @app.handler("notify", queue="shop")
    async def notify(payload: object) -> None:
        async with httpx.AsyncClient() as http:
            response = await http.post(server.url, json=payload)
            response.raise_for_status()

    async with rdq.open_storage("memory://status-errors") as storage:
        await storage.migrate()
        await rdq.Client(storage, app).submit_many(
            [rdq.Submission("notify", {"n": i}) for i in range(40)]
        )
        worker = rdq.Worker(app, storage, maintenance=False, poll_min=0.02, poll_max=0.1)
        running = asyncio.create_task(worker.run())
        try:
            for _ in range(600):  # until the breaker trips (however slow the machine)
                if any(rdq.flow.breaker_of(c).trips for c in await storage.list_controls("shop")):
                    break
                await asyncio.sleep(0.05)
            server.status = 200  # the service is back
            for _ in range(300):
                stats = await storage.stats("shop")
                if stats.pending == 0 and stats.in_flight == 0:
                    break
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await running
        stats = await storage.stats("shop")
        (control,) = await storage.list_controls("shop")
        tasks, _ = await storage.list_tasks(
            "shop",
            rdq.spi.TaskFilter(status=Status.SUCCEEDED),
            rdq.spi.Page(limit=100, include_attempts=True),
        )
    assert stats.dlq_depth == 0 and stats.succeeded == 40
    assert server.calls[503] <= 30, f"{server.calls[503]} calls reached the dead service"
    outages = rdq.flow.breaker_of(control).outages
    charged = Counter(retry.attempts_used(t, t.attempt_count, outages) for t in tasks)
    assert charged == {1: 40}, charged
    assert any(a.error_type == "httpx.HTTPStatusError" for t in tasks for a in t.attempts)
    assert timedelta(0) <= outages[-1].end - outages[-1].start  # type: ignore[operator]

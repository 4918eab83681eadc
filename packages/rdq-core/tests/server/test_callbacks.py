"""The HTTP callback invoker against a real local receiver: signing, classification, SSRF."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import structlog

from rdq import Permanent, RetryAfter
from rdq.callbacks import (
    CallbackBlocked,
    CallbackFailed,
    CallbackRejected,
    CallbackSettings,
    CallbackTimeout,
    CallbackUnreachable,
    parse_retry_after,
    verify,
)
from rdq.errors import ConfigError
from rdq.server import HttpCallbackInvoker
from rdq.spi import Envelope, envelope_from_builtins

from .conftest import Receiver, Reply

SECRET = "s3cret-signing-key-0123"
LOCAL = CallbackSettings(
    allow_hosts=["127.0.0.1", "localhost", "hooks.example.test"],
    allow_networks=["127.0.0.0/8"],
    secrets=[SECRET],
    timeout=60.0,  # a local receiver answers at once; this only bounds a broken test
)


def _task(url: str, queue: str = "hooks") -> Envelope:
    return envelope_from_builtins(
        {"id": "t1", "queue": queue, "handler_ref": url, "payload": {"n": 1}, "future": "kept"}
    )


@pytest_asyncio.fixture
async def invoker() -> AsyncIterator[HttpCallbackInvoker]:
    inv = HttpCallbackInvoker(LOCAL)
    yield inv
    await inv.aclose()


@pytest.mark.asyncio
async def test_success_posts_the_signed_envelope(
    invoker: HttpCallbackInvoker, receiver: Receiver
) -> None:
    await invoker(_task(receiver.url()))
    (request,) = receiver.received("/hook")
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["x-rdq-task-id"] == "t1"
    assert verify([SECRET], headers["x-rdq-signature"], headers["x-rdq-timestamp"], request.body)
    assert not verify(
        ["another-secret-000000"],
        headers["x-rdq-signature"],
        headers["x-rdq-timestamp"],
        request.body,
    )
    assert not verify(
        [SECRET], headers["x-rdq-signature"], headers["x-rdq-timestamp"], request.body + b" "
    )
    body = json.loads(request.body)
    assert body["payload"] == {"n": 1} and body["future"] == "kept"


def test_a_stale_timestamp_fails_verification() -> None:
    from rdq.callbacks import sign

    body = b"{}"
    signature = f"v1={sign(SECRET, 1_000, body)}"
    assert verify([SECRET], signature, "1000", body, now=1_100)
    assert not verify([SECRET], signature, "1000", body, now=1_000 + 301)
    assert not verify([SECRET], signature, "not-a-number", body)


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [500, 502, 503, 408, 425, 429])
async def test_retryable_statuses_raise_callback_failed(
    invoker: HttpCallbackInvoker, receiver: Receiver, status: int
) -> None:
    receiver.script("/hook", Reply(status=status, body=b"try later"))
    with pytest.raises(CallbackFailed, match=f"HTTP {status}: try later"):
        await invoker(_task(receiver.url()))


@pytest.mark.asyncio
async def test_retry_after_seconds_and_http_date_are_honoured(
    invoker: HttpCallbackInvoker, receiver: Receiver
) -> None:
    receiver.script("/hook", Reply(status=503, headers={"Retry-After": "7"}))
    with pytest.raises(RetryAfter) as info:
        await invoker(_task(receiver.url()))
    assert info.value.delay == timedelta(seconds=7)
    assert isinstance(info.value.__cause__, CallbackFailed)
    when = datetime.now(UTC) + timedelta(seconds=120)
    receiver.script(
        "/hook", Reply(status=429, headers={"Retry-After": format_datetime(when, True)})
    )
    with pytest.raises(RetryAfter) as info:
        await invoker(_task(receiver.url()))
    assert timedelta(seconds=60) < info.value.delay <= timedelta(seconds=121)


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [400, 401, 404, 410, 422, 302])
async def test_other_statuses_are_permanent(
    invoker: HttpCallbackInvoker, receiver: Receiver, status: int
) -> None:
    receiver.script("/hook", Reply(status=status, headers={"Location": "http://10.0.0.1/"}))
    with pytest.raises(Permanent) as info:
        await invoker(_task(receiver.url()))
    assert isinstance(info.value.__cause__, CallbackRejected)
    assert len(receiver.received("/hook")) == 1, "redirects are not followed"


@pytest.mark.asyncio
async def test_a_slow_receiver_times_out_with_the_queue_timeout(receiver: Receiver) -> None:
    settings = CallbackSettings(
        allow_hosts=["127.0.0.1"],
        allow_networks=["127.0.0.1/32"],
        timeout=600.0,
        queue_timeouts={"fast": 0.3},
    )
    inv = HttpCallbackInvoker(settings)
    receiver.script("/slow", Reply(hold=True))  # never answers while the call waits
    try:
        # The outer bound only matters if the queue's timeout is ignored (the default, 600 s,
        # would apply); the message names the timeout that fired.
        with pytest.raises(CallbackTimeout, match=r"within 0\.3s"):
            await asyncio.wait_for(inv(_task(receiver.url("/slow"), queue="fast")), 60)
    finally:
        receiver.release()
        await inv.aclose()
    assert len(receiver.received("/slow")) == 1


@pytest.mark.asyncio
async def test_a_closed_port_is_unreachable(invoker: HttpCallbackInvoker) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CallbackUnreachable):
        await invoker(_task(f"http://127.0.0.1:{port}/hook"))


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("settings", "host"),
    [
        (CallbackSettings(allow_hosts=[]), "127.0.0.1"),  # nothing allowed by default
        (CallbackSettings(allow_hosts=["127.0.0.1"]), "127.0.0.1"),  # loopback refused
        (CallbackSettings(allow_hosts=["localhost"]), "localhost"),  # after real DNS
        (CallbackSettings(allow_hosts=["*"]), "[::ffff:127.0.0.1]"),  # v4-mapped loopback
        (CallbackSettings(allow_hosts=["*"], allow_networks=["10.0.0.0/8"]), "127.0.0.1"),
    ],
)
async def test_ssrf_guard_refuses_without_calling(
    receiver: Receiver, settings: CallbackSettings, host: str
) -> None:
    inv = HttpCallbackInvoker(settings)
    try:
        with pytest.raises(Permanent) as info:
            await inv(_task(f"http://{host}:{receiver.port}/hook"))
    finally:
        await inv.aclose()
    assert isinstance(info.value.__cause__, CallbackBlocked)
    # Control: a call the guard lets through reaches this receiver and is recorded, so the
    # refused one would have been seen had it been sent.
    allowed = HttpCallbackInvoker(LOCAL)
    try:
        await allowed(_task(receiver.url("/control")))
    finally:
        await allowed.aclose()
    assert [r.path for r in receiver.requests] == ["/control"]


@pytest.mark.asyncio
async def test_the_checked_address_is_the_one_connected_to(receiver: Receiver) -> None:
    """A name is resolved once; the request goes to that address with the original Host."""
    answers = iter([["127.0.0.1"], ["93.184.216.34"]])

    async def resolver(host: str, port: int) -> list[str]:
        return next(answers)

    inv = HttpCallbackInvoker(LOCAL, resolver=resolver)
    try:
        await inv(_task(f"http://hooks.example.test:{receiver.port}/hook"))
    finally:
        await inv.aclose()
    (request,) = receiver.received("/hook")
    assert request.headers["Host"] == f"hooks.example.test:{receiver.port}"


@pytest.mark.asyncio
async def test_a_name_resolving_to_any_refused_address_is_refused(receiver: Receiver) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "169.254.169.254"]

    inv = HttpCallbackInvoker(CallbackSettings(allow_hosts=["*.example.test"]), resolver=resolver)
    try:
        with structlog.testing.capture_logs() as logs, pytest.raises(Permanent) as info:
            await inv(_task(f"http://hooks.example.test:{receiver.port}/hook"))
    finally:
        await inv.aclose()
    # The stored message (readable by every DLQ reader) does not map the internal network;
    # the node's log names the address for its operator.
    assert "non-public address" in str(info.value)
    assert "169.254" not in str(info.value) and "93.184" not in str(info.value)
    assert [e["address"] for e in logs if e["event"] == "callback blocked"] == ["169.254.169.254"]


def test_wildcards_match_subdomains_only() -> None:
    settings = CallbackSettings(allow_hosts=["*.example.com", "exact.org"])
    assert settings.host_allowed("a.example.com")
    assert settings.host_allowed("A.B.Example.COM.")
    assert not settings.host_allowed("example.com")
    assert not settings.host_allowed("evilexample.com")
    assert settings.host_allowed("exact.org")
    assert not settings.host_allowed("sub.exact.org")


def test_bad_settings_name_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        CallbackSettings(allow_networks=["not-a-net"])
    assert info.value.key == "allow_networks[0]"
    with pytest.raises(ConfigError) as info:
        CallbackSettings(queue_timeouts={"q": -1.0})
    assert info.value.key == "queue_timeouts.q"
    with pytest.raises(ConfigError):
        CallbackSettings(secrets=["short"])


def test_parse_retry_after() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after("Thu, 01 Jan 2026 00:01:00 GMT", now) == 60.0
    assert parse_retry_after("Wed, 31 Dec 2025 00:00:00 GMT", now) == 0.0
    assert parse_retry_after("99999999", now) == 86_400.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


def _certificate(directory: Path, host: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``host`` made with the openssl command."""
    cert, key = directory / f"{host}.pem", directory / f"{host}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            f"/CN={host}",
            "-addext",
            f"subjectAltName=DNS:{host}",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return cert, key


@pytest.mark.asyncio
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
@pytest.mark.parametrize(
    ("cert_host", "ok"), [("hooks.example.test", True), ("other.example.test", False)]
)
async def test_https_to_a_pinned_address_keeps_sni_and_certificate_checks(
    tmp_path: Path, cert_host: str, ok: bool
) -> None:
    cert, key = _certificate(tmp_path, cert_host)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    tls_receiver = Receiver(tls=server_tls)
    tls_receiver.start()

    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    client = httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cert)))
    inv = HttpCallbackInvoker(LOCAL, client=client, resolver=resolver)
    url = f"https://hooks.example.test:{tls_receiver.port}/hook"
    try:
        if ok:
            await inv(_task(url))
            (request,) = tls_receiver.received("/hook")
            assert request.headers["Host"] == f"hooks.example.test:{tls_receiver.port}"
        else:
            with pytest.raises(CallbackUnreachable):
                await inv(_task(url))
            assert tls_receiver.requests == []
    finally:
        await inv.aclose()
        tls_receiver.stop()

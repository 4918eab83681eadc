"""The SSRF guard judges an IPv4 address carried inside an IPv6 one as that IPv4 address.

Each form is tried the two ways a callback reaches it — an IP literal in the URL and a name
whose DNS answer is the address (what DNS64 hands out) — through the node's invoker. The
transport records what would have gone on the wire, so a refused call is one never sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
import pytest
import pytest_asyncio
import structlog

from rdq import Permanent
from rdq.callbacks import CallbackBlocked, CallbackSettings
from rdq.server import HttpCallbackInvoker
from rdq.spi import Envelope, envelope_from_builtins

METADATA = "169.254.169.254"
# (form, the IPv6 address carrying 169.254.169.254 — or 127.0.0.1 — and what it carries)
REFUSED = [
    ("ipv4-mapped", "::ffff:a9fe:a9fe", [METADATA]),
    ("ipv4-translated", "::ffff:0:a9fe:a9fe", [METADATA]),
    ("ipv4-compatible", "::127.0.0.1", ["127.0.0.1"]),
    ("nat64-well-known", "64:ff9b::a9fe:a9fe", [METADATA]),
    # Local use: the IPv4 address sits where the local prefix length (/48, /56, /64 or /96)
    # puts it, so every placement is judged. Here the /96 one ...
    ("nat64-local-use-96", "64:ff9b:1::a9fe:a9fe", ["0.0.0.0", "0.0.0.169", METADATA]),
    # ... and here the /48 one, with a public address in the last 32 bits.
    (
        "nat64-local-use-48",
        "64:ff9b:1:a9fe:a9:fe00:5db8:d822",
        [METADATA, "254.169.254.0", "169.254.0.93", "93.184.216.34"],
    ),
    ("6to4", "2002:a9fe:a9fe::", [METADATA]),
    ("teredo", "2001:0:a9fe:a9fe::", None),
]
PUBLIC_V4 = "93.184.216.34"
# The same forms carrying a public address: delivered, to the very address checked.
DELIVERED = [
    ("ipv4-mapped", "::ffff:5db8:d822"),
    ("ipv4-translated", "::ffff:0:5db8:d822"),
    ("ipv4-compatible", "::93.184.216.34"),
    ("nat64-well-known", "64:ff9b::5db8:d822"),
    ("6to4", "2002:5db8:d822::1"),
]


@dataclass
class Wire:
    """An httpx transport that answers 200 and records every request it was handed."""

    sent: list[httpx.Request] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return httpx.Response(200)


@pytest.fixture
def wire() -> Wire:
    return Wire()


@pytest.fixture
def make_invoker(wire: Wire) -> Callable[..., HttpCallbackInvoker]:
    def make(settings: CallbackSettings, answer: str | None = None) -> HttpCallbackInvoker:
        async def resolver(host: str, port: int) -> list[str]:
            assert answer is not None
            return [answer]

        client = httpx.AsyncClient(transport=httpx.MockTransport(wire.handle))
        return HttpCallbackInvoker(settings, client=client, resolver=resolver)

    return make


@pytest_asyncio.fixture
async def closing() -> AsyncIterator[list[HttpCallbackInvoker]]:
    invokers: list[HttpCallbackInvoker] = []
    yield invokers
    for invoker in invokers:
        await invoker.aclose()


def _task(url: str) -> Envelope:
    return envelope_from_builtins(
        {"id": "t1", "queue": "hooks", "handler_ref": url, "payload": {"n": 1}}
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("via", ["literal", "dns"])
@pytest.mark.parametrize(("form", "address", "carries"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_an_embedded_non_public_ipv4_is_refused_without_calling(
    wire: Wire,
    make_invoker: Callable[..., HttpCallbackInvoker],
    closing: list[HttpCallbackInvoker],
    via: str,
    form: str,
    address: str,
    carries: list[str] | None,
) -> None:
    settings = CallbackSettings(allow_hosts=["*"])
    if via == "literal":
        invoker, url = make_invoker(settings), f"http://[{address}]:1/hook"
    else:
        invoker, url = make_invoker(settings, answer=address), "http://hooks.example.test/hook"
    closing.append(invoker)
    with structlog.testing.capture_logs() as logs, pytest.raises(Permanent) as info:
        await invoker(_task(url))
    assert isinstance(info.value.__cause__, CallbackBlocked)
    assert wire.sent == []
    # The node's log names what the address carries (Teredo: refused as such).
    (blocked,) = [e for e in logs if e["event"] == "callback blocked"]
    assert blocked.get("carries") == carries


@pytest.mark.asyncio
@pytest.mark.parametrize(("form", "address"), DELIVERED, ids=[d[0] for d in DELIVERED])
async def test_an_embedded_public_ipv4_is_delivered_to_the_checked_address(
    wire: Wire,
    make_invoker: Callable[..., HttpCallbackInvoker],
    closing: list[HttpCallbackInvoker],
    form: str,
    address: str,
) -> None:
    invoker = make_invoker(CallbackSettings(allow_hosts=["*"]), answer=address)
    closing.append(invoker)
    await invoker(_task("http://hooks.example.test/hook"))
    (request,) = wire.sent
    assert request.url.host == address.lower()
    assert request.headers["Host"] == "hooks.example.test"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("allow", "address"),
    [
        (["10.0.0.0/8"], "64:ff9b::a00:7"),  # the carried IPv4 address is in a listed network
        (["64:ff9b:1::/48"], "64:ff9b:1::a9fe:a9fe"),  # the IPv6 network itself is listed
        (["2001::/32"], "2001:0:a9fe:a9fe::"),  # Teredo only when listed
    ],
)
async def test_listed_networks_allow_embedded_forms(
    wire: Wire,
    make_invoker: Callable[..., HttpCallbackInvoker],
    closing: list[HttpCallbackInvoker],
    allow: list[str],
    address: str,
) -> None:
    invoker = make_invoker(CallbackSettings(allow_hosts=["*"], allow_networks=allow))
    closing.append(invoker)
    await invoker(_task(f"http://[{address}]:8080/hook"))
    (request,) = wire.sent
    assert request.url.host == address


@pytest.mark.asyncio
@pytest.mark.parametrize("address", ["::1", "::"])
async def test_loopback_and_unspecified_ipv6_are_not_read_as_ipv4_compatible(
    wire: Wire,
    make_invoker: Callable[..., HttpCallbackInvoker],
    closing: list[HttpCallbackInvoker],
    address: str,
) -> None:
    """``::1`` is IPv6 loopback: refused, and allowed by a listed ``::1/128`` (not by an
    IPv4 network its last bits would fall in)."""
    refused = make_invoker(CallbackSettings(allow_hosts=["*"], allow_networks=["0.0.0.0/8"]))
    closing.append(refused)
    with pytest.raises(Permanent):
        await refused(_task(f"http://[{address}]:8080/hook"))
    listed = make_invoker(CallbackSettings(allow_hosts=["*"], allow_networks=[f"{address}/128"]))
    closing.append(listed)
    await listed(_task(f"http://[{address}]:8080/hook"))
    assert [r.url.host for r in wire.sent] == [address]

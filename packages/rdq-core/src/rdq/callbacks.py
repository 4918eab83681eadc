"""HTTP callbacks: tasks whose ``handler_ref`` is an ``http(s)://`` URL.

:class:`HttpCallbackInvoker` POSTs the task's envelope (JSON) to the URL, signed so the
receiver can check it came from rdq, and turns the answer into the task's outcome:

* 2xx: success;
* 408, 425, 429, 5xx, connection errors and timeouts: retryable (``Retry-After`` in seconds or
  as an HTTP date is honoured through :class:`rdq.RetryAfter`);
* any other status (other 4xx, and 3xx: redirects are not followed): :class:`rdq.Permanent`.

Signature scheme (version ``v1``)::

    X-Rdq-Timestamp: <unix seconds>
    X-Rdq-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>[,v1=<hex>…]

One ``v1=`` entry per configured secret (several during a secret rotation); the receiver
accepts the request when any entry matches one of its secrets and the timestamp is recent.

Against SSRF, nothing is called unless its host is on the allow-list, and the host name is
resolved here: if any address it resolves to is private, loopback, link-local or otherwise not
globally routable, the call is refused unless that address lies in an explicitly allowed
network. The request then goes to the very address that was checked (the ``Host`` header and
TLS server name keep the original host), so a DNS answer that changes between the check and
the connection (DNS rebinding) cannot redirect it.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import hmac
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec

from rdq.errors import ConfigError
from rdq.logging import get_logger
from rdq.signals import Permanent, RetryAfter
from rdq.spi import Envelope, encode_envelope

__all__ = [
    "CallbackBlocked",
    "CallbackError",
    "CallbackFailed",
    "CallbackRejected",
    "CallbackSettings",
    "CallbackTimeout",
    "CallbackUnreachable",
    "HttpCallbackInvoker",
    "is_callback_ref",
    "parse_retry_after",
    "redact_url",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "X-Rdq-Signature"
TIMESTAMP_HEADER = "X-Rdq-Timestamp"
MAX_RETRY_AFTER = 86_400.0
"""``Retry-After`` values are capped at one day."""
_RETRYABLE_STATUS = frozenset({408, 425, 429})
_log = get_logger("rdq.callbacks")
_ERROR_BODY_BYTES = 512

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]


class CallbackError(Exception):
    """A callback did not succeed (the subclasses say how)."""


class CallbackBlocked(CallbackError):
    """The URL's host is not allowed, or it resolves to an address that is refused."""


class CallbackRejected(CallbackError):
    """The receiver answered with a status that retrying cannot fix (4xx other than
    408/425/429, or a redirect)."""


class CallbackFailed(CallbackError):
    """The receiver answered 408, 425, 429 or 5xx: retryable."""


class CallbackTimeout(CallbackError):
    """The receiver did not answer in time: retryable."""


class CallbackUnreachable(CallbackError):
    """The receiver could not be reached (DNS failure, refused or broken connection)."""


class CallbackSettings(msgspec.Struct, kw_only=True, frozen=True):
    """How callbacks are made. Durations in seconds.

    ``allow_hosts`` lists host names (``hooks.example.com``), subdomain wildcards
    (``*.example.com``), IP literals, or ``*`` for any host; empty means no callback is
    allowed. ``allow_networks`` lists CIDR networks whose non-public addresses may be called
    anyway (``127.0.0.0/8`` for a receiver on the same machine). ``secrets`` sign each request
    (first one current, the rest during rotation). ``queue_timeouts`` overrides ``timeout``
    per queue."""

    allow_hosts: list[str] = []
    allow_networks: list[str] = []
    secrets: list[str] = []
    timeout: float = 10.0
    queue_timeouts: dict[str, float] = {}
    user_agent: str = "rdq-callback/1"

    def __post_init__(self) -> None:
        for i, net in enumerate(self.allow_networks):
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError:
                raise ConfigError(f"not a network: {net!r}", key=f"allow_networks[{i}]") from None
        if self.timeout <= 0:
            raise ConfigError("must be greater than zero", key="timeout")
        for queue, value in self.queue_timeouts.items():
            if value <= 0:
                raise ConfigError("must be greater than zero", key=f"queue_timeouts.{queue}")
        for i, secret in enumerate(self.secrets):
            if len(secret) < 16:
                raise ConfigError("must be at least 16 characters", key=f"secrets[{i}]")

    def host_allowed(self, host: str) -> bool:
        """True if ``host`` (a URL's host) is on the allow-list. Says nothing about addresses."""
        host = host.lower().rstrip(".")
        for pattern in self.allow_hosts:
            pattern = pattern.lower().rstrip(".")
            if pattern == "*" or pattern == host:
                return True
            if pattern.startswith("*.") and host.endswith(pattern[1:]):
                return True
        return False

    def networks(self) -> list[IPNetwork]:
        return [ipaddress.ip_network(net, strict=False) for net in self.allow_networks]


def is_callback_ref(handler_ref: str) -> bool:
    """True if ``handler_ref`` names an HTTP callback (the scheme in any letter case)."""
    return handler_ref[:8].lower().startswith(("http://", "https://"))


def redact_url(url: str) -> str:
    """``url`` without credentials, query or fragment (which may hold secrets), for logs."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<malformed URL>"
    shown = f"[{host}]" if ":" in host else host
    query = "?…" if parts.query else ""
    return urlunsplit((parts.scheme, f"{shown}{port}", parts.path, "", "")) + query


class _RedactRequestLines(logging.Filter):
    """Rewrites httpx's ``HTTP Request: POST <url> …`` lines so no query string (where a
    receiver's secret may sit) reaches a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 2:
            args = list(record.args)
            args[1] = redact_url(str(args[1]))
            record.args = tuple(args)
        return True


def _redact_httpx_logs() -> None:
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, _RedactRequestLines) for f in logger.filters):
        logger.addFilter(_RedactRequestLines())


def check_callback_url(url: str, settings: CallbackSettings) -> tuple[str, str, int]:
    """Return ``(scheme, host, port)`` of an allowed callback URL.

    Raises ``CallbackBlocked`` for a malformed URL or a host that is not on the allow-list
    (no DNS lookup: addresses are checked when the call is made)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise CallbackBlocked(f"malformed callback URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallbackBlocked("a callback URL must be http:// or https:// with a host")
    if parts.username or parts.password:
        raise CallbackBlocked("a callback URL must not carry credentials")
    host = parts.hostname
    if not settings.host_allowed(host):
        raise CallbackBlocked(f"host {host!r} is not on the callback allow-list")
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The hex ``v1`` signature of ``body`` sent at ``timestamp``."""
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(
    secrets: Sequence[str],
    signature_header: str,
    timestamp_header: str,
    body: bytes,
    *,
    tolerance: float = 300.0,
    now: float | None = None,
) -> bool:
    """What a receiver does: True if the timestamp is within ``tolerance`` seconds of ``now``
    and some ``v1=`` entry of the signature header matches ``body`` under one of ``secrets``."""
    try:
        timestamp = int(timestamp_header)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    offered = [p.strip()[3:] for p in signature_header.split(",") if p.strip().startswith("v1=")]
    expected = [sign(secret, timestamp, body) for secret in secrets]
    return any(hmac.compare_digest(o, e) for o in offered for e in expected)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), capped
    at :data:`MAX_RETRY_AFTER`; None if absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


async def _system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class HttpCallbackInvoker:
    """Delivers HTTP callback tasks; register it for the ``http`` and ``https`` schemes
    (``app.register_scheme("https", invoker)``).

    Calling it returns on success and raises :class:`rdq.Permanent`, :class:`rdq.RetryAfter`
    or a retryable :class:`CallbackError` otherwise (see the module docstring)."""

    def __init__(
        self,
        settings: CallbackSettings,
        *,
        client: httpx.AsyncClient | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        self.settings = settings
        self._networks = settings.networks()
        self._client = client or httpx.AsyncClient(follow_redirects=False, trust_env=False)
        self._resolve = resolver or _system_resolver
        _redact_httpx_logs()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __call__(self, task: Envelope, ctx: Any = None) -> None:
        try:
            await self.deliver(task, attempt=getattr(ctx, "attempt", None))
        except CallbackBlocked as exc:
            raise Permanent(str(exc)) from exc
        except CallbackRejected as exc:
            raise Permanent(str(exc)) from exc

    async def deliver(self, task: Envelope, *, attempt: int | None = None) -> int:
        """POST ``task`` to its ``handler_ref``; return the 2xx status.

        Raises ``CallbackBlocked``/``CallbackRejected`` (permanent), ``RetryAfter`` (the
        receiver asked for a delay), ``CallbackFailed``/``CallbackTimeout``/
        ``CallbackUnreachable`` (retryable)."""
        scheme, host, port = check_callback_url(task.handler_ref, self.settings)
        address = await self._pick_address(host, port)
        body = encode_envelope(task)
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": self.settings.user_agent,
            "Host": _host_header(scheme, host, port),
            TIMESTAMP_HEADER: str(timestamp),
            "X-Rdq-Task-Id": task.id,
            "X-Rdq-Queue": task.queue,
        }
        if attempt is not None:
            headers["X-Rdq-Attempt"] = str(attempt)
        if self.settings.secrets:
            headers[SIGNATURE_HEADER] = ",".join(
                f"v1={sign(secret, timestamp, body)}" for secret in self.settings.secrets
            )
        url = _pin(task.handler_ref, address)
        extensions = {"sni_hostname": host} if scheme == "https" else {}
        timeout = self.settings.queue_timeouts.get(task.queue, self.settings.timeout)
        try:
            request = self._client.build_request(
                "POST", url, content=body, headers=headers, timeout=timeout, extensions=extensions
            )
            response = await self._client.send(request, stream=True)
            try:
                snippet = await _read_some(response)
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise CallbackTimeout(f"no answer from {host} within {timeout:g}s") from exc
        except httpx.TransportError as exc:
            raise CallbackUnreachable(f"cannot reach {host}: {exc or type(exc).__name__}") from exc
        return _classify(response, snippet)

    async def _pick_address(self, host: str, port: int) -> str:
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = await self._resolve(host, port)
            except OSError as exc:
                raise CallbackUnreachable(f"cannot resolve {host!r}: {exc}") from exc
            if not addresses:
                raise CallbackUnreachable(f"{host!r} resolves to no address")
        for text in addresses:
            address = ipaddress.ip_address(text.split("%")[0])
            if not self._address_allowed(address):
                # The address goes to the node's log only: the message is stored with the
                # task, where every reader of the DLQ would learn the internal network.
                _log.warning("callback blocked", host=host, address=str(address))
                raise CallbackBlocked(
                    f"{host!r} resolves to a non-public address that allow_networks does not allow"
                )
        return addresses[0].split("%")[0]

    def _address_allowed(self, address: IPAddress) -> bool:
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None:
            address = mapped
        if address.is_global and not address.is_multicast:
            return True
        return any(address.version == net.version and address in net for net in self._networks)


async def _read_some(response: httpx.Response) -> bytes:
    """The first bytes of the body (for error messages); the rest is not read."""
    if 200 <= response.status_code < 300:
        return b""
    data = b""
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= _ERROR_BODY_BYTES:
            break
    return data[:_ERROR_BODY_BYTES]


def _classify(response: httpx.Response, snippet: bytes) -> int:
    status = response.status_code
    if 200 <= status < 300:
        return status
    detail = snippet.decode("utf-8", "replace").strip()
    message = f"HTTP {status}" + (f": {detail}" if detail else "")
    if status in _RETRYABLE_STATUS or status >= 500:
        delay = parse_retry_after(response.headers.get("Retry-After"))
        failure = CallbackFailed(message)
        if delay is not None:
            raise RetryAfter(delay, message) from failure
        raise failure
    raise CallbackRejected(message)


def _host_header(scheme: str, host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return shown if port == default else f"{shown}:{port}"


def _pin(url: str, address: str) -> str:
    """``url`` with its host replaced by ``address`` (the port, path and query kept)."""
    parts = urlsplit(url)
    shown = f"[{address}]" if ":" in address else address
    netloc = shown if parts.port is None else f"{shown}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))

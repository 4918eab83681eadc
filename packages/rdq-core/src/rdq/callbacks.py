"""HTTP callbacks: tasks whose ``handler_ref`` is an ``http(s)://`` URL — what a receiver
needs (:func:`verify`), and the rules both sides share. The delivery itself
(:class:`rdq.server.HttpCallbackInvoker`, on httpx) lives with the server
(``rdq-core[server]``); this module imports nothing beyond rdq-core's own dependencies.

An ``rdq server`` node POSTs the task's envelope (JSON) to the URL, signed so the receiver can
check it came from rdq, and turns the answer into the task's outcome:

* 2xx: success;
* 408, 425, 429, 5xx, connection errors and timeouts: retryable; 408, 429, 502, 503, 504,
  timeouts and unreachable receivers are outage-class (they feed the breaker), 500, 425 and
  the other 5xx are not (the table, and why, is :mod:`rdq.retry._status`'s, shared with
  handlers' own HTTP errors); a ``Retry-After`` in seconds or as an HTTP date is honoured (on
  an outage-class status through :class:`rdq.RetryAfter`);
* any other status (other 4xx, and 3xx: redirects are not followed): :class:`rdq.Permanent`.

Signature scheme (version ``v1``)::

    X-Rdq-Timestamp: <unix seconds>
    X-Rdq-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>[,v1=<hex>…]

One ``v1=`` entry per configured secret (several during a secret rotation); the receiver
accepts the request when any entry matches one of its secrets and the timestamp is recent::

    from rdq.callbacks import verify

    ok = verify([secret], request.headers["X-Rdq-Signature"],
                request.headers["X-Rdq-Timestamp"], await request.body())

Against SSRF, nothing is called unless its host is on the allow-list, and the host name is
resolved by the node: if any address it resolves to is private, loopback, link-local or
otherwise not globally routable (an IPv4 address embedded in an IPv6 one — mapped,
compatible, NAT64, 6to4 — is judged as the IPv4 address; Teredo is refused), the call is
refused unless that address lies in an explicitly allowed network.
The request then goes to the very address that was checked (the ``Host`` header and TLS
server name keep the original host), so a DNS answer that changes between the check and the
connection (DNS rebinding) cannot redirect it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

import msgspec

from rdq.errors import ConfigError
from rdq.retry import MAX_RETRY_AFTER, parse_retry_after

__all__ = [
    "MAX_RETRY_AFTER",
    "CallbackBlocked",
    "CallbackError",
    "CallbackFailed",
    "CallbackRejected",
    "CallbackSettings",
    "CallbackTimeout",
    "CallbackUnreachable",
    "check_callback_url",
    "is_callback_ref",
    "parse_retry_after",
    "redact_url",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "X-Rdq-Signature"
TIMESTAMP_HEADER = "X-Rdq-Timestamp"

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
    """The receiver answered 408, 425, 429 or 5xx: retryable. ``status`` is the status it
    answered, ``retry_after`` the seconds its ``Retry-After`` asked for (``None``: none)."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class CallbackTimeout(CallbackError):
    """The receiver did not answer in time: retryable."""


class CallbackUnreachable(CallbackError):
    """The receiver could not be reached (DNS failure, refused or broken connection)."""


class CallbackSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
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

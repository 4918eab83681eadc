"""Delivering HTTP callback tasks (see :mod:`rdq.callbacks` for the rules and the signature):
the node's :class:`HttpCallbackInvoker`, on httpx."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from rdq.callbacks import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    CallbackBlocked,
    CallbackFailed,
    CallbackRejected,
    CallbackSettings,
    CallbackTimeout,
    CallbackUnreachable,
    IPAddress,
    Resolver,
    check_callback_url,
    parse_retry_after,
    redact_url,
    sign,
)
from rdq.logging import get_logger
from rdq.retry import StatusClass, status_class
from rdq.server._addresses import address_allowed, embedded_ipv4
from rdq.signals import Permanent, RetryAfter
from rdq.spi import Envelope, encode_envelope

__all__ = ["HttpCallbackInvoker"]

_log = get_logger("rdq.callbacks")
_ERROR_BODY_BYTES = 512


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
            if not address_allowed(address, self._networks):
                # The address goes to the node's log only: the message is stored with the
                # task, where every reader of the DLQ would learn the internal network.
                carried = embedded_ipv4(address)
                _log.warning(
                    "callback blocked",
                    host=host,
                    address=str(address),
                    **({"carries": [str(v4) for v4 in carried]} if carried else {}),
                )
                raise CallbackBlocked(
                    f"{host!r} resolves to a non-public address that allow_networks does not allow"
                )
        return addresses[0].split("%")[0]


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
    kind = status_class(status)
    if kind is StatusClass.REJECTED:
        raise CallbackRejected(message)
    delay = parse_retry_after(response.headers.get("Retry-After"))
    failure = CallbackFailed(message, status=status, retry_after=delay)
    if delay is not None and kind is StatusClass.OUTAGE:
        raise RetryAfter(delay, message) from failure
    raise failure


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

"""The PostgreSQL store's configuration, read from its URL's query parameters and keywords.

rdq's own parameters are removed from the URL before it reaches asyncpg (which would
otherwise send unknown parameters to the server as settings)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rdq.errors import ConfigError
from rdq.spi import bounds

__all__ = ["PostgresConfig", "endpoint", "parse_url"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,50}")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class PostgresConfig:
    """How the store connects. Every field but ``dsn`` can be given as a URL query parameter
    or a keyword of :func:`parse_url`."""

    dsn: str = field(default="postgresql://localhost/postgres", repr=False)
    """The URL asyncpg connects with: the store's URL without rdq's own parameters (left out
    of ``repr``, as it may hold a password)."""

    schema: str = "rdq"
    """The PostgreSQL schema holding rdq's tables (created by ``migrate``)."""
    pool_min: int = 1
    """Connections opened up front and kept."""
    pool_max: int = 10
    """Most connections the store opens (plus one for LISTEN when ``notify`` is used)."""
    statement_cache_size: int = 256
    """asyncpg's prepared-statement cache per connection; 0 for PgBouncer transaction mode."""
    timeout: float = bounds.DEFAULT_OPERATION_TIMEOUT
    """Seconds one operation may take, waiting for a connection included, before it raises
    ``StorageUnavailable`` (``migrate`` and ``wait_due``'s wait are exempt)."""
    connect_timeout: float | None = None
    """Seconds to wait for a new connection (default: ``timeout``)."""
    server_timeout: bool = True
    """Also have the server stop a statement after ``timeout`` (PostgreSQL's
    ``statement_timeout``, sent when connecting; PgBouncer refuses that unless told to
    ignore it: turn this off there)."""
    notify: bool = True
    """Offer ``wait_due`` through LISTEN/NOTIFY (needs a session connection: not through
    PgBouncer in transaction mode, turn it off there)."""
    notify_interval: float = 0.005
    """Seconds between NOTIFYs once a burst of 8 is spent (a busy producer sends at most one
    per interval, coalescing the queues announced meanwhile; 0: no limit)."""

    @property
    def channel(self) -> str:
        """The NOTIFY channel that announces "a task of queue X may be due"."""
        return f"{self.schema}_due"


_FIELDS = {
    "schema": str,
    "pool_min": int,
    "pool_max": int,
    "statement_cache_size": int,
    "timeout": float,
    "connect_timeout": float,
    "server_timeout": bool,
    "notify": bool,
    "notify_interval": float,
}


def _convert(key: str, value: Any) -> Any:
    kind = _FIELDS[key]
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(value)
        if kind is int and isinstance(value, bool):
            raise ValueError(value)
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"invalid value {value!r}", key=key) from None


def parse_url(url: str, **overrides: Any) -> PostgresConfig:
    """The configuration ``url`` describes: asyncpg's DSN and rdq's options (keywords win over
    the URL).

    Raises ``ConfigError`` naming the option for an unknown keyword or a bad value."""
    if not isinstance(url, str):
        raise ConfigError("must be a string", key="storage")
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"not a postgresql:// URL: {url!r}", key="storage")
    kept: list[tuple[str, str]] = []
    values: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "command_timeout":  # the name of earlier releases
            key = "timeout"
        if key in _FIELDS:
            values[key] = _convert(key, value)
        else:
            kept.append((key, value))
    for key, value in overrides.items():
        if key == "command_timeout":
            key = "timeout"
        if key not in _FIELDS:
            raise ConfigError(f"unknown option {key!r}", key=key)
        if value is None:
            values.pop(key, None)  # the default
        else:
            values[key] = _convert(key, value)
    dsn = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(kept)))
    config = PostgresConfig(dsn=dsn, **values)
    if not _IDENT.fullmatch(config.schema):
        raise ConfigError(
            "must be a plain identifier (letters, digits, _; at most 51 characters)",
            key="schema",
        )
    if config.pool_min < 0 or config.pool_max < 1 or config.pool_min > config.pool_max:
        raise ConfigError("need 0 <= pool_min <= pool_max and pool_max >= 1", key="pool_max")
    if config.statement_cache_size < 0:
        raise ConfigError("must not be negative", key="statement_cache_size")
    for key in ("timeout", "connect_timeout"):
        seconds = getattr(config, key)
        if seconds is not None and not (seconds > 0 and math.isfinite(seconds)):
            raise ConfigError(f"must be a number of seconds above 0, not {seconds!r}", key=key)
    interval = config.notify_interval
    if not (interval >= 0 and math.isfinite(interval)):
        raise ConfigError(
            f"must be a number of seconds, 0 or more, not {interval!r}", key="notify_interval"
        )
    return config


def endpoint(dsn: str) -> str:
    """``host:port`` of ``dsn`` for error messages (never the password)."""
    parts = urlsplit(dsn)
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    host = parts.hostname or dict(parse_qsl(parts.query)).get("host") or "localhost"
    return f"{host}:{port}"

"""Reading a ``redis://`` / ``rediss://`` storage URL.

``redis://[[user]:password@]host[:port][/db][?prefix=rdq&cluster=false&<redis-py options>]``:
``prefix`` (the first part of every key name) and ``cluster`` (talk to a Redis Cluster through
redis-py's ``RedisCluster``; the URL names any one node) are rdq's own options; every other
query option goes to redis-py's ``from_url`` (``socket_timeout``, ``socket_connect_timeout``,
``max_connections``, ``health_check_interval``, ``ssl_cert_reqs``, ...). Keyword options given
to ``open_storage`` win over the URL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rdq.errors import ConfigError
from rdq_redis._keys import DEFAULT_PREFIX, check_prefix

__all__ = ["RedisConfig"]

_DEFAULTS: dict[str, Any] = {
    "socket_connect_timeout": 5.0,
    "socket_timeout": 30.0,
    "max_connections": 64,
}


@dataclass(frozen=True)
class RedisConfig:
    """What the store needs from its URL: the driver URL, the key prefix, the address."""

    url: str
    prefix: str
    address: str
    cluster: bool = False
    client_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str, **options: Any) -> RedisConfig:
        """Split ``url`` into the driver's URL and rdq's options; ``ConfigError`` if bad."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ConfigError(f"not a redis:// or rediss:// URL: {url!r}", key="storage")
        try:
            port = parts.port or 6379
        except ValueError as exc:
            raise ConfigError(f"bad port in {url!r}: {exc}", key="storage") from None
        host = parts.hostname or "localhost"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        prefix = check_prefix(options.pop("prefix", query.pop("prefix", DEFAULT_PREFIX)))
        cluster = _flag(options.pop("cluster", query.pop("cluster", False)))
        driver_url = urlunsplit(parts._replace(query=urlencode(query)))
        client_options = {k: v for k, v in _DEFAULTS.items() if k not in query}
        client_options.update(options)
        return cls(
            url=driver_url,
            prefix=prefix,
            address=f"{host}:{port}",
            cluster=cluster,
            client_options=client_options,
        )


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(f"must be true or false, not {value!r}", key="cluster")

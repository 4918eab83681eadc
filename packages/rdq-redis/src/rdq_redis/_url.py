"""Reading a ``redis://`` / ``rediss://`` storage URL.

``redis://[[user]:password@]host[:port][/db][?prefix=rdq&cluster=false&timeout=10&<redis-py
options>]``: ``prefix`` (the first part of every key name), ``cluster`` (talk to a Redis
Cluster through redis-py's ``RedisCluster``; the URL names any one node), ``timeout`` (the
operation timeout in seconds: the default of redis-py's ``socket_timeout`` and
``socket_connect_timeout``) and ``allow_eviction`` (open even on a server whose
``maxmemory-policy`` may evict keys, see :mod:`rdq_redis._eviction`) are rdq's own options;
every other query option goes to redis-py's ``from_url`` (``socket_timeout``,
``socket_connect_timeout``, ``max_connections``, ``health_check_interval``, ``ssl_cert_reqs``,
...). Keyword options given to ``open_storage`` win over the URL.

With ``sentinel_master=NAME`` the hosts are Redis Sentinels, several separated by commas
(``redis://:pw@s1:26379,s2:26379,s3:26379/0?sentinel_master=mymaster``); the store follows
whichever server the Sentinels name as that master. ``sentinel_username`` /
``sentinel_password`` authenticate to the Sentinels themselves when they require it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from rdq.errors import ConfigError
from rdq.spi import bounds
from rdq_redis._keys import DEFAULT_PREFIX, check_prefix

__all__ = ["RedisConfig", "parse_url"]

_DEFAULTS: dict[str, Any] = {
    "max_connections": 64,
}
_TIMEOUTS = ("socket_timeout", "socket_connect_timeout")


@dataclass(frozen=True)
class RedisConfig:
    """What the store needs from its URL: the driver URL, the key prefix, the address."""

    url: str
    prefix: str
    address: str
    cluster: bool = False
    timeout: float = bounds.DEFAULT_OPERATION_TIMEOUT
    """Seconds an operation may wait on Redis before it raises ``StorageUnavailable``."""
    client_options: dict[str, Any] = field(default_factory=dict)
    sentinel_master: str | None = None
    sentinels: list[tuple[str, int]] = field(default_factory=list)
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    allow_eviction: bool = False
    """Open even on a server whose ``maxmemory-policy`` may evict keys (a WARNING at every
    open instead of a ``StorageError``; see :mod:`rdq_redis._eviction`)."""


def parse_url(url: str, **options: Any) -> RedisConfig:
    """Split ``url`` into the driver's URL and rdq's options (keyword ``options`` win over
    the URL's query); ``ConfigError`` naming the key that is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigError(f"not a redis:// or rediss:// URL: {url!r}", key="storage")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if _flag(options.pop("decode_responses", query.pop("decode_responses", False))):
        raise ConfigError(
            "rdq-redis reads replies as bytes; leave decode_responses off",
            key="decode_responses",
        )
    master = options.pop("sentinel_master", query.pop("sentinel_master", None))
    if master:
        return _sentinel_config(parts, query, str(master), options)
    try:
        port = parts.port or 6379
    except ValueError as exc:
        raise ConfigError(f"bad port in {url!r}: {exc}", key="storage") from None
    host = parts.hostname or "localhost"
    prefix = check_prefix(options.pop("prefix", query.pop("prefix", DEFAULT_PREFIX)))
    cluster = _flag(options.pop("cluster", query.pop("cluster", False)))
    allow_eviction = _allow_eviction(options, query)
    timeout = _timeout(options, query)
    driver_url = urlunsplit(parts._replace(query=urlencode(query)))
    defaults = _DEFAULTS | dict.fromkeys(_TIMEOUTS, timeout)
    client_options = {k: v for k, v in defaults.items() if k not in query}
    client_options.update(options)
    return RedisConfig(
        url=driver_url,
        prefix=prefix,
        address=f"{host}:{port}",
        cluster=cluster,
        timeout=timeout,
        client_options=client_options,
        allow_eviction=allow_eviction,
    )


def _sentinel_config(
    parts: SplitResult, query: dict[str, str], master: str, options: dict[str, Any]
) -> RedisConfig:
    from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS

    prefix = check_prefix(options.pop("prefix", query.pop("prefix", DEFAULT_PREFIX)))
    if _flag(options.pop("cluster", query.pop("cluster", False))):
        raise ConfigError("sentinel_master and cluster exclude each other", key="cluster")
    allow_eviction = _allow_eviction(options, query)
    timeout = _timeout(options, query)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    sentinels = [_host_port(item, 26379) for item in hostlist.split(",") if item]
    if not sentinels:
        raise ConfigError("name at least one Sentinel host", key="storage")
    sentinel_auth = {
        name: value
        for name in ("username", "password")
        if (value := options.pop(f"sentinel_{name}", query.pop(f"sentinel_{name}", None)))
    }
    client_options: dict[str, Any] = _DEFAULTS | dict.fromkeys(_TIMEOUTS, timeout)
    for name, value in query.items():
        parser = URL_QUERY_ARGUMENT_PARSERS.get(name)
        try:
            client_options[name] = parser(value) if parser else value
        except (TypeError, ValueError):
            raise ConfigError(f"bad value {value!r}", key=name) from None
    try:
        client_options["db"] = int(parts.path.strip("/") or client_options.get("db", 0))
    except ValueError:
        raise ConfigError(f"bad database number in {parts.path!r}", key="storage") from None
    if user:
        client_options["username"] = unquote(user)
    if password:
        client_options["password"] = unquote(password)
    if parts.scheme == "rediss":
        client_options["ssl"] = True
    client_options.update(options)
    sentinel_options = {k: client_options[k] for k in _TIMEOUTS if k in client_options}
    sentinel_options.update(sentinel_auth)
    address = ",".join(f"{h}:{p}" for h, p in sentinels)
    return RedisConfig(
        url="",
        prefix=prefix,
        address=f"{master} via Sentinel {address}",
        timeout=timeout,
        client_options=client_options,
        sentinel_master=master,
        sentinels=sentinels,
        sentinel_options=sentinel_options,
        allow_eviction=allow_eviction,
    )


def _allow_eviction(options: dict[str, Any], query: dict[str, str]) -> bool:
    raw = options.pop("allow_eviction", query.pop("allow_eviction", False))
    try:
        return _flag(raw)
    except ConfigError as exc:
        raise ConfigError(str(exc), key="allow_eviction") from None


def _timeout(options: dict[str, Any], query: dict[str, str]) -> float:
    """The ``timeout`` option: seconds, more than 0 (``ConfigError`` naming it otherwise)."""
    raw = options.pop("timeout", query.pop("timeout", bounds.DEFAULT_OPERATION_TIMEOUT))
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number of seconds, not {raw!r}", key="timeout") from None
    if not 0 < value < float("inf"):
        raise ConfigError(f"must be more than 0 seconds, not {raw!r}", key="timeout")
    return value


def _host_port(item: str, default_port: int) -> tuple[str, int]:
    host, sep, port = item.rpartition(":")
    if not sep:
        return item, default_port
    try:
        return host, int(port)
    except ValueError:
        raise ConfigError(f"bad host:port {item!r}", key="storage") from None


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(f"must be true or false, not {value!r}")

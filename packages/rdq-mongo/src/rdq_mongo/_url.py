"""``parse_url``: rdq's own settings out of a ``mongodb://`` URL, the rest for PyMongo.

``mongodb://user:pw@host:port/DATABASE?rdq_prefix=rdq_&timeout=10&<PyMongo options>``

* the database is the URL path (default ``rdq``);
* ``rdq_prefix`` prefixes the collection names (default ``rdq_``, so tasks live in
  ``rdq_tasks``, the audit trail in ``rdq_audit``, the control records in ``rdq_controls``,
  the worker registry in ``rdq_workers`` and the per-minute counts in ``rdq_counts``);
* ``rdq_notify=off`` turns off change-stream wake-ups (default ``auto``: on when the server
  is a replica-set member or mongos, where change streams work);
* ``timeout`` is the operation timeout in seconds (default
  :data:`rdq.spi.bounds.DEFAULT_OPERATION_TIMEOUT`);
* every other query parameter is PyMongo's, passed through unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from bson.codec_options import DatetimeConversion

from rdq.errors import ConfigError
from rdq.spi import bounds

__all__ = ["DEFAULT_DATABASE", "DEFAULT_PREFIX", "MongoConfig", "parse_url"]

DEFAULT_DATABASE = "rdq"
DEFAULT_PREFIX = "rdq_"
_PREFIX_RE = re.compile(r"[A-Za-z0-9_]{0,40}")
_DATABASE_RE = re.compile(r"[^/\\. \"$*<>:|?\x00]{1,63}")

# rdq's defaults for PyMongo (the URL's own options win): an unreachable server is reported
# within seconds rather than PyMongo's 30 s.
_DEFAULT_TIMEOUTS_MS = {"serverSelectionTimeoutMS": 5000, "connectTimeoutMS": 5000}


@dataclass(frozen=True)
class MongoConfig:
    """What a ``mongodb://`` URL and its options say: the URL and options for PyMongo and
    where rdq keeps its collections."""

    driver_url: str
    """The URL without rdq's own parameters (credentials kept), for PyMongo."""
    database: str
    prefix: str = DEFAULT_PREFIX
    where: str = ""
    """``host:port[,host:port]`` without credentials, for error messages."""
    notify: bool = True
    """False when ``rdq_notify=off``: never use change streams."""
    timeout: float = bounds.DEFAULT_OPERATION_TIMEOUT
    """The operation timeout, in seconds."""
    client_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Keyword options for ``AsyncMongoClient`` (the caller's, plus rdq's defaults)."""

    @property
    def tasks_collection(self) -> str:
        return f"{self.prefix}tasks"

    @property
    def audit_collection(self) -> str:
        return f"{self.prefix}audit"

    @property
    def controls_collection(self) -> str:
        return f"{self.prefix}controls"

    @property
    def workers_collection(self) -> str:
        return f"{self.prefix}workers"

    @property
    def counts_collection(self) -> str:
        return f"{self.prefix}counts"

    @property
    def dedup_collection(self) -> str:
        return f"{self.prefix}dedup"


def parse_url(url: str, **options: Any) -> MongoConfig:
    """Split ``url`` into PyMongo's URL and rdq's settings; ``options`` go to
    ``AsyncMongoClient`` except ``timeout``, which is rdq's. ``ConfigError`` names the
    offending key."""
    if not isinstance(url, str):
        raise ConfigError("must be a string", key="storage")
    parts = urlsplit(url)
    if parts.scheme not in ("mongodb", "mongodb+srv"):
        raise ConfigError(f"not a mongodb:// URL: {_redact(url)!r}", key="storage")
    hosts = parts.netloc.rpartition("@")[2]
    if not hosts:
        raise ConfigError("the URL names no host", key="storage")
    database = unquote(parts.path.lstrip("/")) or DEFAULT_DATABASE
    if not _DATABASE_RE.fullmatch(database):
        raise ConfigError(f"invalid database name {database!r}", key="storage")
    prefix = DEFAULT_PREFIX
    notify = "auto"
    timeout: object = options.pop("timeout", bounds.DEFAULT_OPERATION_TIMEOUT)
    kept: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "rdq_prefix":
            prefix = value
        elif name == "rdq_notify":
            notify = value
        elif name == "timeout":
            timeout = value
        elif name.startswith("rdq_"):
            raise ConfigError(f"unknown rdq URL parameter {name!r}", key=name)
        else:
            kept.append((name, value))
    if not _PREFIX_RE.fullmatch(prefix):
        raise ConfigError("may hold only A-Z a-z 0-9 and _ (at most 40)", key="rdq_prefix")
    if notify not in ("auto", "off"):
        raise ConfigError("must be auto or off", key="rdq_notify")
    # a BSON date no datetime holds (written by a foreign producer) reads as a DatetimeMS,
    # which the codec reports as corrupt, instead of failing the whole result
    client_options: dict[str, Any] = {
        **options,
        "tz_aware": True,
        "datetime_conversion": DatetimeConversion.DATETIME_AUTO,
    }
    given = {name.lower() for name, _ in kept} | {name.lower() for name in options}
    for option, default in _DEFAULT_TIMEOUTS_MS.items():
        if option.lower() not in given:
            client_options[option] = default
    return MongoConfig(
        driver_url=urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), "")),
        database=database,
        prefix=prefix,
        where=hosts,
        notify=notify == "auto",
        timeout=_seconds(timeout),
        client_options=MappingProxyType(client_options),
    )


def _seconds(value: object) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number of seconds, not {value!r}", key="timeout") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"must be a positive number of seconds, not {value!r}", key="timeout")
    return seconds


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))

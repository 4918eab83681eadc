"""Reads rdq's own settings out of a ``mongodb://`` URL and hands the rest to PyMongo.

``mongodb://user:pw@host:port/DATABASE?rdq_prefix=rdq_&<PyMongo options>``

* the database is the URL path (default ``rdq``);
* ``rdq_prefix`` prefixes the collection names (default ``rdq_``, so tasks live in
  ``rdq_tasks``);
* ``rdq_notify=off`` turns off change-stream wake-ups (default ``auto``: on when the server
  is a replica-set member or mongos, where change streams work);
* every other query parameter is PyMongo's, passed through unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from rdq.errors import ConfigError

__all__ = ["DEFAULT_DATABASE", "DEFAULT_PREFIX", "MongoURL", "parse_url"]

DEFAULT_DATABASE = "rdq"
DEFAULT_PREFIX = "rdq_"
_PREFIX_RE = re.compile(r"[A-Za-z0-9_]{0,40}")
_DATABASE_RE = re.compile(r"[^/\\. \"$*<>:|?\x00]{1,63}")


@dataclass(frozen=True)
class MongoURL:
    """What rdq takes from the URL: the URL for PyMongo and where the tasks live."""

    driver_url: str
    """The URL without rdq's own parameters (credentials kept), for PyMongo."""
    database: str
    prefix: str
    where: str
    """``host:port[,host:port]`` without credentials, for error messages."""
    notify: bool = True
    """False when ``rdq_notify=off``: never use change streams."""

    @property
    def tasks_collection(self) -> str:
        return f"{self.prefix}tasks"


def parse_url(url: str) -> MongoURL:
    """Split ``url`` into PyMongo's URL and rdq's settings; ``ConfigError`` if malformed."""
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
    kept: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "rdq_prefix":
            prefix = value
        elif name == "rdq_notify":
            notify = value
        elif name.startswith("rdq_"):
            raise ConfigError(f"unknown rdq URL parameter {name!r}", key="storage")
        else:
            kept.append((name, value))
    if not _PREFIX_RE.fullmatch(prefix):
        raise ConfigError(
            "rdq_prefix may hold only A-Z a-z 0-9 and _ (at most 40)", key="storage.rdq_prefix"
        )
    if notify not in ("auto", "off"):
        raise ConfigError("rdq_notify must be auto or off", key="storage.rdq_notify")
    driver_url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
    return MongoURL(
        driver_url=driver_url,
        database=database,
        prefix=prefix,
        where=hosts,
        notify=notify == "auto",
    )


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))

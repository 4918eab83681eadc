"""Reading a ``sqlite://`` storage URL.

``sqlite:///PATH[?option=value&...]``: what follows the third slash is the file's path, as in
SQLAlchemy: ``sqlite:///rdq.db`` and ``sqlite:///./data/rdq.db`` are relative to the working
directory (resolved once, when the URL is read), ``sqlite:////var/lib/app/rdq.db`` (four
slashes) is absolute. ``sqlite:///:memory:`` (or ``sqlite://``) is a private in-memory
database that lives as long as the store is open: nothing is durable and no other store or
process can reach it. Keyword options given to ``open_storage`` win over the URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from rdq.errors import ConfigError
from rdq.spi import bounds

__all__ = ["SYNCHRONOUS_MODES", "SqliteConfig", "parse_url"]

SYNCHRONOUS_MODES = ("FULL", "EXTRA", "NORMAL")
"""The ``synchronous`` settings the store accepts (see docs/sqlite.md for what each risks)."""

_MEMORY = ":memory:"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class SqliteConfig:
    """How the store opens its database. Every field but ``path`` is a URL query option."""

    path: str | None
    """The database file (absolute), or ``None`` for a private in-memory database."""
    timeout: float = bounds.DEFAULT_OPERATION_TIMEOUT
    """Seconds one operation may take, waiting for the write lock included, before it raises
    ``StorageUnavailable``."""
    synchronous: str = "FULL"
    """SQLite's ``synchronous`` setting: ``FULL`` (the default) syncs the write-ahead log at
    every commit, so an acknowledged write survives a power cut; ``NORMAL`` does not."""
    notify: bool = True
    """Offer ``wait_due``: woken at once by writes of this process, and within
    ``watch_interval`` by writes of other processes."""
    watch_interval: float = 0.05
    """Seconds between two looks for commits by other processes while ``wait_due`` waits."""

    @property
    def in_memory(self) -> bool:
        return self.path is None

    @property
    def where(self) -> str:
        """The database for messages: its path, or ``:memory:``."""
        return self.path or _MEMORY


def parse_url(url: str, **options: Any) -> SqliteConfig:
    """Read ``url`` and keyword ``options`` into a :class:`SqliteConfig`.

    Raises ``ConfigError`` naming the option for an unknown option or a bad value."""
    if not isinstance(url, str):
        raise ConfigError("must be a string", key="storage")
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigError(f"not a sqlite:// URL: {url!r}", key="storage")
    if parts.netloc:
        raise ConfigError(
            f"a sqlite URL names a file, not a host ({parts.netloc!r}): use sqlite:///PATH "
            "(relative) or sqlite:////PATH (absolute)",
            key="storage",
        )
    raw = unquote(parts.path)
    if raw and not raw.startswith("/"):
        raise ConfigError(f"malformed sqlite URL: {url!r}", key="storage")
    name = raw[1:]
    if "\x00" in name:
        raise ConfigError("the path must not contain NUL", key="storage")
    path = None if name in ("", _MEMORY) else os.path.abspath(name)
    values: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        values[key] = _convert(key, value)
    for key, value in options.items():
        values[key] = _convert(key, value)
    return SqliteConfig(path=path, **values)


def _convert(key: str, value: Any) -> Any:
    if key == "timeout" or key == "watch_interval":
        number = _number(key, value)
        if not 0 < number <= 86_400:
            raise ConfigError("must be a number of seconds above 0 (at most a day)", key=key)
        return number
    if key == "synchronous":
        text = str(value).upper()
        if text not in SYNCHRONOUS_MODES:
            raise ConfigError(f"must be one of {', '.join(SYNCHRONOUS_MODES)}", key=key)
        return text
    if key == "notify":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError("must be true or false", key=key)
    known = "timeout, synchronous, notify, watch_interval"
    raise ConfigError(f"unknown option (the options are {known})", key=key)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError("must be a number of seconds", key=key)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number of seconds, not {value!r}", key=key) from None
    if number != number:  # NaN
        raise ConfigError("must be a number of seconds", key=key)
    return number

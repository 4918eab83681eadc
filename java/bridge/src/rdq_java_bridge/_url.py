"""``java+postgresql://`` URLs: what goes to the Java binding and what the bridge keeps."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rdq.errors import ConfigError

__all__ = ["parse_url"]

_SCHEME = "java+postgresql"


def parse_url(url: str, **options: Any) -> tuple[str, str | None]:
    """``(the postgresql:// URL for the Java store, the bridge socket or None)``.

    ``bridge=PATH`` names a running :class:`~rdq_java_bridge.BridgeServer`'s socket; every
    other query parameter (and keyword option) is the Java store's own (``schema``,
    ``timeout``, ``pool_max``, ``notify``, ...)."""
    parts = urlsplit(url)
    if parts.scheme != _SCHEME:
        raise ConfigError(f"not a {_SCHEME}:// URL: {url!r}", key="storage")
    bridge: str | None = None
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "bridge":
            bridge = value
        else:
            kept.append((key, value))
    for key, value in options.items():
        if key == "bridge":
            bridge = None if value is None else str(value)
        else:
            kept.append((key, str(value).lower() if isinstance(value, bool) else str(value)))
    target = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(kept)))
    return target, bridge

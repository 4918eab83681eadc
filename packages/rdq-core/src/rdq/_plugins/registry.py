"""The registry of storage factories by URL scheme."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from rdq.errors import ConfigError
from rdq.spi import Storage

StorageFactory = Callable[..., Storage]
"""``factory(url, **options) -> Storage``: builds an unconnected store for ``url``."""


class Backend(msgspec.Struct, frozen=True):
    """An installed backend as ``rdq backends`` shows it."""

    scheme: str
    plugin: str
    distribution: str | None
    version: str | None


class BrokenPlugin(msgspec.Struct, frozen=True):
    """An entry point that failed to load, and why."""

    name: str
    distribution: str | None
    version: str | None
    error: str


class StorageRegistry:
    """Collects ``scheme -> factory`` registrations from plugins."""

    def __init__(self) -> None:
        self._factories: dict[str, StorageFactory] = {}
        self._backends: dict[str, Backend] = {}
        self._current: tuple[str, str | None, str | None] = ("?", None, None)

    def add(self, scheme: str, factory: StorageFactory) -> None:
        """Serve URLs of ``scheme`` (``"postgresql"`` for ``postgresql://…``) with ``factory``."""
        scheme = scheme.lower()
        if scheme in self._factories:
            existing = self._backends[scheme].plugin
            plugin = self._current[0]
            if existing != plugin:
                raise ConfigError(
                    f"scheme {scheme!r} is registered by both {existing!r} and {plugin!r}",
                    key="rdq.storage",
                )
        name, dist, version = self._current
        self._factories[scheme] = factory
        self._backends[scheme] = Backend(scheme, name, dist, version)

    def schemes(self) -> list[str]:
        return sorted(self._factories)

    def backends(self) -> list[Backend]:
        return [self._backends[s] for s in self.schemes()]

    def factory(self, scheme: str) -> StorageFactory | None:
        return self._factories.get(scheme.lower())

    def _registering(self, name: str, dist: str | None, version: str | None) -> _Scope:
        return _Scope(self, (name, dist, version))


class _Scope:
    def __init__(self, registry: StorageRegistry, current: tuple[str, str | None, str | None]):
        self._registry = registry
        self._current = current

    def __enter__(self) -> None:
        self._registry._current = self._current

    def __exit__(self, *exc: Any) -> None:
        self._registry._current = ("?", None, None)

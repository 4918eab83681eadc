"""The factory a plugin gives for a URL scheme, and the registry a version-1 plugin registers
its factories with."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rdq.errors import ConfigError

if TYPE_CHECKING:
    from rdq.spi._protocol import Storage

__all__ = ["StorageFactory", "StorageRegistry"]

StorageFactory = Callable[..., "Storage"]
"""``factory(url, **options) -> Storage``: builds an unconnected store for ``url``."""


class StorageRegistry:
    """Collects the ``registry.add(scheme, factory)`` calls of one version-1 plugin (see
    :func:`rdq.spi.rdq_register_storage`)."""

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self.factories: dict[str, StorageFactory] = {}

    def add(self, scheme: str, factory: StorageFactory) -> None:
        """Serve URLs of ``scheme`` (``"postgresql"`` for ``postgresql://…``) with
        ``factory``."""
        if not isinstance(scheme, str) or not scheme:
            raise ConfigError(f"{self.plugin}: a scheme must be a non-empty string", key=scheme)
        self.factories[scheme.lower()] = factory

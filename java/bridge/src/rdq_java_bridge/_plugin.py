"""Registers ``java+postgresql://`` with rdq's plugin manager (the bridge to the Java binding)."""

from __future__ import annotations

from typing import Any

from rdq.plugins import StorageRegistry, hookimpl
from rdq.spi import Storage


def open_java(url: str, **options: Any) -> Storage:
    """Build a (not yet connected) :class:`~rdq_java_bridge.JavaBridgeStorage` for ``url``."""
    from rdq_java_bridge._storage import JavaBridgeStorage

    return JavaBridgeStorage.from_url(url, **options)


@hookimpl
def rdq_register_storage(registry: StorageRegistry) -> None:
    registry.add("java+postgresql", open_java)

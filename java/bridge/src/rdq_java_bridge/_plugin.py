"""Serves ``java+postgresql://`` (the bridge to the Java binding), the scheme this package's
entry point declares."""

from __future__ import annotations

from typing import Any

from rdq.spi import Storage, StorageFactory, hookimpl


def open_java(url: str, **options: Any) -> Storage:
    """Build a (not yet connected) :class:`~rdq_java_bridge.JavaBridgeStorage` for ``url``."""
    from rdq_java_bridge._storage import JavaBridgeStorage

    return JavaBridgeStorage.from_url(url, **options)


@hookimpl
def rdq_storage_factory(scheme: str) -> StorageFactory:
    """Every scheme this package's entry points declare is served by :func:`open_java`."""
    return open_java

"""The hooks a storage plugin implements.

A plugin module, named in the ``rdq.storage`` entry-point group, implements::

    from rdq.plugins import hookimpl

    @hookimpl
    def rdq_register_storage(registry):
        registry.add("mystore", open_mystore)   # open_mystore(url, **options) -> Storage

Keep the module light: import the driver inside the factory, so that listing the installed
backends never imports every driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from rdq._plugins.registry import StorageRegistry

PROJECT = "rdq"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def rdq_register_storage(registry: StorageRegistry) -> None:
    """Register storage factories by URL scheme with ``registry.add(scheme, factory)``."""

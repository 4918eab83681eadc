"""The hooks a storage plugin implements, and the marker it implements them with.

A plugin is a module named in the ``rdq.storage`` entry-point group; each entry point's *name*
is a URL scheme it serves, so the scheme is declared once, in ``pyproject.toml``::

    [project.entry-points."rdq.storage"]
    mystore = "rdq_mystore._plugin"

and the module answers which factory builds stores for such URLs::

    from rdq.spi import hookimpl

    @hookimpl
    def rdq_storage_factory(scheme):
        return open_mystore                  # open_mystore(url, **options) -> Storage

Keep the module light: import the driver inside the factory, so that listing the installed
backends never imports every driver.

Plugins written for contract version 1 implement :func:`rdq_register_storage` instead
(``registry.add(scheme, factory)``); rdq still calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from rdq.spi._registry import StorageFactory, StorageRegistry

__all__ = ["PROJECT", "hookimpl", "hookspec", "rdq_register_storage", "rdq_storage_factory"]

PROJECT = "rdq"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def rdq_storage_factory(scheme: str) -> StorageFactory | None:
    """The factory for URLs of ``scheme`` (one of the names this plugin's entry points
    declare), or ``None`` if this plugin does not serve it. Called once per scheme, when a
    URL of that scheme is first opened."""


@hookspec
def rdq_register_storage(registry: StorageRegistry) -> None:
    """(Contract version 1; still called) Register factories by URL scheme with
    ``registry.add(scheme, factory)``."""

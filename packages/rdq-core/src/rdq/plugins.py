"""What a storage plugin module imports to register itself (see ``rdq._plugins.hookspecs``)."""

from rdq._plugins.hookspecs import hookimpl
from rdq._plugins.registry import StorageFactory, StorageRegistry

__all__ = ["StorageFactory", "StorageRegistry", "hookimpl"]

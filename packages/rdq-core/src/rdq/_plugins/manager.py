"""Loads the ``rdq.storage`` entry points through pluggy, on first use, never at import."""

from __future__ import annotations

import contextlib
import functools
import threading
import traceback
import weakref
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pluggy

from rdq._plugins import hookspecs
from rdq._plugins.registry import Backend, BrokenPlugin, StorageRegistry
from rdq.errors import ConfigError, PluginError
from rdq.spi import Storage

ENTRY_POINT_GROUP = "rdq.storage"

_lock = threading.Lock()

_opened: weakref.WeakKeyDictionary[Any, tuple[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
"""The URL and options of every store built by :func:`open_storage` (for :func:`reopen`)."""


class Plugins:
    """The loaded plugin manager, the registry it filled, and the plugins that broke."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self.registry = StorageRegistry()
        self.broken: list[BrokenPlugin] = []
        self._load_entry_points()
        self.manager.check_pending()

    def _load_entry_points(self) -> None:
        # Several entry points (one per scheme) may name the same module: load each module once.
        seen: dict[str, ModuleType | None] = {}
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist else None
            version = ep.dist.version if ep.dist else None
            if ep.value in seen:
                continue
            try:
                plugin = ep.load()
                seen[ep.value] = plugin
                if self.manager.is_registered(plugin):
                    continue
                self.manager.register(plugin, name=ep.value)
                # Call this plugin's hook alone, so its schemes are attributed to it and its
                # failure is its own.
                with self.registry._registering(ep.value.split(":")[0], dist, version):
                    _call_one(self.manager, plugin, self.registry)
            except Exception as exc:
                seen[ep.value] = None
                self.broken.append(
                    BrokenPlugin(
                        name=_label(ep),
                        distribution=dist,
                        version=version,
                        error=_reason(exc),
                    )
                )


def _call_one(manager: pluggy.PluginManager, plugin: Any, registry: StorageRegistry) -> None:
    impls = [
        impl for impl in manager.hook.rdq_register_storage.get_hookimpls() if impl.plugin is plugin
    ]
    if not impls:
        raise PluginError(str(getattr(plugin, "__name__", plugin)), "no rdq_register_storage hook")
    for impl in impls:
        impl.function(registry=registry)


def _label(ep: EntryPoint) -> str:
    return f"{ep.name} ({ep.value})"


def _reason(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


@functools.cache
def _plugins() -> Plugins:
    with _lock:
        return Plugins()


def plugins() -> Plugins:
    """The process-wide plugin state, loaded on first call."""
    return _plugins()


def reload_plugins() -> Plugins:
    """Forget the loaded plugins and load them again (after installing one at run time)."""
    _plugins.cache_clear()
    return _plugins()


def installed_backends() -> tuple[list[Backend], list[BrokenPlugin]]:
    """Every backend that loaded, by scheme, and every plugin that failed, with its reason."""
    state = plugins()
    return state.registry.backends(), list(state.broken)


def open_storage(url: str, **options: Any) -> Storage:
    """Build the store for ``url`` (not yet connected).

    Use it as ``async with open_storage(url) as storage:`` or call ``await storage.connect()``.
    The scheme picks the plugin (``memory://``, ``postgresql://``, ``redis://``,
    ``mongodb://``, or any installed third-party scheme); ``options`` go to the plugin.

    Raises ``ConfigError`` for a URL without a scheme or an unknown scheme (the message lists the
    installed ones and any plugin that failed to load)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"not a storage URL: {url!r} (expected scheme://…, e.g. memory://)", key="storage"
        )
    scheme = urlsplit(url).scheme.lower()
    state = plugins()
    factory = state.registry.factory(scheme)
    if factory is None:
        installed = ", ".join(state.registry.schemes()) or "none"
        message = f"no storage plugin for scheme {scheme!r}; installed schemes: {installed}"
        if state.broken:
            broken = "; ".join(f"{b.name}: {b.error}" for b in state.broken)
            message += f"; plugins that failed to load: {broken}"
        raise ConfigError(message, key="storage")
    storage = factory(url, **options)
    with contextlib.suppress(TypeError):  # not weak-referenceable: it cannot be reopened
        _opened[storage] = (url, dict(options))
    return storage


def reopen(storage: Storage) -> Storage | None:
    """A second, unconnected store built from the URL and options ``storage`` was opened
    with by :func:`open_storage`, or ``None`` for a store built some other way.

    The second store has connections of its own (the worker's lease thread uses one on its
    own event loop). Whether it reaches the same tasks is for the caller to check: a URL
    naming no shared resource (an unnamed ``memory://``) opens a store of its own."""
    try:
        spec = _opened.get(storage)
    except TypeError:
        return None
    if spec is None:
        return None
    url, options = spec
    return open_storage(url, **options)

"""Storage plugin discovery: the ``rdq.storage`` entry points, loaded into a pluggy
``PluginManager`` on first use (never at import), and :func:`open_storage`.

Each entry point's name is a URL scheme and its value the plugin module that serves it; a
module named by several entry points (``postgresql`` and ``postgres``) is loaded and
registered once. The factory for a scheme comes from the module's
:func:`~rdq.spi.rdq_storage_factory` hook, called through the manager for that module alone,
when a URL of the scheme is first opened (a version-1 plugin's
:func:`~rdq.spi.rdq_register_storage` is called, the same way, at load time). A module that
fails to import, or whose hook fails, is reported by :func:`installed_backends` with its name
and the reason; the others keep working.

Plugin authors import the hook marker from :mod:`rdq.spi` (``rdq.plugins.hookimpl`` and
``rdq.plugins.StorageRegistry`` remain for plugins written for contract version 1).
"""

from __future__ import annotations

import functools
import threading
import traceback
from collections import defaultdict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from rdq.errors import ConfigError, PluginError
from rdq.spi import Storage, StorageFactory, StorageRegistry, adapt

__all__ = [
    "ENTRY_POINT_GROUP",
    "Plugins",
    "StorageFactory",
    "StorageRegistry",
    "hookimpl",
    "installed_backends",
    "open_storage",
    "plugins",
    "reload_plugins",
]

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    import pluggy

    from rdq.spi.hookspecs import hookimpl

ENTRY_POINT_GROUP = "rdq.storage"


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


class _Plugin(msgspec.Struct):
    """One plugin module and the schemes its entry points (or its version-1 hook) declare."""

    name: str
    module: Any
    distribution: str | None
    version: str | None
    schemes: list[str]
    factories: dict[str, StorageFactory] = {}


class Plugins:
    """The plugin manager, the plugin that owns each scheme, and the plugins that broke."""

    def __init__(self) -> None:
        import pluggy  # loaded with the plugins, not with rdq

        from rdq.spi import hookspecs

        self.manager: pluggy.PluginManager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self.broken: list[BrokenPlugin] = []
        self._owners: dict[str, _Plugin] = {}
        self._lock = threading.Lock()
        self._load_entry_points()
        self.manager.check_pending()

    def _load_entry_points(self) -> None:
        from importlib.metadata import entry_points

        by_module: dict[str, list[EntryPoint]] = defaultdict(list)
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            by_module[ep.value].append(ep)
        for value, eps in by_module.items():
            first = eps[0]
            dist = first.dist.name if first.dist else None
            version = first.dist.version if first.dist else None
            try:
                module = first.load()
                self.manager.register(module, name=value)
                plugin = _Plugin(value, module, dist, version, [ep.name.lower() for ep in eps])
                self._register_version_1(plugin)
            except Exception as exc:
                label = ", ".join(ep.name for ep in eps)
                self.broken.append(BrokenPlugin(f"{label} ({value})", dist, version, _reason(exc)))
                continue
            for scheme in plugin.schemes:
                other = self._owners.get(scheme)
                if other is not None and other is not plugin:
                    self.broken.append(
                        BrokenPlugin(
                            f"{scheme} ({value})",
                            dist,
                            version,
                            f"scheme {scheme!r} is served by {other.name!r} already",
                        )
                    )
                    continue
                self._owners[scheme] = plugin

    def _register_version_1(self, plugin: _Plugin) -> None:
        """Call the module's ``rdq_register_storage`` hook, if it has one, through the
        manager for this module alone; its schemes join those of its entry points."""
        hook = self._caller(plugin, "rdq_register_storage")
        if not hook.get_hookimpls():
            return
        registry = StorageRegistry(plugin.name)
        hook(registry=registry)
        plugin.factories = dict(registry.factories)
        plugin.schemes = list(dict.fromkeys([*plugin.schemes, *registry.factories]))

    def _caller(self, plugin: _Plugin, hook_name: str) -> Any:
        others = [p for p in self.manager.get_plugins() if p is not plugin.module]
        return self.manager.subset_hook_caller(hook_name, remove_plugins=others)

    def schemes(self) -> list[str]:
        return sorted(self._owners)

    def backends(self) -> list[Backend]:
        return [
            Backend(scheme, p.name.split(":")[0], p.distribution, p.version)
            for scheme, p in sorted(self._owners.items())
        ]

    def factory(self, scheme: str) -> StorageFactory | None:
        """The factory for ``scheme``, asked of its plugin on first use; ``None`` when no
        plugin serves it. A plugin whose hook fails or answers nothing raises
        ``PluginError``."""
        scheme = scheme.lower()
        plugin = self._owners.get(scheme)
        if plugin is None:
            return None
        with self._lock:
            factory = plugin.factories.get(scheme)
            if factory is None:
                try:
                    factory = self._caller(plugin, "rdq_storage_factory")(scheme=scheme)
                except Exception as exc:
                    raise PluginError(plugin.name, _reason(exc)) from exc
                if factory is None:
                    raise PluginError(
                        plugin.name,
                        f"declares the scheme {scheme!r} but its rdq_storage_factory hook "
                        "gives no factory for it",
                    )
                plugin.factories[scheme] = factory
        return factory


def _reason(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


@functools.cache
def _plugins() -> Plugins:
    return Plugins()


_loading = threading.Lock()


def plugins() -> Plugins:
    """The process-wide plugin state, loaded on first call."""
    with _loading:
        return _plugins()


def reload_plugins() -> Plugins:
    """Forget the loaded plugins and load them again (after installing one at run time)."""
    with _loading:
        _plugins.cache_clear()
        return _plugins()


def installed_backends() -> tuple[list[Backend], list[BrokenPlugin]]:
    """Every backend that loaded, by scheme, and every plugin that failed, with its reason."""
    state = plugins()
    return state.backends(), list(state.broken)


def open_storage(url: str, **options: Any) -> Storage:
    """Build the store for ``url`` (not yet connected).

    Use it as ``async with open_storage(url) as storage:`` or call ``await storage.connect()``.
    The scheme picks the plugin (``memory://``, ``postgresql://``, ``redis://``,
    ``mongodb://``, ``sqlite://``, or any installed third-party scheme); ``options`` go to the
    plugin.

    A store that implements the bare protocol of an earlier contract comes back adapted (see
    :func:`rdq.spi.adapt`). Raises ``ConfigError`` for a URL without a scheme or an unknown
    scheme (the message lists the installed ones and any plugin that failed to load)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"not a storage URL: {url!r} (expected scheme://…, e.g. memory://)", key="storage"
        )
    scheme = urlsplit(url).scheme.lower()
    state = plugins()
    factory = state.factory(scheme)
    if factory is None:
        installed = ", ".join(state.schemes()) or "none"
        message = f"no storage plugin for scheme {scheme!r}; installed schemes: {installed}"
        if state.broken:
            broken = "; ".join(f"{b.name}: {b.error}" for b in state.broken)
            message += f"; plugins that failed to load: {broken}"
        raise ConfigError(message, key="storage")
    return adapt(factory(url, **options))


def __getattr__(name: str) -> Any:
    if name == "hookimpl":  # for plugins written for contract version 1 (rdq.spi has it now)
        from rdq.spi.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'rdq.plugins' has no attribute {name!r}")

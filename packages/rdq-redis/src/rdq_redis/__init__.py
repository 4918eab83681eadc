"""rdq's Redis storage: ``open_storage("redis://host:6379/0")``.

Every mutation is one Lua script (atomic by Redis's single-threaded execution); due-ness and
leases follow the server's ``TIME``. See ``docs/redis.md`` for the key layout, capabilities
and durability settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rdq_redis._store import RedisStorage
    from rdq_redis._url import RedisConfig

__all__ = ["RedisConfig", "RedisStorage"]


def __getattr__(name: str) -> Any:
    # Lazy, so that loading the plugin (rdq_redis._plugin) does not import the driver.
    if name == "RedisStorage":
        from rdq_redis._store import RedisStorage

        return RedisStorage
    if name == "RedisConfig":
        from rdq_redis._url import RedisConfig

        return RedisConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

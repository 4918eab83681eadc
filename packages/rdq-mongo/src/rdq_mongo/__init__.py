"""MongoDB storage for rdq, on PyMongo's native async API; claims by findAndModify.

Open it through rdq with a ``mongodb://`` or ``mongodb+srv://`` URL (see ``docs/mongo.md``)::

    mongodb://host:27017/mydb?rdq_prefix=rdq_

Importing this package does not import PyMongo; ``MongoStorage`` loads it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rdq_mongo._url import MongoConfig, parse_url

if TYPE_CHECKING:
    from rdq_mongo._store import MongoStorage

__all__ = ["MongoConfig", "MongoStorage", "parse_url"]


def __getattr__(name: str) -> Any:
    # Lazy, so that loading the plugin (rdq_mongo._plugin) does not import the driver.
    if name == "MongoStorage":
        from rdq_mongo._store import MongoStorage

        return MongoStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

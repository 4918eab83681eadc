"""MongoDB storage for rdq, on PyMongo's native async API; claims by findAndModify.

Open it through rdq with a ``mongodb://`` or ``mongodb+srv://`` URL (see ``docs/mongo.md``)::

    mongodb://host:27017/mydb?rdq_prefix=rdq_

Importing this package does not import PyMongo; ``MongoStorage`` loads it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rdq_mongo._store import MongoStorage

__all__ = ["MongoStorage"]


def __getattr__(name: str) -> Any:
    if name == "MongoStorage":
        from rdq_mongo._store import MongoStorage

        return MongoStorage
    raise AttributeError(f"module 'rdq_mongo' has no attribute {name!r}")

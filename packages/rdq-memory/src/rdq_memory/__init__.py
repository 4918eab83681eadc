"""The in-memory reference store for rdq: the executable model of the storage contract.

``memory://`` opens a private store; ``memory://NAME`` opens the store named NAME, shared by
everything in this process that opens the same URL. Nothing survives the process. The URL
takes the ``timeout`` option every store takes (``memory://NAME?timeout=5``).
"""

from rdq_memory._store import MemoryStorage, forget_named_stores
from rdq_memory._url import MemoryConfig, parse_url

__all__ = ["MemoryConfig", "MemoryStorage", "forget_named_stores", "parse_url"]

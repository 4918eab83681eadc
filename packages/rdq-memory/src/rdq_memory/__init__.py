"""The in-memory reference store for rdq: the executable model of the storage contract.

``memory://`` opens a private store; ``memory://NAME`` opens the store named NAME, shared by
everything in this process that opens the same URL. Nothing survives the process.
"""

from rdq_memory._store import MemoryStorage, forget_named_stores

__all__ = ["MemoryStorage", "forget_named_stores"]

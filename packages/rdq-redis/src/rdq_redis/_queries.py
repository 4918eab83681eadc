"""The Lua scripts, read from the wheel and registered with a client.

Each script is ``lua/_lib.lua`` followed by ``lua/<name>.lua``. redis-py's
``register_script`` calls it by SHA (``EVALSHA``) and loads it again after ``NOSCRIPT`` (a
restarted or failed-over server has an empty script cache), so the text crosses the wire only
when needed.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

__all__ = ["SCRIPT_NAMES", "Scripts", "script_source"]

SCRIPT_NAMES = (
    "enqueue",
    "claim_due",
    "extend_lease",
    "resolve",
    "complete_many",
    "dlq_page",
    "redrive",
    "purge",
    "purge_succeeded",
    "stats",
    "next_due",
)


@functools.cache
def script_source(name: str) -> str:
    """The full text of script ``name`` (the shared helpers first)."""
    lua = resources.files("rdq_redis") / "lua"
    return (lua / "_lib.lua").read_text("utf-8") + (lua / f"{name}.lua").read_text("utf-8")


class Scripts:
    """Every script, registered with one client: ``scripts.claim_due(keys=..., args=...)``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.by_name = {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}
        self.enqueue = self.by_name["enqueue"]
        self.claim_due = self.by_name["claim_due"]
        self.extend_lease = self.by_name["extend_lease"]
        self.resolve = self.by_name["resolve"]
        self.complete_many = self.by_name["complete_many"]
        self.dlq_page = self.by_name["dlq_page"]
        self.redrive = self.by_name["redrive"]
        self.purge = self.by_name["purge"]
        self.purge_succeeded = self.by_name["purge_succeeded"]
        self.stats = self.by_name["stats"]
        self.next_due = self.by_name["next_due"]

    async def load_all(self) -> None:
        """Load every script into the server's cache (``SCRIPT LOAD`` is idempotent)."""
        for script in self.by_name.values():
            script.sha = await self._client.script_load(script.script)

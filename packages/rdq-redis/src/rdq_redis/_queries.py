"""The Lua scripts, read from the wheel, registered with a client and run.

Each script is ``lua/_lib.lua`` followed by ``lua/<name>.lua``. redis-py's
``register_script`` calls it by SHA (``EVALSHA``) and loads it again after ``NOSCRIPT`` (a
restarted or failed-over server has an empty script cache), so the text crosses the wire only
when needed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

from rdq_redis._errors import translate_errors

__all__ = ["SCRIPT_NAMES", "Scripts", "script_source"]

SCRIPT_NAMES = (
    "enqueue",
    "import_tasks",
    "claim_due",
    "extend_lease",
    "resolve",
    "complete_many",
    "cancel",
    "task_page",
    "get_task",
    "redrive",
    "purge",
    "purge_succeeded",
    "stats",
    "dlq_groups",
    "next_due",
    "audit_append",
    "audit_page",
    "migrate_queue",
)


@functools.cache
def script_source(name: str) -> str:
    """The full text of script ``name`` (the shared helpers first)."""
    lua = resources.files("rdq_redis") / "lua"
    return (lua / "_lib.lua").read_text("utf-8") + (lua / f"{name}.lua").read_text("utf-8")


class Scripts:
    """Every script, registered with one client: ``await scripts.run("stats", keys, args)``."""

    def __init__(self, client: Any, address: str) -> None:
        self._client = client
        self._address = address
        self.by_name = {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}

    async def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run script ``name``; driver errors become ``rdq.errors`` (see ``translate_errors``)."""
        script = self.by_name[name]
        with translate_errors(self._address):
            try:
                return await script(keys=keys, args=args)
            except NoScriptError:
                # redis-py reloaded the script and the server lost it again before the call (a
                # flush or failover in between, or a Cluster node that missed the load): send
                # the text itself once. EVAL runs it exactly like EVALSHA would.
                return await self._client.eval(script.script, len(keys), *keys, *args)

    async def load_all(self) -> None:
        """Load every script into the server's cache (``SCRIPT LOAD`` is idempotent)."""
        with translate_errors(self._address):
            for script in self.by_name.values():
                script.sha = await self._client.script_load(script.script)

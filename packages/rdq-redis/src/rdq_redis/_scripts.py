"""The scripts registered with a client and run.

redis-py's ``register_script`` calls a script by SHA (``EVALSHA``) and loads it again after
``NOSCRIPT`` (a restarted or failed-over server has an empty script cache), so the text
(:func:`rdq_redis._queries.script_source`) crosses the wire only when needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from rdq_redis._errors import translate_errors
from rdq_redis._queries import SCRIPT_NAMES, script_source

__all__ = ["Scripts"]


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

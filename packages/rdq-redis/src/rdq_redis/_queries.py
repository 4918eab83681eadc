"""The Lua scripts' text, read from the wheel: each script is ``lua/_lib.lua`` (the shared
helpers) followed by ``lua/<name>.lua``. :mod:`rdq_redis._scripts` registers and runs them."""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["SCRIPT_NAMES", "script_source"]

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
"""Every script the package ships (``lua/<name>.lua``)."""


@functools.cache
def script_source(name: str) -> str:
    """The full text of script ``name`` (the shared helpers first)."""
    lua = resources.files("rdq_redis") / "lua"
    return (lua / "_lib.lua").read_text("utf-8") + (lua / f"{name}.lua").read_text("utf-8")

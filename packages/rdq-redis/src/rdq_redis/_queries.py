"""The Lua scripts' text, read from the wheel: each script is ``lua/_lib.lua`` (the shared
helpers), for the scripts that read control records ``lua/_flow.lua`` (the flow-control
helpers), for the claim ``lua/_order.lua`` (the claim orders of contract version 4), then
``lua/<name>.lua``. :class:`rdq_redis._connection.Scripts` registers and runs them."""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["FLOW_SCRIPTS", "ORDER_SCRIPTS", "SCRIPT_NAMES", "script_source"]

SCRIPT_NAMES = (
    "enqueue",
    "import_tasks",
    "claim_due",
    "extend_lease",
    "resolve",
    "complete_many",
    "discard_many",
    "cancel",
    "task_page",
    "get_task",
    "redrive",
    "purge",
    "purge_succeeded",
    "expire_tasks",
    "admit",
    "dedup_replace",
    "dedup_held",
    "stats",
    "dlq_groups",
    "next_due",
    "audit_append",
    "audit_page",
    "migrate_queue",
    "migrate_keys",
    "put_control",
    "delete_control",
    "list_controls",
    "retry_now",
    "heartbeat_worker",
    "list_workers",
    "remove_worker",
    "purge_workers",
    "add_counts",
    "read_counts",
    "purge_counts",
)
"""Every script the package ships (``lua/<name>.lua``)."""

FLOW_SCRIPTS = frozenset({"claim_due", "next_due", "list_controls", "extend_lease"})
"""The scripts that read control records (an extension of a lapsed lease checks the
concurrency limits): ``lua/_flow.lua`` goes in front of them."""

ORDER_SCRIPTS = frozenset({"claim_due"})
"""The scripts that claim in a fair or aged order: ``lua/_order.lua`` goes after
``lua/_flow.lua`` in front of them."""


@functools.cache
def script_source(name: str) -> str:
    """The full text of script ``name`` (the shared helpers first)."""
    lua = resources.files("rdq_redis") / "lua"
    parts = [
        "_lib.lua",
        *(["_flow.lua"] if name in FLOW_SCRIPTS else []),
        *(["_order.lua"] if name in ORDER_SCRIPTS else []),
        f"{name}.lua",
    ]
    return "".join((lua / part).read_text("utf-8") for part in parts)

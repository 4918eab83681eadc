"""Which clauses apply to a store: those of the contract versions it implements and of the
capabilities it advertises. The others skip as "not implemented", naming what is missing.

A clause group declares what it checks as class attributes: ``capability`` (a flag of
:class:`~rdq.spi.Capabilities`; the group runs only for a store that advertises it) or
``since`` (a contract version; the group runs only for a store of that version or newer).
A single test that needs more than its group marks itself with :func:`needs`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from rdq.spi import FEATURES, Capabilities

__all__ = ["NOT_IMPLEMENTED", "gate", "needs"]

NOT_IMPLEMENTED = "not implemented: "
"""The start of the reason of every skip for a capability or version the store lacks."""

F = TypeVar("F", bound=Callable[..., Any])


def needs(*capabilities: str, since: int = 1) -> Callable[[F], F]:
    """Mark a test that needs ``capabilities`` (and contract version ``since``) beyond what
    its clause group needs."""
    for name in capabilities:
        if name not in FEATURES:
            raise ValueError(f"no capability named {name!r}")
    return pytest.mark.rdq_needs(capabilities=capabilities, since=since)


def _defining_group(cls: type, name: str) -> type | None:
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def requirements(cls: type, test: str, marks: list[pytest.Mark]) -> tuple[set[str], int]:
    """The capabilities and the contract version ``cls.test`` needs."""
    group = _defining_group(cls, test)
    capabilities: set[str] = set()
    since = 1
    if group is not None:
        capability = getattr(group, "capability", None)
        if capability:
            capabilities.add(capability)
        since = max(since, getattr(group, "since", 1))
    for mark in marks:
        capabilities.update(mark.kwargs.get("capabilities", ()))
        since = max(since, mark.kwargs.get("since", 1))
    return capabilities, since


def missing(offered: Capabilities, capabilities: set[str], since: int) -> str | None:
    """Why a store advertising ``offered`` does not implement what a clause needs (``None``
    when it does)."""
    for name in sorted(capabilities):
        if not getattr(offered, name):
            feature = FEATURES[name]
            return (
                f"{NOT_IMPLEMENTED}capability {name!r} (contract version {feature.since}); "
                f"without it {feature.without}"
            )
    if offered.contract_version < since:
        return (
            f"{NOT_IMPLEMENTED}contract version {since} (the store implements version "
            f"{offered.contract_version})"
        )
    return None


def gate(request: pytest.FixtureRequest) -> None:
    """Skip the requesting test unless the store under test implements what it needs."""
    node = request.node
    cls = getattr(node, "cls", None)
    if cls is None:
        return
    name = getattr(node, "originalname", None) or node.name
    capabilities, since = requirements(cls, name, list(node.iter_markers("rdq_needs")))
    if (not capabilities and since <= 1) and "storage" not in request.fixturenames:
        return
    offered: Capabilities = request.getfixturevalue("storage").capabilities()
    accounting = request.config.pluginmanager.get_plugin("rdq-kit-accounting")
    if accounting is not None:
        accounting.note_version(node, offered.contract_version)
    reason = missing(offered, capabilities, since)
    if reason is not None:
        pytest.skip(reason)

"""Where the operator commands act: a store directly, or a server node over HTTP.

Both take the same typed requests (:class:`Listing`, :class:`Action`, :class:`AuditQuery`) and
give the same plain-data answers (envelopes and stats as JSON-ready dicts), so the commands
print the same tables and JSON either way.

This module holds those requests and the :class:`Target` they go to; the two targets are
:class:`~rdq.cli._direct_target.DirectTarget` (a store) and
:class:`~rdq.cli._http_target.HttpTarget` (a node), each in its own module (they import this
one; :func:`rdq.cli._options.open_target` picks one).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from rdq.admin import TaskSelector
from rdq.errors import RdqError, ValidationError
from rdq.spi import AuditFilter, DLQFilter, Selector, Status, TaskFilter

__all__ = [
    "Action",
    "AuditQuery",
    "Listing",
    "Target",
    "TargetError",
    "status_of",
]

Progress = Callable[[int, int | None], None] | None
OpProgress = Callable[[dict[str, Any]], None] | None
"""Called with a paced redrive (as ``GET /v1/queues/{q}/redrives/{id}`` answers it) as it
goes."""
Verb = Literal["redrive", "purge", "cancel", "retry_now"]
_VERBS: tuple[Verb, ...] = ("redrive", "purge", "cancel", "retry_now")
Listed = tuple[list[dict[str, Any]], str | None]
"""Rows, and what the store lacks (``None`` when it offers what the listing needs)."""


class TargetError(RdqError):
    """The server answered with an error, or could not be reached."""


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of a queue's tasks: the DLQ (``filter`` a :class:`DLQFilter` or None) or the
    tasks in one status (``filter`` a :class:`TaskFilter`)."""

    queue: str
    filter: DLQFilter | TaskFilter | None
    limit: int
    cursor: str | None
    include_attempts: bool


@dataclass(frozen=True, slots=True)
class Action:
    """A redrive or purge (``selector`` a :class:`Selector`) or a cancel or retry now
    (``selector`` a :class:`TaskSelector`)."""

    verb: Verb
    queue: str
    selector: Selector | TaskSelector
    dry_run: bool
    reason: str | None = None
    force: bool = False
    """Act on a queue nothing knows yet (a name meant for the future), not refused as a
    typo."""

    def __post_init__(self) -> None:
        if self.verb not in _VERBS:
            raise ValidationError(f"must be one of {', '.join(_VERBS)}", field="action")
        wanted = TaskSelector if self.verb in ("cancel", "retry_now") else Selector
        if not isinstance(self.selector, wanted):
            raise ValidationError(f"{self.verb} needs a {wanted.__name__}", field="selector")


@dataclass(frozen=True, slots=True)
class AuditQuery:
    filter: AuditFilter | None
    limit: int
    cursor: str | None


class Target(abc.ABC):
    """The operations the commands need."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    @abc.abstractmethod
    async def stats(self, queues: list[str]) -> list[dict[str, Any]]:
        """Stats of ``queues``, or of every queue when empty."""

    @abc.abstractmethod
    async def get(self, task_id: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def retention(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        """What retention archived and removed, by queue (as ``GET
        /v1/queues/{q}/retention`` says it), for the queues that have a record."""

    @abc.abstractmethod
    async def page(self, listing: Listing) -> tuple[list[dict[str, Any]], str | None]: ...

    @abc.abstractmethod
    def export(self, queue: str, chosen: DLQFilter | None) -> AsyncIterator[list[dict[str, Any]]]:
        """The DLQ of ``queue`` (what ``chosen`` selects), oldest first, every attempt
        included and every payload whole (one kept by reference read back), in parts."""

    @abc.abstractmethod
    async def groups(self, queue: str) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    async def outlooks(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What holds each of ``tasks`` (as :meth:`get` and :meth:`page` give them) and what
        happens next, as :class:`rdq.admin.Outlook` says it, in their order."""

    @abc.abstractmethod
    async def pauses(self, queue: str | None) -> Listed:
        """Every paused key of ``queue`` (of every queue), with what it holds."""

    @abc.abstractmethod
    async def preview(self, action: Action) -> dict[str, Any]:
        """What ``action`` would act on now, as :class:`rdq.admin.Preview` says it
        (``count``, ``skipped``, ``hint``); ``UnknownName`` (or a ``TargetError`` saying so)
        for a queue nothing knows, unless the action is forced."""

    @abc.abstractmethod
    async def act(self, action: Action, progress: Progress = None) -> dict[str, Any]:
        """Run ``action``; what it came to: ``matched`` (when it began), ``done`` and
        ``gone`` (matched, then gone before it reached them); a purge that archived says
        ``archived`` and ``archive`` (where)."""

    @abc.abstractmethod
    async def submit(self, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Submit the task ``request`` describes (the body of ``POST /v1/tasks``: handler_ref,
        queue, id, payload, headers, delay, priority, dedup_*); what the submission did
        (``added``, ``skipped``, ``replaced``, ``extended``) and the task that holds it."""

    @abc.abstractmethod
    async def import_dead(
        self, queue: str, tasks: list[dict[str, Any]], reason: str | None
    ) -> dict[str, Any]:
        """Put the DEAD tasks of ``queue`` among ``tasks`` (envelopes as JSON-ready dicts) back
        into its DLQ; what :class:`rdq.admin.ImportReport` says (``imported``, ``existing``,
        ``skipped``)."""

    @abc.abstractmethod
    async def audit(self, query: AuditQuery) -> tuple[list[dict[str, Any]], str | None]: ...

    # --- flow control and the fleet --------------------------------------------------------

    @abc.abstractmethod
    async def controls(self, queue: str) -> Listed: ...

    @abc.abstractmethod
    async def set_paused(
        self,
        queue: str,
        handler: str | None,
        dependency: str | None,
        paused: bool,
        reason: str | None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Pause (or resume) a handler, a dependency, or the whole queue; the control after.
        A name nothing knows is refused (``UnknownName``) unless ``force``."""

    @abc.abstractmethod
    async def breakers(self, queue: str | None) -> Listed: ...

    @abc.abstractmethod
    async def limits(self, queue: str | None) -> Listed:
        """The declared limits of ``queue`` (of every queue), with their use and what waits."""

    @abc.abstractmethod
    async def set_breaker(
        self,
        queue: str,
        key: str,
        change: Literal["open", "close"],
        reason: str | None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Open or close the breaker of ``key`` by hand; the breaker after. A name nothing
        knows is refused (``UnknownName``) unless ``force``."""

    @abc.abstractmethod
    async def workers(self) -> tuple[list[dict[str, Any]], str | None, str | None]:
        """The workers, the store's now (ISO text) and what the store lacks."""

    @abc.abstractmethod
    async def redrives(self, queue: str | None) -> Listed: ...

    @abc.abstractmethod
    async def start_paced(
        self, queue: str, selector: Selector, rate: float, reason: str | None, detach: bool
    ) -> dict[str, Any]:
        """Start a paced redrive: driven by whoever follows it (:meth:`follow`), or, with
        ``detach``, left to a node (through a node: that node drives it either way)."""

    @abc.abstractmethod
    async def follow(self, op: dict[str, Any], progress: OpProgress = None) -> dict[str, Any]:
        """Until the paced redrive ``op`` is finished: drive it here (on a store) or watch
        the node drive it; return it as it ended."""

    @abc.abstractmethod
    async def cancel_redrive(
        self, queue: str, op_id: str, reason: str | None
    ) -> dict[str, Any]: ...

    async def drivers(self, op: dict[str, Any]) -> list[str]:
        """Who will drive the detached paced redrive ``op``: the live nodes on the store."""
        rows, _, unsupported = await self.workers()
        if unsupported is not None:
            return []
        return [w["id"] for w in rows if w["kind"] == "node" and w["status"] == "live"]


def status_of(text: str) -> Status:
    """A :class:`Status` from its name, any letter case."""
    try:
        return Status(text.upper())
    except ValueError:
        names = ", ".join(s.value for s in Status)
        raise ValidationError(f"must be one of {names}", field="status") from None

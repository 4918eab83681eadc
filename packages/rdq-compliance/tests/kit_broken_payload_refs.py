"""Broken stores for the clauses of contract version 5's payload references
(``held_payload_refs``): indexes that miss a status, an import or a replacement, or keep the
references of deleted tasks. ``BROKEN_STORES`` maps each to the kit tests that must fail."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from kit_broken_stores import _Broken
from rdq.spi import PAYLOAD_REF_HEADER, Envelope, Status


class HoldsOnlyLiveTasksReferences(_Broken):
    """Looks at PENDING and IN_FLIGHT tasks only: a DEAD task's blob would be deleted."""

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        live = (Status.PENDING, Status.IN_FLIGHT)
        with self._state.lock:
            return {
                ref
                for r in self._state.tasks.values()
                if r.task.status in live and (ref := r.task.headers.get(PAYLOAD_REF_HEADER)) in refs
            }


class HoldsEveryReferenceAskedAbout(_Broken):
    """Says every reference is held: no blob is ever deleted (they leak)."""

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        return set(refs)


class _IndexedAtAdmission(_Broken):
    """An index of the references written when a task is admitted, by task id."""

    def _index(self) -> dict[str, str]:
        if not hasattr(self, "_refs"):
            self._refs: dict[str, str] = {}
        return self._refs

    async def _enqueue_batch(self, tasks: list[Envelope], delay: timedelta | None) -> list[bool]:
        flags = await super()._enqueue_batch(tasks, delay)
        for task, stored in zip(tasks, flags, strict=True):
            ref = task.headers.get(PAYLOAD_REF_HEADER)
            if stored and ref is not None:
                self._index()[task.id] = ref
        return flags


class MissesReplacedHeaders(_IndexedAtAdmission):
    """Answers from what tasks carried when admitted: a replacement's new reference is not
    seen (its blob would be deleted under a waiting task)."""

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        with self._state.lock:
            present = set(self._state.tasks)
        return {ref for task_id, ref in self._index().items() if task_id in present and ref in refs}


class MissesImportedTasks(MissesReplacedHeaders):
    """The same index, which an import never writes to."""


class KeepsReferencesOfDeletedTasks(_IndexedAtAdmission):
    """An index never told of deletions: the blobs of purged and expired tasks leak."""

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        return {ref for ref in self._index().values() if ref in refs}


class TakesAnyReferences(_Broken):
    """Answers without checking what it was asked."""

    async def held_payload_refs(self, refs: Sequence[str]) -> set[str]:  # type: ignore[override]
        if isinstance(refs, str):
            refs = [refs]
        return await self._held_payload_refs(list(refs))


BROKEN_STORES: dict[type, list[str]] = {
    HoldsOnlyLiveTasksReferences: ["test_a_reference_is_held_by_a_task_in_every_status_and_queue"],
    HoldsEveryReferenceAskedAbout: [
        "test_a_reference_no_task_carries_is_not_held",
        "test_a_reference_is_released_once_every_task_carrying_it_is_deleted",
    ],
    MissesReplacedHeaders: ["test_a_replacement_moves_the_holders_reference"],
    MissesImportedTasks: ["test_an_imported_task_holds_its_reference"],
    KeepsReferencesOfDeletedTasks: [
        "test_a_reference_is_released_once_every_task_carrying_it_is_deleted",
        "test_a_reference_is_released_when_retention_expires_its_task",
    ],
    TakesAnyReferences: ["test_held_payload_refs_with_bad_input_raises_validation_error"],
}

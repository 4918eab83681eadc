"""Broken stores for the clauses of ``discard_succeeded`` (a completion that deletes its task).

Like ``kit_broken_stores``: each is a small subclass of the reference memory store that
breaks exactly one promise; ``BROKEN_STORES`` maps it to the kit tests that must fail.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec

from kit_broken_stores import _Broken
from rdq.errors import NotFound, StaleClaim
from rdq.spi import (
    AdmitOutcome,
    Admitted,
    Attempt,
    Completion,
    Dedup,
    Envelope,
    Stats,
    Status,
)


class DiscardsByKeepingTheTask(_Broken):
    """Marks the task SUCCEEDED, as a plain completion does, and keeps it."""

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        await self._complete(task_id, token, attempt)


class DiscardsWithoutFencing(_Broken):
    """Deletes the task whatever the token (a lost lease's holder deletes the task another
    worker runs)."""

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        state = self._state
        with state.lock:
            record = state.tasks.get(task_id)
            if record is None:
                raise NotFound(task_id)
            state.delete(record)


class DiscardsSilentlyWhatIsGone(_Broken):
    """Says nothing of a task that is not there (a delete of no row taken as done)."""

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        if task_id in self._state.tasks:
            await super()._discard_completed(task_id, token, attempt)

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        results = await super()._complete_many(completions)
        return [
            None if c.discard and isinstance(r, NotFound) else r
            for c, r in zip(completions, results, strict=True)
        ]


class DiscardsWhatIsNotLeased(_Broken):
    """Fences only a live claim: a task that is not IN_FLIGHT (pending, finished) is deleted
    whatever the token (``DELETE … WHERE status <> 'IN_FLIGHT' OR token = $2``)."""

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        state = self._state
        with state.lock:
            record = state.tasks.get(task_id)
            if record is not None and record.task.status != Status.IN_FLIGHT:
                state.delete(record)
                return
        await super()._discard_completed(task_id, token, attempt)

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        results = []
        for item in completions:
            try:
                if item.discard:
                    await self._discard_completed(item.task_id, item.token, item.attempt)
                else:
                    await self._complete(item.task_id, item.token, item.attempt)
            except (StaleClaim, NotFound) as exc:
                results.append(exc)
            else:
                results.append(None)
        return results


class DiscardsTheWholeBatchAlike(_Broken):
    """Treats a batch as the first completion says: all discarded or all kept."""

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        first = completions[0].discard
        return await super()._complete_many(
            [Completion(c.task_id, c.token, c.attempt, first) for c in completions]
        )


class DiscardsButCountsItInFlight(_Broken):
    """Deletes the task but not its share of a count kept on the side: the queue's stats
    still count it in flight."""

    _ghosts: dict[str, int]

    def _ghost(self, task_id: str) -> None:
        if not hasattr(self, "_ghosts"):
            self._ghosts = {}
        record = self._state.tasks.get(task_id)
        if record is not None:
            queue = record.task.queue
            self._ghosts[queue] = self._ghosts.get(queue, 0) + 1

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._ghost(task_id)
        await super()._discard_completed(task_id, token, attempt)

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        for item in completions:
            if item.discard:
                self._ghost(item.task_id)
        return await super()._complete_many(completions)

    async def _stats(self, queue: str) -> Stats:
        stats = await super()._stats(queue)
        ghosts = getattr(self, "_ghosts", {}).get(queue, 0)
        return msgspec.structs.replace(stats, in_flight=stats.in_flight + ghosts)


class DiscardsButKeepsTheKey(_Broken):
    """Deletes the task but leaves its dedup key's record behind, still held by it."""

    _kept: dict[str, Admitted]

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        state = self._state
        with state.lock:
            key = state.dedup_of.get(task_id)
            record = state.tasks.get(task_id)
            await super()._discard_completed(task_id, token, attempt)
            if key is not None and record is not None:
                if not hasattr(self, "_kept"):
                    self._kept = {}
                self._kept[key] = Admitted(
                    outcome=AdmitOutcome.SKIPPED, task_id=task_id, queue=record.task.queue
                )

    async def _admit(self, task: Envelope, dedup: Dedup, delay: timedelta | None) -> Admitted:
        kept = getattr(self, "_kept", {}).get(dedup.key)
        if kept is not None and task.id not in self._state.tasks:
            return kept
        return await super()._admit(task, dedup, delay)


class DiscardsButKeepsTheReference(_Broken):
    """Deletes the task but still says its payload reference is held (an index entry left
    behind)."""

    _left: set[str]

    def _remember(self, task_id: str) -> None:
        if not hasattr(self, "_left"):
            self._left = set()
        record = self._state.tasks.get(task_id)
        if record is not None and (ref := record.task.headers.get("rdq-payload-ref")):
            self._left.add(ref)

    async def _discard_completed(self, task_id: str, token: str, attempt: Attempt) -> None:
        self._remember(task_id)
        await super()._discard_completed(task_id, token, attempt)

    async def _complete_many(
        self, completions: list[Completion]
    ) -> list[StaleClaim | NotFound | None]:
        for item in completions:
            if item.discard:
                self._remember(item.task_id)
        return await super()._complete_many(completions)

    async def _held_payload_refs(self, refs: list[str]) -> set[str]:
        held = await super()._held_payload_refs(refs)
        return held | (set(refs) & getattr(self, "_left", set()))


BROKEN_STORES: dict[type, list[str]] = {
    DiscardsByKeepingTheTask: ["test_complete_with_discard_deletes_the_task_and_frees_its_id"],
    DiscardsWithoutFencing: [
        "test_complete_with_discard_and_a_stale_token_raises_and_deletes_nothing"
    ],
    DiscardsSilentlyWhatIsGone: [
        "test_complete_with_discard_of_a_task_that_is_gone_raises_not_found"
    ],
    DiscardsWhatIsNotLeased: ["test_a_task_that_is_not_claimed_is_never_discarded"],
    DiscardsTheWholeBatchAlike: ["test_complete_many_mixes_completions_that_discard_and_that_keep"],
    DiscardsButCountsItInFlight: ["test_a_discarded_task_leaves_the_counts"],
    DiscardsButKeepsTheKey: ["test_a_discarded_task_frees_its_dedup_key"],
    DiscardsButKeepsTheReference: ["test_a_discarded_task_releases_its_payload_reference"],
}

"""Controls that change (capability ``control``): read, changed and written back as the
engine's compare-and-set loop does; limits raised, lowered, deleted; rate periods other than a
second; the claim order of a queue whose fair prefix or aging changes."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from rdq.errors import ControlConflict
from rdq.spi import QUEUE_KEY, Control, Storage
from rdq_compliance._flow_support import (
    claim_ids,
    claim_stamps,
    control_of,
    fill,
    update,
)
from rdq_compliance._gates import needs
from rdq_compliance._support import LONG_LEASE, new_task
from rdq_compliance.clauses.fairness import claim_sets, put_queue_control, waiting

__all__ = ["ControlChangeClauses"]

PER_HOUR = 3600.0


async def _claims_over(
    storage: Storage, queue: str, seconds: float, *, pause: float = 0.02
) -> list[datetime]:
    """Claim ``queue`` again and again for ``seconds`` of the storage clock; return when the
    store made each claim (by its clock)."""
    start = await storage.now()
    stamps: list[datetime] = []
    while (await storage.now() - start).total_seconds() <= seconds:
        stamps += claim_stamps(await storage.claim_due(queue, 5, LONG_LEASE), LONG_LEASE)
        await asyncio.sleep(pause)
    return sorted(stamps)


def _most_in_a_window(stamps: list[datetime], window: timedelta) -> int:
    return max((sum(t <= s < t + window for s in stamps) for t in stamps), default=0)


class ControlChangeClauses:
    """A control read, changed and written back keeps what the store owns: ``version``,
    ``updated_at`` and ``in_use`` are the store's, whatever the written record carries, and the
    write replaces every field; racing read-modify-write loops that retry with the record a
    ``ControlConflict`` carries lose no update. A change of ``rate``, ``per`` or ``burst`` — any
    one of them — refills the bucket, and no other change does; a rate holds over any window
    of its period, longer or shorter than a second. A limit raised, lowered or deleted applies
    at the next claim, and a deleted control holds nothing back. A task held back by one of
    its keys takes nothing from its others, a task with several rate-limited keys a token of
    each, and a claim reaches the free tasks behind any number of held-back ones. A queue's
    claim order follows its fair prefix and its aging as they are now."""

    capability = "control"
    since = 3

    @pytest.mark.asyncio
    async def test_a_control_read_changed_and_written_back_keeps_what_the_store_owns(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 5, keys=["dep:psp"])
        await storage.put_control(
            Control(queue=queue, key="dep:psp", gate=4, concurrency=3), expected_version=0
        )
        assert len(await claim_ids(storage, queue, limit=2)) == 2
        read = await control_of(storage, queue, "dep:psp")
        assert read is not None
        assert (read.gate, read.in_use, read.version) == (2, 2, 1), "what claims took, as read"
        before = await storage.now()
        written = Control(
            **{name: getattr(read, name) for name in read.__struct_fields__}
            | {"state": {"breaker": "open"}, "in_use": 99}
        )
        stored = await storage.put_control(written, expected_version=read.version)
        after = await storage.now()
        assert stored.version == read.version + 1, "the store's version, not the one written"
        assert stored.updated_at is not None and before <= stored.updated_at <= after, (
            "updated_at is the store's now, not the one read and written back"
        )
        again = await control_of(storage, queue, "dep:psp")
        assert again is not None
        assert (again.gate, again.concurrency, again.state) == (2, 3, {"breaker": "open"})
        assert (again.in_use, again.version, again.updated_at) == (2, 2, stored.updated_at), (
            "in_use is counted, never stored"
        )

    @pytest.mark.asyncio
    async def test_put_control_replaces_every_field_and_a_plain_record_holds_nothing_back(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 6, keys=["dep:psp"])
        full = await storage.put_control(
            Control(
                queue=queue,
                key="dep:psp",
                paused=True,
                gate=1,
                concurrency=1,
                rate=1,
                per=PER_HOUR,
                burst=1,
                state={"breaker": "open", "since": "2030-01-01T00:00:00Z"},
            ),
            expected_version=0,
        )
        plain = await storage.put_control(
            Control(queue=queue, key="dep:psp"), expected_version=full.version
        )
        got = await control_of(storage, queue, "dep:psp")
        assert got is not None
        fields = (got.paused, got.gate, got.concurrency, got.rate, got.per, got.burst, got.state)
        assert fields == (False, None, None, None, 1.0, None, {}), (
            f"every field as written, none kept from the record before: {fields}"
        )
        assert got.version == plain.version == full.version + 1
        assert len(await claim_ids(storage, queue)) == 6, "a record without a limit limits nothing"

    @pytest.mark.asyncio
    async def test_racing_read_modify_write_loops_lose_no_update(
        self, storage: Storage, queue: str
    ) -> None:
        """Each loop reads the record, adds itself to its state and writes it over the version
        read; on a conflict it goes on from the record the conflict carries (as the engine
        does)."""
        base = await storage.put_control(
            Control(queue=queue, key="k", state={"n": 0, "by": []}), expected_version=0
        )
        loops = 8

        async def add(n: int) -> int:
            found = await control_of(storage, queue, "k")
            for tries in range(1, 10 * loops):
                assert found is not None, "the record is there: a conflict carries it"
                state = found.state
                changed = Control(
                    queue=queue, key="k", state={"n": state["n"] + 1, "by": [*state["by"], n]}
                )
                await asyncio.sleep(0)  # every loop reads before any writes
                try:
                    await storage.put_control(changed, expected_version=found.version)
                except ControlConflict as conflict:
                    found = conflict.found
                    await asyncio.sleep(0)
                    continue
                return tries
            raise AssertionError(f"loop {n} never got its update in")

        await asyncio.gather(*(add(n) for n in range(loops)))
        final = await control_of(storage, queue, "k")
        assert final is not None
        assert final.state["n"] == loops and sorted(final.state["by"]) == list(range(loops))
        assert final.version == base.version + loops

    @pytest.mark.asyncio
    async def test_a_change_of_per_or_of_burst_alone_refills_the_bucket(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 10, keys=["api"])
        await storage.put_control(
            Control(queue=queue, key="api", rate=1, per=PER_HOUR, burst=1), expected_version=0
        )
        assert len(await claim_ids(storage, queue)) == 1
        assert await claim_ids(storage, queue) == []
        await update(storage, queue, "api", per=PER_HOUR / 2)
        assert len(await claim_ids(storage, queue)) == 1, "a change of per refills the bucket"
        assert await claim_ids(storage, queue) == []
        await update(storage, queue, "api", burst=3)
        assert len(await claim_ids(storage, queue)) == 3, "a change of burst refills it"

    @pytest.mark.asyncio
    async def test_a_change_of_anything_but_the_rate_keeps_the_bucket(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 10, keys=["api"])
        await storage.put_control(
            Control(queue=queue, key="api", rate=1, per=PER_HOUR, burst=2), expected_version=0
        )
        assert len(await claim_ids(storage, queue)) == 2
        for change in (
            {"state": {"breaker": "closed"}},
            {"paused": True},
            {"paused": False, "concurrency": 50},
            {"gate": 20},
        ):
            await update(storage, queue, "api", **change)
            assert await claim_ids(storage, queue) == [], f"{change} refilled the bucket"

    @pytest.mark.asyncio
    async def test_a_rate_limit_holds_over_any_window_of_a_period_longer_than_a_second(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 30, keys=["api"])
        await storage.put_control(
            Control(queue=queue, key="api", rate=2, per=2.5, burst=1), expected_version=0
        )
        stamps = await _claims_over(storage, queue, 3.0)
        most = _most_in_a_window(stamps, timedelta(seconds=2.5))
        assert most <= 2 + 1, f"{most} claims in 2.5 s: rate 2 per 2.5 s, burst 1"
        assert len(stamps) >= 2, f"refilled as the store's clock runs: {len(stamps)} in 3 s"

    @pytest.mark.asyncio
    async def test_a_rate_limit_of_a_period_shorter_than_a_second_refills_that_fast(
        self, storage: Storage, queue: str
    ) -> None:
        """2 per 0.5 s is 4 a second: over 3 s of the store's clock, a claimant that keeps
        asking gets the 4 of the full bucket and about 12 more (a bucket of 4 loses nothing
        to a claimant that asks at least once a second), never more than 2 + 4 in half a
        second; a period taken for a whole second would give at most 4 + 6."""
        await fill(storage, queue, 60, keys=["api"])
        await storage.put_control(
            Control(queue=queue, key="api", rate=2, per=0.5, burst=4), expected_version=0
        )
        stored = await control_of(storage, queue, "api")
        assert stored is not None and stored.per == 0.5, "per is kept as given"
        stamps = await _claims_over(storage, queue, 3.0)
        most = _most_in_a_window(stamps, timedelta(seconds=0.5))
        assert most <= 2 + 4, f"{most} claims in 0.5 s: rate 2 per 0.5 s, burst 4"
        assert len(stamps) >= 12, (
            f"4 claims a second refill the bucket: {len(stamps)} in 3 s is too few"
        )

    @pytest.mark.asyncio
    async def test_a_deleted_control_holds_nothing_back_and_a_new_one_starts_afresh(
        self, storage: Storage, queue: str
    ) -> None:
        await fill(storage, queue, 8, keys=["api"])
        limited = await storage.put_control(
            Control(queue=queue, key="api", rate=1, per=PER_HOUR, burst=1, concurrency=1),
            expected_version=0,
        )
        assert len(await claim_ids(storage, queue)) == 1
        assert await storage.delete_control(queue, "api", expected_version=limited.version)
        assert len(await claim_ids(storage, queue, limit=3)) == 3, "nothing holds them back"
        again = await storage.put_control(
            Control(queue=queue, key="api", rate=1, per=PER_HOUR, burst=1), expected_version=0
        )
        assert again.version == 1, "a new record"
        assert len(await claim_ids(storage, queue)) == 1, "its bucket starts full"
        paused = await storage.put_control(
            Control(queue=queue, key=QUEUE_KEY, paused=True), expected_version=0
        )
        await storage.delete_control(queue, "api", expected_version=again.version)
        assert await claim_ids(storage, queue) == []
        assert await storage.delete_control(queue, QUEUE_KEY, expected_version=paused.version)
        assert len(await claim_ids(storage, queue)) == 3, "a deleted pause holds nothing back"

    @pytest.mark.asyncio
    async def test_a_task_held_back_by_one_of_its_keys_takes_nothing_from_its_others(
        self, storage: Storage, queue: str
    ) -> None:
        held = await fill(storage, queue, 3, keys=["api", "dep:psp"])
        free = await fill(storage, queue, 3, keys=["api"])
        for control in (
            Control(queue=queue, key="api", gate=2, rate=1, per=PER_HOUR, burst=2),
            Control(queue=queue, key="dep:psp", paused=True),
        ):
            await storage.put_control(control, expected_version=0)
        taken = await claim_ids(storage, queue)
        assert sorted(taken) == sorted(free[:2]), (
            f"the held-back tasks spent none of api's gate or bucket: {taken}"
        )
        assert set(taken).isdisjoint(held)

    @pytest.mark.asyncio
    async def test_a_task_with_several_rate_limited_keys_takes_a_token_of_each(
        self, storage: Storage, queue: str
    ) -> None:
        both = await fill(storage, queue, 2, keys=["api:a", "api:b"])
        only_b = await fill(storage, queue, 3, keys=["api:b"])
        for key, burst in (("api:a", 5), ("api:b", 3)):
            await storage.put_control(
                Control(queue=queue, key=key, rate=1, per=PER_HOUR, burst=burst),
                expected_version=0,
            )
        taken = await claim_ids(storage, queue)
        assert sorted(taken) == sorted([*both, only_b[0]]), (
            f"b's 3 tokens: two taken by the tasks with both keys, not {taken}"
        )

    @pytest.mark.asyncio
    async def test_a_claim_reaches_the_free_tasks_behind_any_number_of_held_back_ones(
        self, storage: Storage, queue: str
    ) -> None:
        held = [new_task(queue, keys=[f"dep:{n % 3}"]) for n in range(150)]
        if storage.capabilities().batch_enqueue:
            for start in range(0, len(held), 50):
                await storage.enqueue_batch(held[start : start + 50])
        else:
            for task in held:
                await storage.enqueue(task)
        free = await fill(storage, queue, 4)
        for control in (
            Control(queue=queue, key="dep:0", paused=True),
            Control(queue=queue, key="dep:1", gate=0),
            Control(queue=queue, key="dep:2", concurrency=0),
        ):
            await storage.put_control(control, expected_version=0)
        taken = await claim_ids(storage, queue, limit=3)
        assert len(taken) == 3 and set(taken) <= set(free), (
            f"150 held-back tasks due first are skipped, never waited on: {taken}"
        )

    @pytest.mark.asyncio
    @needs("fair_shares")
    async def test_a_queue_whose_fair_prefix_changes_is_shared_among_the_new_groups(
        self, storage: Storage, queue: str
    ) -> None:
        deep = await waiting(storage, queue, 6, since=300, keys=["tenant:d", "region:east"])
        (other,) = await waiting(storage, queue, 1, since=100, keys=["tenant:s", "region:east"])
        (west,) = await waiting(storage, queue, 1, since=90, keys=["tenant:d", "region:west"])
        await put_queue_control(storage, queue, fair="tenant:")
        assert await claim_sets(storage, queue, 2, 1) == [{deep[0], other}], "groups by tenant"
        await update(storage, queue, QUEUE_KEY, fair="region:")
        assert await claim_sets(storage, queue, 2, 1) == [{deep[1], west}], (
            "the queue is shared among its regions now: west's one task beside east's oldest"
        )

    @pytest.mark.asyncio
    @needs("priority_aging")
    async def test_a_queue_whose_aging_changes_is_claimed_by_the_new_aging(
        self, storage: Storage, queue: str
    ) -> None:
        now = await storage.now()
        (low1,) = await waiting(storage, queue, 1, since=100, prefix="l1", now=now)
        (low2,) = await waiting(storage, queue, 1, since=99, prefix="l2", now=now)
        (high,) = await waiting(storage, queue, 1, since=60, priority=5, prefix="h", now=now)
        await put_queue_control(storage, queue, aging=1.0)
        assert await claim_sets(storage, queue, 1, 1) == [{low1}], "aged -100 s before -65 s"
        await update(storage, queue, QUEUE_KEY, aging=10.0)
        assert await claim_sets(storage, queue, 1, 1) == [{high}], (
            f"aged -110 s before -99 s ({low2})"
        )

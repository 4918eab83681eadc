"""Submitting tasks: ids, idempotency, delays, headers, batches and the blocking client."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import pytest

import rdq
from rdq.spi import RetryOverride, Status, bounds
from rdq.spi.bounds import _arguments as arguments

from .conftest import fast_worker, running, wait_status


@pytest.mark.asyncio
async def test_submit_stores_the_envelope_fields(storage, queue):
    app = rdq.App()

    @app.handler("send_email", queue=queue)
    async def send_email(payload: dict) -> None: ...

    client = rdq.Client(storage, app)
    sub = await client.submit(
        send_email,  # a registered function stands for its name
        {"to": "ada@example.com"},
        headers={"trace-id": "abc"},
        retry=RetryOverride(max_attempts=2),
    )
    assert sub.created and sub.queue == queue
    task = await client.get(sub.id)
    assert task.handler_ref == "send_email"
    assert task.payload == {"to": "ada@example.com"}
    assert task.headers == {"trace-id": "abc"}
    assert task.retry == RetryOverride(max_attempts=2)
    assert task.status == Status.PENDING


@pytest.mark.asyncio
async def test_client_chosen_id_is_idempotent_and_conflicts_across_queues(storage, queue):
    client = rdq.Client(storage)
    task_id = f"order-{uuid.uuid4().hex}"
    first = await client.submit("job", 1, queue=queue, id=task_id)
    again = await client.submit("job", 2, queue=queue, id=task_id)
    assert (first.created, again.created) == (True, False)
    assert (await client.get(task_id)).payload == 1
    with pytest.raises(rdq.IDConflict):
        await client.submit("job", 3, queue=queue + "-other", id=task_id)


@pytest.mark.asyncio
async def test_delay_is_applied_by_the_storage_clock(storage, queue):
    client = rdq.Client(storage)
    sub = await client.submit("job", queue=queue, delay=timedelta(hours=1))
    task = await client.get(sub.id)
    assert task.next_attempt_at is not None and task.created_at is not None
    waited = task.next_attempt_at - task.created_at
    assert timedelta(minutes=59) < waited <= timedelta(hours=1, seconds=1)
    assert await storage.claim_due(queue, 10, timedelta(seconds=5)) == []


@pytest.mark.asyncio
async def test_submit_many_keeps_order_and_idempotency(storage, queue):
    client = rdq.Client(storage)
    ids = [f"t-{uuid.uuid4().hex}" for _ in range(5)]
    subs = await client.submit_many(
        [rdq.Submission("job", i, queue=queue, id=ids[i], delay=i % 2) for i in range(5)]
    )
    assert [s.id for s in subs] == ids
    assert all(s.created for s in subs)
    again = await client.submit_many([rdq.Submission("job", 0, queue=queue, id=ids[0])])
    assert again[0].created is False
    assert (await client.get(ids[3])).payload == 3


@pytest.mark.asyncio
async def test_ids_the_client_makes_are_uuids_in_the_order_they_were_made(storage, queue):
    client = rdq.Client(storage)
    started_ms = time.time_ns() // 1_000_000
    first = await client.submit("job", queue=queue)
    await asyncio.sleep(0.003)  # the batch is made in a later millisecond
    batch = await client.submit_many(rdq.Submission("job", i, queue=queue) for i in range(50))
    ended_ms = time.time_ns() // 1_000_000
    ids = [first.id, *(s.id for s in batch)]
    assert len(set(ids)) == len(ids)
    for task_id in ids:
        parsed = uuid.UUID(task_id)
        assert task_id == parsed.hex, "32 lowercase hex digits"
        assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
        assert started_ms <= parsed.int >> 80 <= ended_ms, "the first 48 bits: Unix time in ms"
    assert all(first.id < s.id for s in batch), "ids made later sort after ids made earlier"
    for task_id in ids:
        assert (await client.get(task_id)).status == Status.PENDING


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"id": ""}, "id"),
        ({"id": "has space"}, "id"),
        ({"queue": "bad queue"}, "queue"),
        ({"headers": {"x": 1}}, "headers.x"),
        ({"delay": -1}, "delay"),
        ({"delay": "soon"}, "delay"),
        ({"payload": object()}, "payload"),
    ],
)
async def test_bad_submissions_raise_validation_error_naming_the_field(storage, kwargs, field):
    client = rdq.Client(storage)
    kwargs = dict(kwargs)
    payload = kwargs.pop("payload", None)
    kwargs.setdefault("queue", "q")
    with pytest.raises(rdq.ValidationError) as info:
        await client.submit("job", payload, **kwargs)
    assert info.value.field == field


@pytest.mark.asyncio
async def test_submit_many_validates_everything_before_storing(storage, queue):
    client = rdq.Client(storage)
    good_id = f"t-{uuid.uuid4().hex}"
    with pytest.raises(rdq.ValidationError):
        await client.submit_many(
            [rdq.Submission("job", 1, queue=queue, id=good_id), rdq.Submission("job", id="")]
        )
    with pytest.raises(rdq.NotFound):
        await client.get(good_id)


def test_sync_client_has_the_same_semantics(storage_url, queue):
    with rdq.SyncClient(storage_url) as client:
        sub = client.submit("job", {"n": 1}, queue=queue, id=f"sync-{uuid.uuid4().hex}")
        assert sub.created
        assert client.submit("job", {"n": 2}, queue=queue, id=sub.id).created is False
        assert client.get(sub.id).payload == {"n": 1}
        with pytest.raises(rdq.ValidationError):
            client.submit("job", queue="bad queue")
        assert [s.created for s in client.submit_many([rdq.Submission("job", queue=queue)])] == [
            True
        ]


def test_sync_client_on_memory():
    with rdq.SyncClient("memory://") as client:
        sub = client.submit("job", [1, 2], queue="default")
        assert client.get(sub.id).payload == [1, 2]
    with pytest.raises(rdq.ConfigError):
        rdq.SyncClient("nosuchscheme://x")


@pytest.mark.asyncio
async def test_submit_many_validates_every_group_before_storing_any(storage, queue):
    """Submissions with different delays go out in separate store calls: a bad one in the
    last group still stops the first group from being stored."""
    client = rdq.Client(storage)
    good_id = f"t-{uuid.uuid4().hex}"
    with pytest.raises(rdq.ValidationError) as info:
        await client.submit_many(
            [
                rdq.Submission("job", 1, queue=queue, id=good_id),
                rdq.Submission("job", 2, queue=queue, delay=5, headers={"x": 1}),  # type: ignore[dict-item]
            ]
        )
    assert info.value.field == "headers.x"
    with pytest.raises(rdq.NotFound):
        await client.get(good_id)


@pytest.mark.asyncio
async def test_a_batch_is_validated_once_per_task(storage, queue, monkeypatch):
    checked: list[str] = []
    check_task = bounds.check_task

    def counting(task: object) -> object:
        checked.append(getattr(task, "id", ""))
        return check_task(task)

    monkeypatch.setattr(bounds, "check_task", counting)  # the client's own checks
    monkeypatch.setattr(arguments, "check_task", counting)  # the store's (check_tasks)
    subs = await rdq.Client(storage).submit_many(
        [rdq.Submission("job", i, queue=queue) for i in range(50)]
    )
    assert len({s.id for s in subs}) == 50
    # each task exactly once: by the store (the client leaves a one-call batch to it)
    assert sorted(checked) == sorted(s.id for s in subs)


@pytest.mark.asyncio
async def test_a_handler_the_app_does_not_know_is_refused_naming_the_known_ones(storage, queue):
    app = rdq.App(import_prefixes=["myapp"])
    app.queue("payments")

    @app.handler("charge_card", queue="payments")
    async def charge_card(payload: object) -> None: ...

    @app.handler("send_receipt", queue="emails")
    async def send_receipt(payload: object) -> None: ...

    app.register_scheme("https", lambda task, ctx: charge_card(task.payload))
    client = rdq.Client(storage, app)
    with pytest.raises(rdq.ValidationError) as info:
        await client.submit("charge_crad", {"order": 1})
    assert info.value.field == "handler_ref"
    message = str(info.value)
    assert "'charge_crad'" in message and "did you mean 'charge_card'?" in message
    assert "known handlers: charge_card, send_receipt" in message
    assert "check_handler=False" in message
    with pytest.raises(rdq.ValidationError):  # a batch: nothing of it is stored
        await client.submit_many(
            [
                rdq.Submission("charge_card", 1, queue=queue, id=f"ok-{queue}"),
                rdq.Submission("charge_crad", 2, queue=queue),
            ]
        )
    with pytest.raises(rdq.NotFound):
        await client.get(f"ok-{queue}")
    # what a worker of this app can run is accepted
    for ref in ("charge_card", "https://hooks.example.com/x", "myapp.jobs:nightly"):
        assert (await client.submit(ref, None, queue=queue)).created
    # a producer submitting for another application's workers opts out
    other = await client.submit("billing.invoice", {"n": 1}, queue=queue, check_handler=False)
    assert (await client.get(other.id)).handler_ref == "billing.invoice"
    [sub] = await client.submit_many(
        [rdq.Submission("billing.invoice", 2, queue=queue, check_handler=False)]
    )
    assert sub.created
    # without an app, nothing is known and nothing is checked
    assert (await rdq.Client(storage).submit("anything", queue=queue)).created


@pytest.mark.asyncio
async def test_priorities_order_claims_and_default_per_queue(storage, queue):
    """Submitted tasks carry their priority (or their queue's default); among due tasks the
    highest is claimed first."""
    app = rdq.App()
    app.queue(queue, concurrency=1, priority=-2)
    order: list[str] = []

    @app.handler("job", queue=queue)
    async def job(payload: str) -> None:
        order.append(payload)

    client = rdq.Client(storage, app)
    low = await client.submit_many([rdq.Submission("job", f"low-{i}") for i in range(3)])
    urgent = await client.submit("job", "urgent", priority=9)
    normal = await client.submit_many([rdq.Submission("job", "normal", priority=0)])
    assert (await client.get(low[0].id)).priority == -2  # the queue's default
    assert (await client.get(urgent.id)).priority == 9
    assert (await client.get(normal[0].id)).priority == 0
    with pytest.raises(rdq.ValidationError) as info:
        await client.submit("job", "x", priority=11)
    assert info.value.field == "priority"
    async with running(fast_worker(app, storage)):
        for sub in [*low, urgent, *normal]:
            await wait_status(storage, sub.id, Status.SUCCEEDED)
    assert order[:2] == ["urgent", "normal"]
    assert sorted(order[2:]) == ["low-0", "low-1", "low-2"]


def test_a_queue_priority_out_of_range_is_a_config_error():
    with pytest.raises(rdq.ConfigError) as info:
        rdq.App().queue("q", priority=20)
    assert info.value.key == "queues.q.priority"

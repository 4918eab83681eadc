"""The coalescing NOTIFY announcer: sporadic announcements go out at once, bursts are
coalesced and rate-limited."""

from __future__ import annotations

import asyncio

import pytest

from rdq_postgres._notify import Announcer

HOUR = 3600.0


class Recorder:
    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.sent_at: list[float] = []
        """The event loop's time of each send."""
        self.gate = asyncio.Event()
        self.gate.set()
        self.arrived = asyncio.Condition()

    async def send(self, queues: list[str]) -> None:
        await self.gate.wait()
        async with self.arrived:
            self.sent.append(queues)
            self.sent_at.append(asyncio.get_running_loop().time())
            self.arrived.notify_all()

    async def wait_for(self, count: int) -> None:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.sent) >= count), 10)


@pytest.mark.asyncio
async def test_sporadic_announcements_are_sent_without_waiting_for_the_interval() -> None:
    recorder = Recorder()
    announcer = Announcer(recorder.send, interval=HOUR, burst=4)
    for n in range(3):
        announcer.announce([f"q{n}"])
        await recorder.wait_for(n + 1)  # would wait an hour if each send were followed by a pause
    assert recorder.sent == [["q0"], ["q1"], ["q2"]]
    await announcer.aclose(timeout=0.1)


@pytest.mark.asyncio
async def test_queues_announced_while_a_notify_is_in_flight_go_out_together() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    announcer = Announcer(recorder.send, interval=HOUR, burst=4)
    announcer.announce(["a"])
    await asyncio.sleep(0)  # the first send starts and blocks on the gate
    announcer.announce(["b"])
    announcer.announce(["c", "b"])
    recorder.gate.set()
    await recorder.wait_for(2)
    assert recorder.sent == [["a"], ["b", "c"]]
    await announcer.aclose(timeout=0.1)


@pytest.mark.asyncio
async def test_once_the_burst_is_spent_announcements_wait_for_the_bucket_to_refill() -> None:
    recorder = Recorder()
    interval = 1.0
    announcer = Announcer(recorder.send, interval=interval, burst=2)
    loop = asyncio.get_running_loop()
    before = loop.time()
    for n in range(2):
        announcer.announce([f"q{n}"])
        await recorder.wait_for(n + 1)
    announcer.announce(["late"])
    await recorder.wait_for(3)
    assert recorder.sent == [["q0"], ["q1"], ["late"]]
    # the bucket held two NOTIFYs and earns one per interval from the first: a third one
    # goes out an interval after the first at the soonest, however slow the machine
    assert recorder.sent_at[2] - before >= interval
    await announcer.aclose(timeout=0.1)


@pytest.mark.asyncio
async def test_a_caller_cancelled_while_aclose_stops_the_sender_is_still_cancelled() -> None:
    stopping = asyncio.Event()
    finish = asyncio.Event()

    async def send(queues: list[str]) -> None:
        try:
            await asyncio.Event().wait()  # a NOTIFY that never returns
        except asyncio.CancelledError:
            stopping.set()
            await finish.wait()  # cleanup that takes a while
            raise

    announcer = Announcer(send, interval=HOUR, burst=4)
    announcer.announce(["q"])
    closing = asyncio.create_task(announcer.aclose(timeout=0.01))
    await asyncio.wait_for(stopping.wait(), 10)  # aclose timed out and is stopping the sender
    closing.cancel()
    finish.set()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert closing.cancelled(), "aclose swallowed its caller's cancellation"


@pytest.mark.asyncio
async def test_with_no_interval_every_announcement_goes_out_one_call_at_a_time() -> None:
    recorder = Recorder()
    announcer = Announcer(recorder.send, interval=0, burst=2)
    for n in range(5):  # past the burst: nothing waits for a refill
        announcer.announce([f"q{n}"])
        await recorder.wait_for(n + 1)
    assert recorder.sent == [[f"q{n}"] for n in range(5)]
    await announcer.aclose(timeout=0.1)


@pytest.mark.asyncio
async def test_an_enqueue_carries_its_own_notify_only_while_nothing_else_is_announced() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    announcer = Announcer(recorder.send, interval=HOUR, burst=4)
    with announcer.carrying() as carried:
        assert carried, "an idle announcer lets the enqueue carry its NOTIFY"
        with announcer.carrying() as second:
            assert not second, "two notifying transactions at once"
    announcer.announce(["a"])
    await asyncio.sleep(0)  # its send starts and blocks on the gate
    with announcer.carrying() as carried:
        assert not carried, "a NOTIFY in flight: the enqueue leaves its queue to the announcer"
    recorder.gate.set()
    await recorder.wait_for(1)
    await announcer.aclose(timeout=0.1)


@pytest.mark.asyncio
async def test_announcements_made_while_an_enqueue_carries_a_notify_wait_for_its_end() -> None:
    recorder = Recorder()
    announcer = Announcer(recorder.send, interval=HOUR, burst=4)
    with announcer.carrying() as carried:
        assert carried
        announcer.announce(["b"])
        await asyncio.sleep(0.05)
        assert recorder.sent == [], "the announcer sent while the enqueue's NOTIFY was in flight"
    await recorder.wait_for(1)
    assert recorder.sent == [["b"]]
    await announcer.aclose(timeout=0.1)


@pytest.mark.asyncio
async def test_a_carried_notify_spends_a_token_of_the_same_bucket() -> None:
    recorder = Recorder()
    announcer = Announcer(recorder.send, interval=HOUR, burst=2)
    for _ in range(2):
        with announcer.carrying() as carried:
            assert carried
    with announcer.carrying() as carried:
        assert not carried, "the burst is spent: the enqueue may not notify past the limit"
    announcer.announce(["late"])
    await asyncio.sleep(0.05)
    assert recorder.sent == [], "the announcer's own NOTIFY ignored the spent bucket"
    await announcer.aclose(timeout=0.01)

"""Periodic schedules: ticks (cron across DST changes, fixed intervals), exactly one task per
tick however many workers race on it, what happens to ticks missed while nobody ran, the TOML
form and ``rdq schedules``. The workers that wait for a tick, a downtime or a change of the
zone's clock run on simulated time (``_virtual.py``): a minute of downtime costs no real time,
and a tick is checked to the instant it was enqueued."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import rdq
from rdq.schedules import MAX_SLEEP, Schedule, decide
from rdq.spi import Status, Storage
from rdq_compliance.testing import FaultyStorage

from ._virtual import START, virtual_store, worker
from .conftest import eventually, fast_worker, running

RDQ = str(Path(sys.executable).parent / "rdq")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def ticks(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    found = []
    at = start
    while True:
        tick = schedule.next_tick(at)
        if tick is None or tick > end:
            return found
        found.append(tick)
        at = tick


# --- ticks ---------------------------------------------------------------------------------


def test_cron_ticks_follow_the_zone_across_the_spring_change():
    """02:30 in Berlin does not exist on 2026-03-29: that day's tick is right after the
    change (03:00 CEST = 01:00Z); the days around it tick at 02:30 local."""
    s = Schedule("nightly", "job", cron="30 2 * * *", tz="Europe/Berlin").validate()
    assert ticks(s, utc(2026, 3, 27, 12), utc(2026, 3, 30, 12)) == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST, just after the change
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_cron_ticks_once_in_the_hour_the_autumn_change_repeats():
    s = Schedule("nightly", "job", cron="30 2 * * *", tz="Europe/Berlin").validate()
    assert ticks(s, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12)) == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST; 02:30 CET an hour later does not tick
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
    ]


def test_the_last_tick_includes_the_instant_of_the_tick():
    s = Schedule("m", "job", cron="* * * * *").validate()
    assert s.last_tick(utc(2026, 1, 1, 3, 0)) == utc(2026, 1, 1, 3, 0)
    assert s.last_tick(utc(2026, 1, 1, 3, 0, 59, 999999)) == utc(2026, 1, 1, 3, 0)
    assert s.next_tick(utc(2026, 1, 1, 3, 0)) == utc(2026, 1, 1, 3, 1)


def test_interval_ticks_are_whole_multiples_since_the_epoch():
    s = Schedule("q", "job", every=timedelta(minutes=15)).validate()
    assert s.last_tick(utc(2026, 5, 1, 10, 29, 59)) == utc(2026, 5, 1, 10, 15)
    assert s.next_tick(utc(2026, 5, 1, 10, 30)) == utc(2026, 5, 1, 10, 45)
    assert s.task_id(utc(2026, 5, 1, 10, 15)) == "schedule:q:20260501T101500Z"


def test_a_tick_is_enqueued_on_time_or_caught_up_by_policy():
    day = 86400.0
    last = Schedule("r", "job", every=timedelta(hours=1), grace=60).validate()
    skip = Schedule("r", "job", every=timedelta(hours=1), grace=60, catch_up="skip").validate()
    on_time, late, ancient = utc(2026, 5, 1, 10, 0, 30), utc(2026, 5, 1, 10, 30), utc(2026, 5, 9)

    tick = utc(2026, 5, 1, 10)
    assert decide(last, on_time, None, day) == (tick, False)
    assert decide(skip, on_time, None, day) == (tick, False)
    assert decide(last, late, None, day) == (tick, False)  # the last missed tick, once
    assert decide(skip, late, None, day) == (None, True)
    monthly = Schedule("m", "job", cron="0 0 1 * *").validate()
    assert decide(monthly, ancient, None, 7 * day) == (None, True)  # older than task_ttl
    assert decide(monthly, ancient, None, 30 * day) == (utc(2026, 5, 1), False)
    assert decide(last, late, tick, day) == (None, False)  # handled already


def test_schedules_are_validated_naming_the_key():
    app = rdq.App()
    cases = [
        ({"cron": "0 3 * * *", "every": timedelta(hours=1)}, "schedules.s"),
        ({}, "schedules.s"),
        ({"cron": "61 * * * *"}, "schedules.s.cron"),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "schedules.s.tz"),
        ({"every": timedelta(0)}, "schedules.s.every"),
        ({"every": timedelta(hours=1), "catch_up": "all"}, "schedules.s.catch_up"),
        ({"every": timedelta(hours=1), "payload": object()}, "schedules.s.payload"),
    ]
    for kwargs, key in cases:
        with pytest.raises(rdq.ConfigError) as info:
            app.schedule("s", "job", **kwargs)  # type: ignore[arg-type]
        assert info.value.key == key, kwargs
    with pytest.raises(rdq.ConfigError):
        app.schedule("not a name", "job", every=timedelta(hours=1))
    assert app.schedules == {}


def test_schedules_come_from_the_toml_file_too(tmp_path: Path):
    path = tmp_path / "rdq.toml"
    path.write_text(
        textwrap.dedent(
            """
            [queues.reports]
            priority = 3

            [schedules.nightly-report]
            handler = "build_report"
            cron = "0 3 * * *"
            tz = "Europe/Berlin"
            queue = "reports"
            payload = {kind = "daily"}

            [schedules.heartbeat]
            every = 900
            catch_up = "skip"
            """
        )
    )
    app = rdq.App()
    app.load_config(path)
    nightly, beat = app.schedules["nightly-report"], app.schedules["heartbeat"]
    assert (nightly.handler, nightly.cron, nightly.tz, nightly.payload) == (
        "build_report",
        "0 3 * * *",
        "Europe/Berlin",
        {"kind": "daily"},
    )
    assert (beat.handler, beat.every, beat.catch_up) == (
        "heartbeat",
        timedelta(seconds=900),
        "skip",
    )
    assert app.queue_config("reports").priority == 3
    path.write_text("[schedules.bad]\nevery = 60\nwhen = 'now'\n")
    with pytest.raises(rdq.ConfigError) as info:
        app.load_config(path)
    assert info.value.key == "schedules.bad.when"


# --- workers -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_many_workers_racing_on_each_tick_run_it_once(storage, queue):
    app = rdq.App()
    app.queue(queue, concurrency=4)
    runs: Counter[str] = Counter()

    @app.handler("tick", queue=queue)
    async def tick(payload: object, ctx: rdq.TaskContext) -> None:
        runs[ctx.headers["rdq-schedule-tick"]] += 1

    schedule = app.schedule(f"every-second-{queue}", tick, every=timedelta(seconds=1))
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(5):
            await stack.enter_async_context(running(fast_worker(app, storage)))
        start = await storage.now()
        # four ticks, each raced by five workers; wait for them by the storage clock
        expected = [schedule.next_tick(start + timedelta(seconds=i)) for i in range(4)]
        for at in expected:
            assert at is not None
            await wait_task(storage, schedule.task_id(at), Status.SUCCEEDED)
    for at in expected:
        assert at is not None and runs[at.isoformat()] == 1, runs
    assert set(runs.values()) == {1}


async def wait_task(storage: Storage, task_id: str, status: Status) -> rdq.spi.Envelope:
    """Wait until task ``task_id`` exists and has ``status``."""
    found: list[rdq.spi.Envelope] = []

    async def check() -> bool:
        try:
            found[:] = [await storage.get(task_id)]
        except rdq.NotFound:
            return False
        return found[0].status == status

    await eventually(check, "the ticks", 60)
    return found[0]


async def until_phase(storage: Storage, period: float, at: float) -> None:
    """Wait (on simulated time) until the store's clock reads ``at`` seconds past a tick of
    ``period``."""
    now = (await storage.now()).timestamp()
    await asyncio.sleep((at - now % period) % period)


async def tasks_of(storage: Storage, queue: str) -> set[str]:
    found: set[str] = set()
    for status in Status:
        page, _ = await storage.list_tasks(
            queue, rdq.spi.TaskFilter(status=status), rdq.spi.Page(limit=1000)
        )
        found |= {t.id for t in page}
    return found


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("catch_up", ["last", "skip"])
async def test_a_stop_longer_than_grace_follows_the_catch_up_policy(catch_up: str):
    """A worker runs a 2-second schedule, stops; 60 s pass (30 ticks) with no worker; a
    worker starts 1 s past a tick (grace 0.5 s, so that tick is missed).
    "last" enqueues the latest missed tick once and drops the others; "skip" drops them all.
    Both go on with the next tick."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    app = rdq.App()
    app.queue(queue)
    ran: list[str] = []

    @app.handler("job", queue=queue)
    async def job(payload: object, ctx: rdq.TaskContext) -> None:
        ran.append(ctx.task_id)

    schedule = app.schedule(
        "two-seconds", job, every=timedelta(seconds=2), grace=0.5, catch_up=catch_up
    )
    async with virtual_store() as storage:
        await until_phase(storage, 2.0, 0.2)
        first_tick = schedule.last_tick(await storage.now())
        assert first_tick is not None
        async with worker(app, storage):
            await wait_task(storage, schedule.task_id(first_tick), Status.SUCCEEDED)
        before = await tasks_of(storage, queue)
        await asyncio.sleep(60.0)  # downtime
        await until_phase(storage, 2.0, 1.0)
        missed = schedule.last_tick(await storage.now())
        assert missed is not None
        following = missed + timedelta(seconds=2)
        async with worker(app, storage):
            await wait_task(storage, schedule.task_id(following), Status.SUCCEEDED)
        after = await tasks_of(storage, queue)
    new = after - before
    if catch_up == "last":
        assert new == {schedule.task_id(missed), schedule.task_id(following)}
    else:
        assert new == {schedule.task_id(following)}
    assert sorted(ran) == sorted(after)  # each enqueued tick ran once


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("catch_up", ["last", "skip"])
async def test_a_stop_within_grace_enqueues_the_latest_tick_of_the_gap_only(catch_up: str):
    """A 2-second schedule with grace 60 s; every worker stops for 15 s (7 ticks pass, each
    within grace of a worker's restart). The restarted worker enqueues the latest of them, on
    time, under either policy; the 6 it superseded are dropped."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    app = rdq.App()
    app.queue(queue)

    @app.handler("job", queue=queue)
    async def job(payload: object) -> None:
        return None

    schedule = app.schedule(
        "two-seconds", job, every=timedelta(seconds=2), grace=60, catch_up=catch_up
    )
    async with virtual_store() as storage:
        await until_phase(storage, 2.0, 0.2)
        first_tick = schedule.last_tick(await storage.now())
        assert first_tick is not None
        async with worker(app, storage):
            await wait_task(storage, schedule.task_id(first_tick), Status.SUCCEEDED)
        before = await tasks_of(storage, queue)
        await asyncio.sleep(15.0)  # downtime
        await until_phase(storage, 2.0, 1.0)
        restart = await storage.now()
        latest = schedule.last_tick(restart)
        assert latest is not None
        gap = ticks(schedule, latest_tick_of(schedule, before), restart)
        assert len(gap) >= 7 and gap[-1] == latest
        assert all((restart - tick).total_seconds() < 60 for tick in gap)
        following = latest + timedelta(seconds=2)
        async with worker(app, storage):
            await wait_task(storage, schedule.task_id(following), Status.SUCCEEDED)
            on_time = await storage.get(schedule.task_id(latest))
        after = await tasks_of(storage, queue)
    assert after - before == {schedule.task_id(latest), schedule.task_id(following)}
    assert on_time.created_at == restart, "enqueued as the worker started"


def latest_tick_of(schedule: Schedule, task_ids: set[str]) -> datetime:
    """The latest tick whose task (of ``schedule``) is among ``task_ids``."""
    stamps = [task_id.removeprefix(f"schedule:{schedule.name}:") for task_id in task_ids]
    return max(datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC) for stamp in stamps)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_worker_ticks_by_the_storage_clock_across_a_dst_change():
    """The storage clock reads 01:59:59.5 CET on 2026-03-29, just before Berlin skips
    02:00-03:00: a 02:30 daily schedule ticks right after the change, at 01:00Z."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    app = rdq.App()
    app.queue(queue)

    @app.handler("job", queue=queue)
    async def job(payload: object) -> None:
        return None

    schedule = app.schedule("nightly", job, cron="30 2 * * *", tz="Europe/Berlin")
    before_the_change = utc(2026, 3, 29, 0, 59, 59, 500000)
    async with virtual_store(before_the_change - START) as storage, worker(app, storage):
        task = await wait_task(storage, "schedule:nightly:20260329T010000Z", Status.SUCCEEDED)
    assert task.headers["rdq-schedule-tick"] == "2026-03-29T01:00:00+00:00"
    assert task.created_at == utc(2026, 3, 29, 1), "enqueued at the tick, half a second on"
    assert schedule.next_tick(utc(2026, 3, 29, 1)) == utc(2026, 3, 30, 0, 30)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_worker_started_in_the_repeated_hour_neither_repeats_a_tick_nor_spins():
    """Berlin, 2026-10-25: a worker runs the 02:30 tick (02:30 CEST, 00:30Z) and stops; another
    starts at 01:10Z, 02:10 CET, in the hour the change repeats. The day's tick has run: it
    enqueues no other (not the previous day's, which the store no longer holds, as a
    catch-up), and its scheduler sleeps until the next tick instead of reading the storage
    clock over and over."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    ran: list[str] = []

    def berlin_app(catch_up: str) -> rdq.App:
        app = rdq.App()
        app.queue(queue, task_ttl=7 * 86400)

        @app.handler("tick", queue=queue)
        async def tick(payload: object, ctx: rdq.TaskContext) -> None:
            ran.append(ctx.task_id)

        app.schedule("berlin", tick, cron="30 2 * * *", tz="Europe/Berlin", catch_up=catch_up)
        return app

    today = "schedule:berlin:20261025T003000Z"
    async with virtual_store(utc(2026, 10, 25, 0, 29, 59, 500000) - START) as memory:
        storage = FaultyStorage(memory)  # counts the reads of the storage clock
        # "skip": the first worker drops the previous day's tick, so the store holds today's
        async with worker(berlin_app("skip"), storage):
            await wait_task(storage, today, Status.SUCCEEDED)
        assert await tasks_of(storage, queue) == {today}
        await until_phase(storage, 86_400.0, 70 * 60.0)  # to 01:10Z, 02:10 CET
        async with worker(berlin_app("last"), storage):
            await asyncio.sleep(0.5)
            before = storage.calls["now"]
            await asyncio.sleep(60.0)
            reads = storage.calls["now"] - before
        assert await tasks_of(storage, queue) == {today}
    assert ran == [today]
    # one read per MAX_SLEEP while the next tick is a day away; a loop at its 10 ms floor
    # would read 6,000 times
    assert reads <= 60.0 / MAX_SLEEP + 1, reads


# --- rdq schedules -------------------------------------------------------------------------

SCHEDULED_APP = """
from datetime import timedelta
import rdq

app = rdq.App()

@app.handler("build_report", queue="reports")
async def build_report(payload):
    return None

app.schedule("nightly-report", build_report, cron="0 3 * * *", tz="Europe/Berlin")
app.schedule("heartbeat", "build_report", every=timedelta(minutes=15), catch_up="skip")
"""


def test_rdq_schedules_lists_each_schedule_with_its_next_tick(tmp_path: Path):
    (tmp_path / "sapp.py").write_text(SCHEDULED_APP)
    result = subprocess.run(
        [RDQ, "schedules", "sapp:app", "--storage", "memory://", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    now = datetime.fromisoformat(doc["now"])
    assert doc["clock"] == "storage"
    rows = {row["name"]: row for row in doc["schedules"]}
    nightly, beat = rows["nightly-report"], rows["heartbeat"]
    assert nightly["queue"] == "reports" and nightly["rule"] == "cron 0 3 * * * (Europe/Berlin)"
    local = datetime.fromisoformat(nightly["next_tick_local"])
    assert (local.hour, local.minute) == (3, 0) and local > now
    assert datetime.fromisoformat(nightly["next_tick"]) - now <= timedelta(days=1)
    assert datetime.fromisoformat(beat["next_tick"]) - now <= timedelta(minutes=15)
    assert beat["last_task"] == {
        "id": Schedule("heartbeat", "x").task_id(datetime.fromisoformat(beat["last_tick"])),
        "status": None,
    }
    table = subprocess.run(
        [RDQ, "schedules", "sapp:app"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert table.returncode == 0, table.stderr
    assert "nightly-report" in table.stdout and "local clock" in table.stdout

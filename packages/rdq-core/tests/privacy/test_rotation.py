"""``rdq keys rotate``: stored payloads re-sealed under the active key, in place, with nothing
lost — also when the rotation is killed with SIGKILL and run again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rdq
from rdq.admin import rotate_keys
from rdq.keys import Keyring, generate_key, open_payload, seal, sealed_with
from rdq.spi import Attempt, AuditFilter, Outcome, Page, Selector, Status, Storage, TaskFilter

from .conftest import CARD, keyring

RDQ = str(Path(sys.executable).with_name("rdq"))


async def _everything(store: Storage, queue: str) -> dict[str, Any]:
    found = {}
    for status in Status:
        cursor = None
        while True:
            page = Page(limit=1000, cursor=cursor, include_attempts=True)
            tasks, cursor = await store.list_tasks(queue, TaskFilter(status=status), page)
            found.update({t.id: t for t in tasks})
            if cursor is None:
                break
    return found


async def _dead(store: Storage, queue: str, count: int) -> None:
    for claimed in await store.claim_due(queue, count, timedelta(seconds=30)):
        attempt = Attempt(number=1, outcome=Outcome.PERMANENT, error_type="Declined")
        await store.dead_letter(claimed.task.id, claimed.token, attempt)


@pytest.mark.asyncio
async def test_a_rotation_reseals_every_task_it_may_and_says_what_it_left(
    store: Storage, queue: str, tmp_path: Path
) -> None:
    old, other = keyring("v1"), keyring("gone")
    new = Keyring({"v2": os.urandom(32), "v1": old._keys["v1"]}, "v2")
    client = rdq.Client(store, keys=old)
    dead = [await client.submit("pay", {"card": CARD, "n": i}, queue=queue) for i in range(3)]
    await _dead(store, queue, 3)
    later = [
        await client.submit("pay", {"card": CARD, "n": i}, queue=queue, delay=3600)
        for i in range(5)
    ]
    due = await client.submit("pay", {"card": CARD, "n": "due"}, queue=queue)
    cancelled = await client.submit("pay", {"n": "c"}, queue=queue, delay=3600)
    await store.cancel(queue, [cancelled.id])
    clear = await rdq.Client(store, keys=None).submit("pay", {"n": "clear"}, queue=queue, delay=60)
    foreign = await rdq.Client(store, keys=other).submit("pay", 1, queue=queue, delay=3600)
    before = await _everything(store, queue)

    report = await rotate_keys(
        store, new, journal=tmp_path / "j.jsonl", queues=[queue], actor="ops@box"
    )
    assert (report.resealed, report.in_motion, report.clear, report.unreadable) == (9, 1, 1, 1)
    assert report.missing_keys == {"gone": 1} and not report.complete
    assert not (tmp_path / "j.jsonl").exists()
    after = await _everything(store, queue)
    assert after.keys() == before.keys()  # nothing lost, nothing added
    for task_id, task in after.items():
        was = before[task_id]
        keep = ("status", "attempt_count", "attempts", "next_attempt_at", "dead_lettered_at")
        assert {f: getattr(task, f) for f in keep} == {f: getattr(was, f) for f in keep}
        if task_id in {t.id for t in (*dead, *later, cancelled)}:
            assert sealed_with(task) == "v2" and open_payload(task, new) == open_payload(was, new)
        if task_id == due.id:
            assert sealed_with(task) == "v1"  # in motion: left for the next run
    assert after[clear.id].payload == {"n": "clear"} and sealed_with(after[foreign.id]) == "gone"
    if store.capabilities().audit:
        entries, _ = await store.list_audit(AuditFilter(queue=queue), Page(limit=10))
        assert [(e.action, e.queue, e.count, e.actor) for e in entries] == [
            ("keys.rotate", queue, 9, "ops@box")
        ]
    again = await rotate_keys(
        store, new, journal=tmp_path / "j.jsonl", queues=[queue], actor="ops@box"
    )
    assert again.resealed == 0 and again.current == 9


@pytest.mark.asyncio
async def test_a_rotation_killed_mid_swap_finishes_from_its_journal(
    store: Storage, queue: str, tmp_path: Path
) -> None:
    """The states a kill can leave one batch in: journaled only; cancelled; cancelled and
    purged (the tasks exist only in the journal)."""
    old = keyring("v1")
    new = Keyring({"v2": os.urandom(32), "v1": old._keys["v1"]}, "v2")
    client = rdq.Client(store, keys=old)
    tasks = [await client.submit("pay", {"n": i}, queue=queue, delay=3600) for i in range(9)]
    stored = {t.id: await store.get(t.id) for t in tasks}
    journal = tmp_path / "j.jsonl"
    resealed = [
        seal(
            msgspec.structs.replace(
                stored[t.id], payload=open_payload(stored[t.id], new), headers={}
            ),
            new,
        )
        for t in tasks
    ]
    lines = [
        {"n": 1, "batch": [rdq.spi.envelope_to_builtins(t) for t in resealed[0:3]]},
        {"n": 2, "batch": [rdq.spi.envelope_to_builtins(t) for t in resealed[3:6]]},
        {"n": 3, "batch": [rdq.spi.envelope_to_builtins(t) for t in resealed[6:9]]},
    ]
    journal.write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in lines) + b'{"n": 4, "ba')
    await store.cancel(queue, [t.id for t in tasks[3:9]])  # batches 2 and 3 were cancelled
    await store.purge(queue, Selector(ids=[t.id for t in tasks[6:9]]))  # batch 3 purged too
    report = await rotate_keys(store, new, journal=journal, queues=[queue], actor="ops")
    assert report.recovered == 9 and report.resealed == 0 and report.current == 9
    after = await _everything(store, queue)
    assert sorted(after) == sorted(t.id for t in tasks)
    for task in after.values():
        assert task.status == Status.PENDING and sealed_with(task) == "v2"
        assert task.next_attempt_at == stored[task.id].next_attempt_at
        assert open_payload(task, new) == open_payload(stored[task.id], new)


@pytest.mark.timeout(600)
def test_rdq_keys_rotate_resumes_after_kill_9(tmp_path: Path) -> None:
    """The command, killed with SIGKILL while it swaps, run again: every task is there once,
    sealed with the new key, its payload what was submitted."""
    url = f"sqlite:///{tmp_path}/rotate.db"
    v1, v2 = f"v1:{generate_key()}", f"v2:{generate_key()}"
    count = 20_000
    asyncio.run(_fill(url, v1, count))
    env = {**os.environ, "RDQ_PAYLOAD_KEYS": f"{v2} {v1}"}
    journal = tmp_path / "rotate.jsonl"
    command = [RDQ, "keys", "rotate", "--storage", url, "--journal", str(journal), "--batch", "200"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # the journal holds a batch only while that batch is swapped: kill the command then,
    # in its third swap seen (however fast the machine: a fixed wait could outlast the run)
    started, swaps, swapping = time.monotonic(), 0, False
    while time.monotonic() < started + 120 and process.poll() is None:
        now_swapping = journal.exists() and journal.stat().st_size > 0
        swaps += now_swapping and not swapping
        swapping = now_swapping
        if swapping and swaps >= 3:
            break
        time.sleep(0.001)
    assert process.poll() is None, f"the rotation ended before a kill could land ({swaps} seen)"
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    assert process.returncode == -signal.SIGKILL
    assert journal.exists() and journal.stat().st_size, "killed in the middle of a swap"
    done = subprocess.run([*command, "--json"], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = msgspec.json.decode(done.stdout)
    assert report["complete"]
    assert report["resealed"] + report["already_current"] + report["recovered"] >= count
    assert report["already_current"] > 0  # the killed run had swapped some
    assert "resuming" in done.stderr.decode()
    asyncio.run(_check(url, f"{v2} {v1}", count))


async def _fill(url: str, key: str, count: int) -> None:
    keys = Keyring.parse(key)
    async with rdq.Client.open(url, keys=keys) as client:
        for start in range(0, count, 1000):
            await client.submit_many(
                rdq.Submission("pay", {"card": CARD, "n": n}, queue="pay", delay=3600)
                for n in range(start, start + 1000)
            )


async def _check(url: str, keys_text: str, count: int) -> None:
    keys = Keyring.parse(keys_text)
    async with rdq.open_storage(url) as store:
        everything = await _everything(store, "pay")
        assert len(everything) == count
        numbers = sorted(open_payload(t, keys)["n"] for t in everything.values())
        assert numbers == list(range(count))
        assert {sealed_with(t) for t in everything.values()} == {"v2"}
        assert {t.status for t in everything.values()} == {Status.PENDING}

"""Interrupts are safe, tried in a real terminal (a pty, through pexpect), on a SQLite file as
an operator meets them: one Ctrl-C at the ``[y/N]`` prompt aborts with nothing done and nothing
audited; SIGINT, SIGHUP (the terminal closed) and SIGTERM during a foreground paced redrive
cancel it — it is not left for a node to carry on unwatched — and the audit entry's count is
exactly what left the DLQ."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pexpect
import pytest

from rdq.admin import TaskAdmin
from rdq.plugins import open_storage
from rdq.spi import Attempt, AuditEntry, Envelope, Outcome, Page

RDQ = str(Path(sys.executable).parent / "rdq")


async def _fill(url: str, dead: int) -> None:
    async with open_storage(url) as store:
        await store.migrate()
        for n in range(dead):
            await store.enqueue(Envelope(id=f"d{n:03}", queue="pay", handler_ref="charge"))
        for claim in await store.claim_due("pay", 1000, timedelta(seconds=30)):
            now = datetime.now(UTC)
            attempt = Attempt(
                number=1, outcome=Outcome.FAILED, error_type="GatewayDown", finished_at=now
            )
            await store.dead_letter(claim.task.id, claim.token, attempt)


async def _dead(url: str) -> int:
    async with open_storage(url) as store:
        return (await store.stats("pay")).dlq_depth


async def _trail(url: str) -> list[AuditEntry]:
    async with open_storage(url) as store:
        entries, _ = await store.list_audit(None, Page(limit=100))
        return entries


async def _ops(url: str) -> list[dict[str, object]]:
    async with open_storage(url) as store:
        return [msgspec.to_builtins(op) for op in await TaskAdmin(store).paced_redrives("pay")]


def _spawn(url: str, *args: str) -> pexpect.spawn:
    return pexpect.spawn(
        RDQ,
        [*args, "--storage", url],
        encoding="utf-8",
        timeout=60,
        env={"PATH": str(Path(RDQ).parent) + ":/usr/bin:/bin", "TERM": "dumb", "COLUMNS": "120"},
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    address = f"sqlite:///{tmp_path / 'rdq.db'}"
    asyncio.run(_fill(address, 12))
    return address


def test_one_ctrl_c_at_the_prompt_aborts_with_nothing_done(url: str) -> None:
    child = _spawn(url, "dlq", "redrive", "pay", "--error-type", "GatewayDown")
    child.expect(r"redrive 12 task\(s\) of queue pay\? \[y/N\]")
    child.sendintr()  # once
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130, child.before
    assert "interrupted (SIGINT): at the prompt; nothing was done" in child.before
    assert asyncio.run(_dead(url)) == 12, "nothing redriven"
    assert asyncio.run(_trail(url)) == [], "nothing done, nothing audited"


def test_ctrl_c_at_the_reason_prompt_aborts_too(url: str) -> None:
    child = _spawn(url, "dlq", "purge", "pay", "d000", "d001")
    child.expect(r"\[y/N\]")
    child.sendline("y")
    child.expect("Reason")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130 and asyncio.run(_dead(url)) == 12


def test_answering_no_does_nothing(url: str) -> None:
    child = _spawn(url, "dlq", "purge", "pay", "--all")
    child.expect(r"\[y/N\]")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1 and "not confirmed; nothing was done" in child.before
    assert asyncio.run(_dead(url)) == 12 and asyncio.run(_trail(url)) == []


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM])
def test_a_signal_cancels_a_foreground_paced_redrive_and_the_audit_counts_it(
    tmp_path: Path, stop: signal.Signals
) -> None:
    url = f"sqlite:///{tmp_path / 'rdq.db'}"
    asyncio.run(_fill(url, 60))
    child = _spawn(url, "dlq", "redrive", "pay", "--all", "--rate", "5/s", "--yes")
    for _ in range(600):
        ops = asyncio.run(_ops(url))
        if ops and int(ops[0]["done"]) >= 3:  # type: ignore[call-overload]
            break
        time.sleep(0.05)
    child.kill(stop)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 128 + stop, child.before
    (op,) = asyncio.run(_ops(url))
    assert op["status"] == "cancelled", "cancelled, not left for a node to take over"
    returned = 60 - asyncio.run(_dead(url))
    assert op["done"] == returned and 3 <= returned < 60
    (entry,) = [e for e in asyncio.run(_trail(url)) if e.action == "redrive.cancel"]
    assert entry.count == returned, "the audit count is what was applied"
    assert entry.reason == f"interrupted ({stop.name})"

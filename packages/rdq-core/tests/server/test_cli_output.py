"""What the CLI prints, run as a script runs it (a process without a terminal): an action's
summary and nothing else unless log lines are asked for, and an audit trail whose cells break
between words."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import rdq
from rdq.spi import Attempt, Envelope, Outcome

RDQ = shutil.which("rdq") or "rdq"


async def _dead(url: str, n: int) -> None:
    async with rdq.open_storage(url) as store:
        await store.migrate()
        for i in range(n):
            await store.enqueue(
                Envelope(id=f"d-{i}", queue="payments", handler_ref="payments.charge_card")
            )
        for claim in await store.claim_due("payments", n, timedelta(seconds=30)):
            now = datetime.now(UTC)
            attempt = Attempt(
                number=1,
                outcome=Outcome.FAILED,
                error_type="shop.GatewayDown",
                error_message="502",
                started_at=now,
                finished_at=now,
            )
            await store.dead_letter(claim.task.id, claim.token, attempt)


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("RDQ_LOG_LEVEL", "COLUMNS")}
    return subprocess.run(
        [RDQ, *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env={**clean, **env},
    )


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    asyncio.run(_dead(url, 4))
    return url


def test_an_action_prints_its_summary_and_nothing_else(store_url: str) -> None:
    done = _run(
        "dlq",
        "redrive",
        "payments",
        "d-0",
        "--reason",
        "PSP back",
        "--yes",
        "--storage",
        store_url,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1 task(s) of queue payments redriven (matched 1, already gone 0)\n"
    assert done.stderr == "", "no log line, JSON or other, unless asked"


def test_log_lines_come_when_asked_and_on_stderr_only(store_url: str) -> None:
    done = _run(
        "--log-level",
        "info",
        "dlq",
        "purge",
        "payments",
        "d-1",
        "--reason",
        "poison",
        "--yes",
        "--storage",
        store_url,
    )
    assert done.returncode == 0, done.stderr
    said, archived = done.stdout.splitlines()
    assert said == "1 task(s) of queue payments purged (matched 1, already gone 0)"
    assert archived.startswith("archived 1 first: ") and archived.endswith(".jsonl.gz")
    logged = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["audit"]) for e in logged] == [("purge", True)]
    by_env = _run(
        "dlq",
        "purge",
        "payments",
        "d-2",
        "--reason",
        "poison",
        "--yes",
        "--storage",
        store_url,
        RDQ_LOG_LEVEL="info",
    )
    assert by_env.returncode == 0 and '"audit": true' in by_env.stderr


def test_the_audit_table_breaks_between_words_at_80_columns(store_url: str) -> None:
    redrive = _run(
        "dlq",
        "redrive",
        "payments",
        "--error-type",
        "shop.GatewayDown",
        "--handler-ref",
        "payments.charge_card",
        "--reason",
        "PSP outage over, INC-812",
        "--yes",
        "--storage",
        store_url,
    )
    assert redrive.returncode == 0, redrive.stderr
    shown = _run("audit", "--storage", store_url, COLUMNS="80")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    cells = " ".join(
        part.strip() for line in lines for part in re.split(r"[│┃]", line) if part.strip()
    )
    for word in (
        "error_type=shop.GatewayDown",
        "handler_ref=payments.charge_card",
        "“PSP outage over, INC-812”",
        "redrive",
        "payments",
    ):
        assert any(word in line for line in lines), (word, shown.stdout)
    assert "{" not in cells, "the selection in words, not JSON"

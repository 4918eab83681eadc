"""The embedded default: with no storage named, ``rdq worker``, the other commands and the
server use ``sqlite:///./rdq.db`` and say so; tasks there survive a kill -9 of the worker."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from rdq.cli import main
from rdq.spi import Outcome, Status
from rdq_sqlite import SqliteStorage

RDQ = str(Path(sys.executable).parent / "rdq")

APP = textwrap.dedent(
    """
    import asyncio, os
    import rdq

    app = rdq.App()
    # The lease must lapse after the kill (on the clock: that is the recovery under test), but
    # while a worker lives its renewals, every third of the lease, must never miss it: a lease
    # lost to a slow machine would add an attempt the test does not expect. 5 s survives a
    # stall of over 3 s and costs the second worker at most 5 s of waiting.
    app.queue("jobs", lease=5.0, timeout=600, max_attempts=5, concurrency=3)

    @app.handler("work", queue="jobs")
    async def work(payload, ctx):
        with open("started.log", "a") as log:
            log.write(ctx.task_id + "\\n")
        if not os.path.exists("go"):
            await asyncio.sleep(3600)  # hangs until the worker is killed

    async def submit(count):
        async with rdq.Client.open("sqlite:///./rdq.db", app=app) as client:
            for n in range(count):
                await client.submit("work", {"n": n}, id=f"job-{n}")

    if __name__ == "__main__":
        asyncio.run(submit(8))
    """
)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RDQ_STORAGE", "RDQ_STORAGE_URL")}


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def lines(path: Path, count: int, deadline: float) -> list[str]:
    while time.monotonic() < deadline:
        found = _lines(path)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path.name} never reached {count} lines")


async def stats_until(url: str, succeeded: int, deadline: float) -> None:
    async with SqliteStorage.from_url(url) as store:
        while time.monotonic() < deadline:
            if (await store.stats("jobs")).succeeded >= succeeded:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {succeeded} tasks succeeded in time")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_rdq_worker_without_storage_keeps_tasks_across_kill_9_and_restart(
    tmp_path: Path,
) -> None:
    (tmp_path / "jobs_app.py").write_text(APP)
    env = clean_env()
    submit = await asyncio.create_subprocess_exec(
        sys.executable, "jobs_app.py", cwd=tmp_path, env=env
    )
    assert await submit.wait() == 0
    url = f"sqlite:///{tmp_path / 'rdq.db'}"

    first = await asyncio.create_subprocess_exec(
        RDQ,
        "worker",
        "jobs_app:app",
        "--log-format",
        "json",
        cwd=tmp_path,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    assert first.stderr is not None
    announced = (await asyncio.wait_for(first.stderr.readline(), 30)).decode()
    assert "using sqlite:///./rdq.db" in announced
    assert str(tmp_path / "rdq.db") in announced
    hung = await lines(tmp_path / "started.log", 3, time.monotonic() + 60)
    first.send_signal(signal.SIGKILL)
    await first.wait()

    async with SqliteStorage.from_url(url) as store:
        stats = await store.stats("jobs")
        assert (stats.pending, stats.in_flight) == (5, 3)  # nothing lost, three mid-handler

    (tmp_path / "go").touch()
    second = await asyncio.create_subprocess_exec(
        RDQ,
        "worker",
        "jobs_app:app",
        cwd=tmp_path,
        env=env,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await stats_until(url, 8, time.monotonic() + 60)
    finally:
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 30) == 0

    async with SqliteStorage.from_url(url) as store:
        for n in range(8):
            task = await store.get(f"job-{n}")
            assert task.status == Status.SUCCEEDED
            outcomes = [attempt.outcome for attempt in task.attempts]
            if task.id in hung[:3]:
                assert outcomes == [Outcome.LEASE_EXPIRED, Outcome.SUCCEEDED]
            else:
                assert outcomes == [Outcome.SUCCEEDED]


def test_the_cli_uses_the_default_store_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("RDQ_STORAGE", "RDQ_STORAGE_URL"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    migrated = runner.invoke(main, ["migrate"])
    assert migrated.exit_code == 0, migrated.output
    assert "using sqlite:///./rdq.db" in migrated.output
    assert (tmp_path / "rdq.db").exists()
    stats = runner.invoke(main, ["stats", "--json"])
    assert stats.exit_code == 0, stats.output
    assert '"queues": []' in stats.output, "the store just made, empty"
    typo = runner.invoke(main, ["stats", "jobs"])
    assert typo.exit_code == 1 and "unknown queue 'jobs'" in typo.output, typo.output


def test_rdq_storage_names_the_store_and_rdq_storage_url_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    monkeypatch.delenv("RDQ_STORAGE_URL", raising=False)
    monkeypatch.setenv("RDQ_STORAGE", f"sqlite:///{tmp_path / 'named.db'}")
    result = runner.invoke(main, ["migrate"])
    assert result.exit_code == 0, result.output
    assert "no storage named" not in result.output
    assert (tmp_path / "named.db").exists()
    monkeypatch.delenv("RDQ_STORAGE")
    monkeypatch.setenv("RDQ_STORAGE_URL", f"sqlite:///{tmp_path / 'older.db'}")
    result = runner.invoke(main, ["migrate"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "older.db").exists()
    assert not (tmp_path / "rdq.db").exists()


def test_rdq_demo_runs_on_a_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    for _ in range(2):  # a second run on the same file has tasks of its own
        result = CliRunner().invoke(main, ["demo", "--no-color", "--storage", url])
        assert result.exit_code == 0, result.output
        assert "dead-letter queue of 'orders': 3 tasks" in result.output
        assert "redriven 3 tasks" in result.output

    async def count() -> int:
        async with SqliteStorage.from_url(url) as store:
            return (await store.stats("orders")).succeeded

    assert asyncio.run(count()) == 14


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.asyncio
async def test_rdq_server_without_storage_serves_from_the_default_store(tmp_path: Path) -> None:
    port = _free_port()
    env = {**clean_env(), "RDQ_SERVER_TOKENS": "ops:read+submit+admin:" + "t" * 24}
    node = await asyncio.create_subprocess_exec(
        RDQ,
        "server",
        "--port",
        str(port),
        "--no-work",
        cwd=tmp_path,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    assert node.stderr is not None
    try:
        announced = (await asyncio.wait_for(node.stderr.readline(), 30)).decode()
        assert "using sqlite:///./rdq.db" in announced
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(_ready, port):
            assert time.monotonic() < deadline, "the node never became ready"
            await asyncio.sleep(0.1)
    finally:
        node.send_signal(signal.SIGTERM)
        await asyncio.wait_for(node.wait(), 30)
    async with SqliteStorage.from_url(f"sqlite:///{tmp_path / 'rdq.db'}") as store:
        assert await store.list_queues() == []


EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "orders"


def _example(script: str, cwd: Path, **env: str) -> tuple[str, str]:
    import subprocess

    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=cwd,
        env={**clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


async def _task(path: Path, task_id: str) -> Status:
    async with SqliteStorage.from_url(f"sqlite:///{path}") as store:
        return (await store.get(task_id)).status


def test_the_submit_example_stores_where_rdq_storage_says(tmp_path: Path) -> None:
    named = tmp_path / "named.db"
    out, _ = _example("submit.py", tmp_path, RDQ_STORAGE=f"sqlite:///{named}")
    assert out.strip() == "task order-42 stored"
    assert asyncio.run(_task(named, "order-42")) == Status.PENDING
    assert not (tmp_path / "rdq.db").exists()
    out, _ = _example("submit.py", tmp_path, RDQ_STORAGE=f"sqlite:///{named}")
    assert out.strip() == "task order-42 already there"  # the same store, not a fresh one


def test_the_submit_example_without_a_store_uses_rdq_db_and_says_so(tmp_path: Path) -> None:
    out, err = _example("submit.py", tmp_path)
    assert out.strip() == "task order-42 stored"
    assert "using sqlite:///./rdq.db" in err
    assert asyncio.run(_task(tmp_path / "rdq.db", "order-42")) == Status.PENDING


def test_the_run_example_works_its_tasks_in_the_store_rdq_storage_names(tmp_path: Path) -> None:
    named = tmp_path / "shop.db"
    out, err = _example("run.py", tmp_path, RDQ_STORAGE=f"sqlite:///{named}")
    assert "no storage named" not in err and "memory://" not in err
    assert len(out.splitlines()) == 9

    async def finished() -> int:
        async with SqliteStorage.from_url(f"sqlite:///{named}") as store:
            payments, emails = await store.stats("payments"), await store.stats("emails")
            return sum(s.succeeded + s.dlq_depth for s in (payments, emails))

    assert asyncio.run(finished()) == 9

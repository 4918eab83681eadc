"""The ``rdq demo`` and ``rdq worker`` commands, run as a user runs them."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner

from rdq.cli import main

RDQ = str(Path(sys.executable).parent / "rdq")


def test_the_demo_run_in_a_process_leaves_its_logging_as_it_found_it():
    """An application that runs the demo's command in its own process (as a test does) keeps
    its logging: structlog left unconfigured stays so, and rdq's loggers do not start
    writing to standard output."""
    structlog.reset_defaults()
    result = CliRunner().invoke(main, ["demo", "--no-color"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert not structlog.is_configured()


def test_demo_retries_dead_letters_redrives_and_points_to_next_steps():
    result = CliRunner().invoke(main, ["demo", "--no-color"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.output
    # live progress: a flaky task retried with visible backoff, then succeeding on attempt 3
    assert re.search(r"charge-A-1002\s+#1\s+FAILED\s+ConnectionError", out)
    assert re.search(r"retry in \d+\.\d\ds", out)
    assert re.search(r"charge-A-1002\s+#3\s+✓ succeeded", out)
    # one permanent failure, one timeout and one exhaustion are dead-lettered
    assert "dead-lettered (permanent)" in out
    assert "rdq.Timeout" in out
    assert "dead-lettered (retries exhausted)" in out
    assert "dead-letter queue of 'orders': 3 tasks" in out
    # the DLQ is redriven and the tasks succeed, history kept
    assert "redriven 3 tasks" in out
    for task_id in ("crm-4711", "image-cat", "invoice-A-1003"):
        assert f"{task_id} (" in out and "redriven 1x" in out
    assert "What to try next" in out
    assert "  rdq demo --storage sqlite:///rdq-demo.db\n" in out  # rdq-sqlite is installed
    assert re.search(
        r"  rdq server --storage sqlite:///rdq-demo.db"
        r" --token you:read\+submit\+admin:[0-9a-f]{24}\n",
        out,
    )
    assert "\x1b[" not in out  # --no-color: no escape codes


def test_worker_command_rejects_bad_app_specs(tmp_path: Path):
    runner = CliRunner()
    result = runner.invoke(main, ["worker", "no_such_module:app", "--storage", "memory://"])
    assert result.exit_code == 1
    assert "cannot import 'no_such_module'" in result.output
    result = runner.invoke(main, ["worker", "rdq:__version__", "--storage", "memory://"])
    assert result.exit_code == 1
    result = runner.invoke(main, ["worker", "rdq:Worker", "--storage", "memory://"])
    assert "not an rdq.App" in result.output
    (tmp_path / "brokenapp.py").write_text("import rdq\napp = rdq.App()\nundefined_name\n")
    os.chdir(tmp_path)  # the current directory is importable, as for `python -m`
    try:
        result = runner.invoke(main, ["worker", "brokenapp:app", "--storage", "memory://"])
    finally:
        os.chdir(Path(__file__).parent)
    assert result.exit_code == 1
    assert "importing 'brokenapp' failed: NameError" in result.output


PAYMENTS_APP = """
import rdq
app = rdq.App()
app.queue("paymnets", max_attempts=3)   # a misspelt queue table

@app.handler("charge_card", queue="payments")
async def charge_card(payload):
    return None
"""


def test_a_worker_warns_about_queues_no_handler_serves(tmp_path: Path):
    (tmp_path / "payapp.py").write_text(PAYMENTS_APP)
    proc = subprocess.Popen(
        [RDQ, "worker", "payapp:app", "--storage", "memory://", "--log-format", "json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "worker started" in line:
                break
        proc.terminate()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    [warning] = [json.loads(line) for line in lines if "no handler is registered" in line]
    assert warning["queues"] == ["paymnets"]
    assert warning["queues_with_handlers"] == ["payments"]
    assert warning["level"] == "warning"


def test_a_worker_on_an_unmigrated_database_exits_at_start_saying_to_migrate(
    postgres_url: str, tmp_path: Path
):
    (tmp_path / "payapp.py").write_text(PAYMENTS_APP)
    url = f"{postgres_url}?schema=never_migrated_{os.getpid()}"
    result = subprocess.run(
        [RDQ, "worker", "payapp:app", "--storage", url, "--queue", "payments"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the worker cannot use its store" in result.stderr
    assert "rdq migrate --storage URL" in result.stderr


def test_worker_command_serves_metrics_and_exits_cleanly_on_sigterm(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "sigapp.py").write_text(
        textwrap.dedent(
            """
            import rdq
            app = rdq.App()
            app.queue("sig")
            """
        )
    )
    proc = subprocess.Popen(
        [
            RDQ,
            "worker",
            "sigapp:app",
            "--storage",
            "memory://",
            "--log-format",
            "json",
            "--metrics-port",
            str(port),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "worker started" in line:
                break
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        assert b'rdq_worker_in_flight{queue="sig"} 0.0' in body
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert '"event": "worker stopped"' in out


def test_the_example_app_runs_to_completion():
    root = Path(__file__).resolve().parents[4]
    script = root / "examples" / "orders" / "run.py"
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RDQ_STORAGE_URL": "memory://"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if "charge_card" in line]
    assert len(lines) == 7
    assert "rdq.UndecodablePayload" in result.stdout
    assert "ValueError: not an email address" in result.stdout


def printed_commands(out: str) -> list[str]:
    """The commands the demo prints under "What to try next", as printed."""
    tail = out.split("What to try next", 1)[1]
    return [line.strip() for line in tail.splitlines() if line.startswith("  rdq ")]


def run_printed(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    return subprocess.run([RDQ, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=180)


def serve_printed(command: str, cwd: Path) -> None:
    """Start the printed ``rdq server`` command and wait until it answers on its port."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8080)) == 0:
            pytest.fail("port 8080 is in use: the printed rdq server command cannot start")
    proc = subprocess.Popen(
        [RDQ, *shlex.split(command)[1:]],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8080/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"{command!r} did not serve: {out}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)


@pytest.mark.slow
def test_the_demos_next_commands_work_exactly_as_printed(tmp_path: Path):
    """After the in-memory demo, the printed commands run as pasted: the demo again on a
    SQLite file, then the commands that one prints to look at what it left."""
    first = run_printed("rdq demo --no-color", tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    commands = printed_commands(first.stdout)
    assert commands[0] == "rdq demo --storage sqlite:///rdq-demo.db"
    again = run_printed(commands[0], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    more = printed_commands(again.stdout)
    assert [c.split(" --storage")[0] for c in more] == [
        "rdq stats orders",
        "rdq dlq list orders",
        "rdq server",
    ]
    for command in commands[1:] + more:
        if command.startswith("rdq server"):
            serve_printed(command, tmp_path)
            continue
        result = run_printed(command, tmp_path)
        assert result.returncode == 0, (command, result.stdout + result.stderr)
        assert "orders" in result.stdout, command


def test_worker_command_takes_max_unrecorded_and_says_it_at_start(tmp_path: Path):
    """``--max-unrecorded`` reaches the worker (its start line says the bound in force), and
    a value out of range is refused naming the option."""
    refused = CliRunner().invoke(main, ["worker", "rdq:App", "--max-unrecorded", "-1"])
    assert refused.exit_code == 2
    assert "--max-unrecorded" in refused.output
    (tmp_path / "payapp.py").write_text(PAYMENTS_APP)
    proc = subprocess.Popen(
        [
            RDQ,
            "worker",
            "payapp:app",
            "--storage",
            "memory://",
            "--log-format",
            "json",
            "--max-unrecorded",
            "250",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        started = next(line for line in proc.stdout if "worker started" in line)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert json.loads(started)["max_unrecorded"] == 250

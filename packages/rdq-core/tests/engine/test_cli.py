"""The ``rdq demo`` and ``rdq worker`` commands, run as a user runs them."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

from click.testing import CliRunner

from rdq.cli import main

RDQ = str(Path(sys.executable).parent / "rdq")


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
    assert "rdq server" in out and "postgresql://" in out
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

"""``rdq server`` as an operator runs it: a process, a config file, a token in the environment."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .conftest import Receiver, Reply

TOKEN = "process-token-0123456789"
RDQ = str(Path(sys.executable).parent / "rdq")
HTTP_TIMEOUT = 30.0
"""A bound on one request to the node (httpx's default, 5 s, is short on a busy machine)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"rdq server exited early: {process.stderr.read()!r}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("rdq server did not become ready")


def _status(url: str, task_id: str, headers: dict[str, str]) -> str:
    response = httpx.get(f"{url}/v1/tasks/{task_id}", headers=headers, timeout=HTTP_TIMEOUT)
    status: str = response.json()["status"]
    return status


def test_rdq_server_runs_from_a_config_file_and_stops_on_sigterm(
    tmp_path: Path, receiver: Receiver
) -> None:
    port = _free_port()
    config = tmp_path / "rdq.toml"
    config.write_text(
        f"""
[server]
storage = "memory://"
port = {port}
queues = ["hooks"]
audit_log = "{tmp_path / "audit.jsonl"}"

[[server.tokens]]
owner = "ops"
rights = ["read", "submit", "admin"]
token_env = "OPS_TOKEN"

[server.callbacks]
allow_hosts = ["127.0.0.1"]
allow_networks = ["127.0.0.1/32"]

[queues.hooks]
max_attempts = 1
"""
    )
    hook = "/hook?sig=receiver-secret-0123"
    receiver.script(hook, Reply(500))
    env = {**os.environ, "OPS_TOKEN": TOKEN, "RDQ_SERVER_TOKENS": ""}
    process = subprocess.Popen(
        [RDQ, "server", "--config", str(config), "--log-json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        submitted = httpx.post(
            f"{url}/v1/tasks",
            headers=headers,
            timeout=HTTP_TIMEOUT,
            json={"id": "p1", "queue": "hooks", "handler_ref": receiver.url(hook)},
        )
        assert submitted.status_code == 201
        deadline = time.monotonic() + 60
        while _status(url, "p1", headers) != "DEAD":
            assert time.monotonic() < deadline, "the callback task never dead-lettered"
            time.sleep(0.1)
        purged = httpx.post(
            f"{url}/v1/queues/hooks/dlq/purge",
            headers=headers,
            json={"ids": ["p1"], "reason": "test"},
            timeout=HTTP_TIMEOUT,
        )
        assert purged.json()["count"] == 1
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    # uvicorn finishes its graceful shutdown, then re-raises SIGTERM (exit status 143)
    assert process.returncode in (0, -signal.SIGTERM), stderr
    assert TOKEN.encode() not in stderr
    assert b"receiver-secret-0123" not in stderr, "a callback URL's query reached the log"
    lines = [json.loads(line) for line in stderr.decode().splitlines()]  # --log-json: all JSON
    assert any(line["event"] == "node stopped" for line in lines)
    requests = [line for line in lines if "HTTP Request" in line["event"]]
    assert requests and all("/hook?…" in line["event"] for line in requests), requests
    assert any("sent unsigned" in line["event"] for line in lines), "no warning about signing"
    assert '"actor":"ops (admin)"' in (tmp_path / "audit.jsonl").read_text()


def test_rdq_server_refuses_bad_config_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [RDQ, "server", "--storage", "memory://", "--token", "ops:read:short"],
        capture_output=True,
        timeout=60,
        env={**os.environ, "RDQ_SERVER_TOKENS": ""},
    )
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        "Error: server.tokens[0].token: tokens must be at least 16 characters"
    ]


def test_rdq_server_max_unrecorded_reaches_its_worker_and_a_bad_one_is_refused() -> None:
    port = _free_port()
    env = {**os.environ, "RDQ_SERVER_TOKENS": f"ops:read+submit+admin:{TOKEN}"}
    common = [RDQ, "server", "--storage", "memory://", "--port", str(port)]
    process = subprocess.Popen(
        [*common, "--max-unrecorded", "7", "--log-json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_ready(f"http://127.0.0.1:{port}", process)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    lines = [json.loads(line) for line in stderr.decode().splitlines()]
    (started,) = [line for line in lines if line["event"] == "worker started"]
    assert started["max_unrecorded"] == 7, started
    for bad in ("-1", "10001"):
        refused = subprocess.run(
            [*common, "--max-unrecorded", bad], capture_output=True, timeout=60, env=env
        )
        assert refused.returncode == 1
        assert refused.stderr.decode().strip().splitlines() == [
            "Error: server.max_unrecorded: must be a whole number from 0 to 10000"
        ]


def test_rdq_server_imports_its_app_from_the_current_directory_like_rdq_worker(
    tmp_path: Path,
) -> None:
    (tmp_path / "shopapp.py").write_text(
        "import rdq\n"
        "app = rdq.App()\n"
        "app.queue('shop', max_attempts=2)\n"
        "@app.handler('ship', queue='shop')\n"
        "async def ship(payload):\n"
        "    return None\n"
    )
    port = _free_port()
    env = {**os.environ, "RDQ_SERVER_TOKENS": f"ops:read+submit+admin:{TOKEN}"}
    env.pop("PYTHONPATH", None)
    process = subprocess.Popen(
        [
            RDQ,
            "server",
            "--storage",
            "memory://",
            "--port",
            str(port),
            "--app",
            "shopapp:app",
            "--queue",
            "shop",
            "--log-json",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        body = {"id": "s1", "queue": "shop", "handler_ref": "ship"}
        submitted = httpx.post(f"{url}/v1/tasks", headers=headers, json=body, timeout=HTTP_TIMEOUT)
        assert submitted.status_code == 201
        deadline = time.monotonic() + 60
        while _status(url, "s1", headers) != "SUCCEEDED":
            assert time.monotonic() < deadline, "the app's handler never ran on the node"
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    missing = subprocess.run(
        [RDQ, "server", "--storage", "memory://", "--app", "nowhere:app"],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert missing.returncode == 1
    (line,) = missing.stderr.decode().strip().splitlines()
    assert line.startswith("Error: app: cannot import 'nowhere'"), line


def test_rdq_server_with_an_app_works_the_apps_queues_without_being_told(
    tmp_path: Path,
) -> None:
    (tmp_path / "twoqueues.py").write_text(
        "import rdq\n"
        "app = rdq.App()\n"
        "app.queue('shop', max_attempts=2)\n"
        "@app.handler('ship', queue='shop')\n"
        "async def ship(payload):\n"
        "    return None\n"
        "@app.handler('mail', queue='mail')\n"
        "def mail(payload):\n"
        "    return None\n"
    )
    port = _free_port()
    env = {**os.environ, "RDQ_SERVER_TOKENS": f"ops:read+submit+admin:{TOKEN}"}
    env.pop("PYTHONPATH", None)
    process = subprocess.Popen(
        [RDQ, "server", "--storage", "memory://", "--port", str(port), "--app", "twoqueues:app"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        _wait_ready(url, process)
        for task_id, queue, handler in [("s1", "shop", "ship"), ("m1", "mail", "mail")]:
            body = {"id": task_id, "queue": queue, "handler_ref": handler}
            response = httpx.post(
                f"{url}/v1/tasks", headers=headers, json=body, timeout=HTTP_TIMEOUT
            )
            assert response.status_code == 201, response.text
        deadline = time.monotonic() + 60
        while {_status(url, "s1", headers), _status(url, "m1", headers)} != {"SUCCEEDED"}:
            assert time.monotonic() < deadline, "the node did not work the app's queues"
            time.sleep(0.1)
        listed = httpx.get(f"{url}/v1/queues", headers=headers, timeout=HTTP_TIMEOUT).json()
        assert [q["queue"] for q in listed["queues"]] == ["mail", "shop"]  # not 'default'
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    lines = [json.loads(line) for line in stderr.decode().splitlines()]
    (listening,) = [line for line in lines if line["event"] == "listening"]
    assert listening["works"] == ["mail", "shop"]

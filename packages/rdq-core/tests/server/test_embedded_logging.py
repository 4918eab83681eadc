"""A program that embeds a node (``create_app``) or the admin and configures no logging keeps
its standard output: rdq's lines go through stdlib ``logging`` (warnings to stderr)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EMBEDDING_NODE = """
import asyncio, json
from litestar.testing import AsyncTestClient
from rdq import App
from rdq.admin import TaskAdmin
from rdq.audit import MemoryAuditSink
from rdq.callbacks import CallbackSettings
from rdq.server import ServerSettings, TokenSpec, create_app
from rdq.spi import Selector
from rdq_memory import MemoryStorage

TOKEN = "embedded-token-0123456789"
HEADERS = {"Authorization": f"Bearer " + TOKEN}

async def main():
    engine = App()
    engine.queue("hooks", max_attempts=1)
    settings = ServerSettings(
        tokens=[TokenSpec(owner="ops", rights=["read", "submit", "admin"], token=TOKEN)],
        queues=["hooks"],
        secure_cookies=False,
        # an allow-list without a signing secret: the node warns at start
        callbacks=CallbackSettings(allow_hosts=["127.0.0.1"]),
    )
    async with MemoryStorage() as storage:
        app = create_app(settings, storage=storage, engine_app=engine)
        async with AsyncTestClient(app=app) as http:
            # a loopback address outside allow_networks: the worker dead-letters it (a warning)
            task = {"id": "t1", "queue": "hooks", "handler_ref": "http://127.0.0.1:9/x"}
            assert (await http.post("/v1/tasks", headers=HEADERS, json=task)).status_code == 201
            while (await http.get("/v1/tasks/t1", headers=HEADERS)).json()["status"] != "DEAD":
                await asyncio.sleep(0.02)
            body = {"ids": ["t1"], "reason": "audited"}
            redrive = await http.post("/v1/queues/hooks/dlq/redrive", headers=HEADERS, json=body)
            assert redrive.json()["count"] == 1, redrive.text
            bad = await http.post("/v1/queues/hooks/dlq/purge", headers=HEADERS, json={})
            assert bad.status_code == 422
        # the admin on its own, with an audit sink that fails (logged as an error)
        class Broken(MemoryAuditSink):
            async def write(self, record):
                raise OSError("disk full")
        admin = TaskAdmin(storage, sinks=[Broken()])
        try:
            await admin.purge("hooks", Selector(ids=["t1"]), actor="ops")
        except OSError:
            pass

asyncio.run(main())
print(json.dumps({"ok": True}))
"""


def test_an_application_that_embeds_a_node_keeps_its_stdout(tmp_path: Path) -> None:
    script = tmp_path / "embedding_node.py"
    script.write_text(EMBEDDING_NODE)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{"ok": true}\n'
    # the warnings and errors still reach stderr through stdlib logging
    assert "callbacks are sent unsigned" in result.stderr
    assert "audit sink failed" in result.stderr

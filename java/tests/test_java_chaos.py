"""The kit's kill -9 chaos test with Java worker processes.

The kit's own chaos test (in ``test_kit.py``) SIGKILLs Python processes whose storage calls
run in Java through the bridge. Here the killed processes are JVMs
(``io.rdq.harness.ChaosWorker``, the Java counterpart of ``rdq_compliance._chaos_worker``,
writing the same log), claiming and completing through the Java binding directly; the kit's
``run_chaos`` drives them, and checks the outcome, unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rdq_compliance import chaos

from ._java import harness_command


@pytest.mark.slow
@pytest.mark.asyncio
async def test_chaos_kill9_java_workers_mid_handler_are_recovered_without_double_claims(
    python_url: str, java_build: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def spawn_java(url: str, queue: str, log: Path, lease: float) -> chaos._Worker:
        process = subprocess.Popen(
            harness_command("ChaosWorker", url, queue, str(log), "--lease", str(lease)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return chaos._Worker(process, log)

    # run_chaos starts its workers through this one function: here they are JVMs
    monkeypatch.setattr(chaos, "_spawn", spawn_java)
    report = await chaos.run_chaos(python_url)
    report.assert_ok()
    assert report.reclaims > 0, f"no lease was lost and reclaimed: {report.summary()}"

"""Running the Java programs of the tests (``io.rdq.harness``, compiled from java/src/test)."""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from rdq_java_bridge import java_classpath
from rdq_java_bridge._process import java_command

JAVA_DIR = Path(__file__).resolve().parents[1]
TEST_CLASSES = JAVA_DIR / "build" / "test-classes"


def harness_command(program: str, *args: str) -> list[str]:
    """The command line of ``io.rdq.harness.<program>`` with ``args``."""
    command = java_command(f"io.rdq.harness.{program}", *args)
    at = command.index("-cp")
    command[at + 1] = f"{java_classpath()}:{TEST_CLASSES}"
    return command


def run_java(program: str, *args: str) -> str:
    """Run a harness program to its end; its standard output."""
    done = subprocess.run(
        harness_command(program, *args), capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"{program} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


class JavaProcess:
    """A running harness program whose output lines are collected as they come."""

    def __init__(self, program: str, *args: str) -> None:
        self.process = subprocess.Popen(
            harness_command(program, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        if self.process.stdout is None:
            return
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, prefix: str, timeout: float = 60.0) -> str:
        """The first output line starting with ``prefix`` (waiting for it if need be)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if line.startswith(prefix):
                    return line
            seen = len(self.lines)
            left = deadline - time.monotonic()
            if left <= 0 or (self.process.poll() is not None and self._new.empty()):
                done = self.process.poll() is not None and self.process.stderr is not None
                stderr = self.process.stderr.read() if done and self.process.stderr else ""
                raise AssertionError(
                    f"no line {prefix!r} from the Java program; it said {self.lines}\n{stderr}"
                )
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=min(left, 0.5))

    def stop(self) -> int:
        """SIGTERM (a graceful stop) and wait for the exit; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@contextlib.contextmanager
def java_worker(*args: str) -> Iterator[JavaProcess]:
    """``io.rdq.harness.LoopWorker`` with ``args``, stopped (gracefully) at the end."""
    worker = JavaProcess("LoopWorker", *args)
    try:
        worker.wait_for("ready")
        yield worker
    finally:
        worker.stop()

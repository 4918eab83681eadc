"""Finding the Java binding's build and running the bridge: one process per store
(``--stdio``) or one shared server that many stores reach over a Unix socket."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rdq.errors import ConfigError

__all__ = ["BridgeServer", "java_classpath", "java_command"]

_BUILD = Path(__file__).resolve().parents[3] / "build"
"""``java/build``: where ``java/build.sh`` writes the jar and its classpath."""

JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Xss512k")
"""A small, quick-starting JVM: the bridge's work is I/O bound."""


def java_classpath() -> str:
    """The runtime classpath of rdq-java: ``RDQ_JAVA_CLASSPATH``, else the one ``build.sh``
    wrote. ``ConfigError`` when neither exists (build it with ``java/build.sh``)."""
    given = os.environ.get("RDQ_JAVA_CLASSPATH")
    if given:
        return given
    recorded = _BUILD / "classpath"
    if not recorded.exists():
        raise ConfigError(
            f"rdq-java is not built ({recorded} is missing): run java/build.sh",
            key="RDQ_JAVA_CLASSPATH",
        )
    return recorded.read_text(encoding="utf-8").strip()


def java_command(main: str, *args: str) -> list[str]:
    """The command line running ``main`` (a class of rdq-java) with ``args``."""
    java = shutil.which("java")
    if java is None:
        raise ConfigError("no java on PATH (install openjdk-17-jdk-headless)", key="java")
    return [java, *JVM_OPTIONS, "-cp", java_classpath(), main, *args]


class BridgeServer:
    """A bridge server process serving any number of stores on a Unix socket; stores reach it
    with ``bridge=<socket>`` in their URL. Use as a context manager."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="rdq-java-")
        self.socket = os.path.join(self._dir, "bridge.sock")
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BridgeServer:
        self._process = subprocess.Popen(
            java_command("io.rdq.bridge.Main", "--socket", self.socket),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        if self._process.stdout is None:
            raise RuntimeError("the Java bridge server has no stdout pipe")
        line = self._process.stdout.readline()
        if line.strip() != b"ready":
            self.__exit__(None, None, None)
            raise RuntimeError(f"the Java bridge server did not start (said {line!r})")
        return self

    def __exit__(self, *exc: object) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

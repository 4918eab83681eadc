"""rdq's storage contract served by the Java binding (``java/``), for rdq's Python tests.

:class:`JavaBridgeStorage` implements :class:`rdq.spi.Storage` by forwarding every call, as
one JSON line, to a Java process that runs it on ``io.rdq.postgres.PostgresStorage`` and
answers with one line. It translates and nothing else: no validation of its own beyond what
cannot cross the wire, no retries, no fix-ups, so the compliance kit run through it checks the
Java code. Open it as ``java+postgresql://user:pw@host:port/db?schema=...`` (see
:mod:`rdq_java_bridge._url`); ``bridge=/path/to.sock`` reaches a shared bridge server
(:class:`BridgeServer`) instead of starting a Java process of its own.
"""

from rdq_java_bridge._process import BridgeServer, java_classpath
from rdq_java_bridge._storage import JavaBridgeStorage

__all__ = ["BridgeServer", "JavaBridgeStorage", "java_classpath"]

"""Tracing helpers for code around rdq (OpenTelemetry, with ``rdq-core[otel]``).

Without OpenTelemetry installed they do nothing and import nothing::

    from rdq.tracing import span

    with span("rdq redrive", {"rdq.queue": queue, "rdq.count": count}) as current:
        ...  # current is the span, or None without OpenTelemetry

The engine's own spans (each attempt, linked to its submitter) are described in
``docs/engine.md``.
"""

from __future__ import annotations

from rdq._otel import operation_span as span

__all__ = ["span"]

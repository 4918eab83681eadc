"""OpenTelemetry tracing, when ``opentelemetry-api`` is installed (``rdq-core[otel]``).

For code around rdq, :func:`span` opens a span (or does nothing without OpenTelemetry)::

    from rdq.tracing import span

    with span("rdq redrive", {"rdq.queue": queue, "rdq.count": count}) as current:
        ...  # current is the span, or None without OpenTelemetry

What the engine does with it:

- ``submit`` injects the current trace context (W3C ``traceparent``/``tracestate``, baggage)
  into the task's headers, when there is a current span;
- the worker runs each attempt in a ``CONSUMER`` span named ``process <queue>``, *linked* to
  the context found in the task's headers (the submitter's span), with attributes
  ``messaging.system="rdq"``, ``messaging.destination.name`` (queue),
  ``messaging.message.id`` (task id), ``rdq.handler``, ``rdq.attempt``, then ``rdq.outcome``
  and ``rdq.error_type``; a failure sets the span's status to ERROR. The span is current
  while the handler runs (plain functions included), so the handler's own spans are its
  children.

Nothing is imported until first use (a worker's start), and without the package every entry
point returns at once. With the API but no SDK configured (no tracer provider set), attempts
make no span.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = [
    "attempt_span",
    "carry_context",
    "finish_attempt",
    "operation_span",
    "preload",
    "span",
    "trace_headers",
]

_UNLOADED: Any = object()
_api: Any = _UNLOADED


class _Api:
    def __init__(self) -> None:
        from opentelemetry import propagate, trace

        try:
            from importlib.metadata import version

            rdq_version = version("rdq-core")
        except Exception:
            rdq_version = None
        self.trace = trace
        self.propagate = propagate
        self.tracer = trace.get_tracer("rdq", rdq_version)


def _load() -> _Api | None:
    global _api
    if _api is _UNLOADED:
        try:
            _api = _Api()
        except ImportError:
            _api = None
    return _api  # type: ignore[no-any-return]


def preload() -> None:
    """Import OpenTelemetry now, if it is installed: a worker calls this as it starts, so its
    first attempt does not pay for the import (a tenth of a second or more)."""
    _load()


def _current_span_is_valid(api: _Api) -> bool:
    return bool(api.trace.get_current_span().get_span_context().is_valid)


def trace_headers() -> dict[str, str] | None:
    """The current trace context as task headers, or None when there is no current span
    (or no OpenTelemetry)."""
    api = _load()
    if api is None or not _current_span_is_valid(api):
        return None
    carrier: dict[str, str] = {}
    api.propagate.inject(carrier)
    return carrier or None


def carry_context(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` bound to the current context when a span is current (so a handler in a thread
    sees its attempt's span), else ``fn`` itself."""
    api = _load()
    if api is None or not _current_span_is_valid(api):
        return fn
    return functools.partial(contextvars.copy_context().run, fn)


def _tracing(api: _Api | None) -> bool:
    """True once an application installed a real tracer provider (an SDK): before that every
    span would be a no-op, so attempts skip making one."""
    if api is None:
        return False
    provider = api.trace.get_tracer_provider()
    return not isinstance(provider, api.trace.ProxyTracerProvider | api.trace.NoOpTracerProvider)


def attempt_span(
    queue: str, task_id: str, handler: str, attempt: int, headers: Mapping[str, str]
) -> contextlib.AbstractContextManager[Any] | None:
    """The span of one attempt (a context manager making it current), or None without
    OpenTelemetry or without a configured SDK."""
    api = _load()
    if api is None or not _tracing(api):
        return None
    links = []
    if headers:
        remote = api.trace.get_current_span(api.propagate.extract(headers)).get_span_context()
        if remote.is_valid:
            links.append(api.trace.Link(remote))
    return api.tracer.start_as_current_span(
        f"process {queue}",
        kind=api.trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "rdq",
            "messaging.operation": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": task_id,
            "rdq.handler": handler,
            "rdq.attempt": attempt,
        },
    )


def finish_attempt(
    span: Any, outcome: str | None, error_type: str | None, error_message: str | None = None
) -> None:
    """Record the attempt's outcome on its span (``outcome`` None: the lease was lost). The
    ``error_message`` given is the scrubbed one the attempt record keeps (see
    :mod:`rdq.scrub`): a span never carries the text the handler raised."""
    api = _load()
    if api is None or span is None:
        return
    span.set_attribute("rdq.outcome", outcome or "ABANDONED")
    if error_type is not None:
        span.set_attribute("rdq.error_type", error_type)
    if error_message is not None:
        span.set_attribute("rdq.error_message", error_message[:1024])
    if outcome not in (None, "SUCCEEDED"):
        described = f"{error_type}: {error_message[:256]}" if error_message else error_type
        span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, described))


@contextlib.contextmanager
def operation_span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A span around one operation (the current span's child), or nothing without
    OpenTelemetry; yields the span or None. An exception escaping it is recorded."""
    api = _load()
    if api is None:
        yield None
        return
    with api.tracer.start_as_current_span(name, attributes=dict(attributes or {})) as span:
        yield span


span = operation_span
"""``with span(name, attributes) as current:`` — a span around code of yours (``None``
without OpenTelemetry)."""

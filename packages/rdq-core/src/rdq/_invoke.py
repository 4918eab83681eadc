"""Calling one handler under its timeout and classifying how the call ended.

``async`` handlers and scheme invokers are awaited on the worker's loop; plain functions run
in the worker's thread pool, and one that overruns its timeout is fenced off (its thread is
abandoned, its result ignored). Whatever the call does, :func:`invoke` returns a
:class:`~rdq._classify.Decision` — or ``None`` when the lease was lost meanwhile (the outcome
must not be written).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from rdq import _classify, _otel, _tracebacks
from rdq._app import Handler, SchemeInvoker, TaskContext
from rdq._classify import Action, Decision
from rdq._threads import HandlerThreads, ThreadExit
from rdq.config import QueueConfig
from rdq.spi import Outcome

if TYPE_CHECKING:
    from rdq._runner import Run

__all__ = ["INTERRUPTED", "invoke"]

INTERRUPTED = Decision(
    Action.RESCHEDULE,
    Outcome.INTERRUPTED,
    0.0,
    _classify.INTERRUPTED_ERROR,
    "the worker shut down before the handler finished",
)


class _TimedOut(Exception):
    """The call's own timeout ran out; ``where`` is where the handler was then."""

    def __init__(self, where: str | None) -> None:
        self.where = where


class _Undecodable(Exception):
    """The payload does not convert to the handler's payload type."""


async def invoke(
    run: Run,
    target: Handler | SchemeInvoker,
    ctx: TaskContext,
    config: QueueConfig,
    used: int,
    threads: HandlerThreads,
    rng: random.Random | None,
) -> Decision | None:
    """Call ``target`` for ``run``'s task (attempt ``used`` of ``config.max_attempts``) and
    decide what its ending means. ``CancelledError`` propagates unless the lease was lost
    (``None``) or the worker interrupted the run at shutdown (``INTERRUPTED``)."""
    timeout = run.timeout = asyncio.timeout(config.timeout)
    try:
        if isinstance(target, Handler):
            args = _arguments(target, run.claimed.task.payload, ctx)
            if target.is_async:
                await _awaited(run, timeout, config, functools.partial(target.fn, *args))
            else:
                await _in_thread(run, timeout, config, threads, target.fn, args)
        else:
            await _awaited(run, timeout, config, functools.partial(target, run.claimed.task, ctx))
    except asyncio.CancelledError:
        if run.lost:
            return None
        if run.interrupted:
            return INTERRUPTED
        raise
    except _Undecodable as exc:
        return Decision(
            Action.DEAD_LETTER,
            Outcome.PERMANENT,
            0.0,
            _classify.UNDECODABLE_PAYLOAD,
            _classify.truncate_message(str(exc)),
        )
    except _TimedOut as exc:
        if run.lost:
            return None
        return _classify.classify_timeout(exc.where, used, config, rng=rng)
    except ThreadExit as exc:  # SystemExit, KeyboardInterrupt... in a handler's thread
        return _classify.classify_error(exc.original, used, config, rng=rng)
    except BaseException as exc:  # a handler may raise anything, SystemExit included
        if run.lost:
            return None
        return _classify.classify_error(exc, used, config, rng=rng)
    return None if run.lost else _classify.SUCCESS


def _arguments(handler: Handler, payload: Any, ctx: TaskContext) -> tuple[Any, ...]:
    """What ``handler`` is called with: nothing, the payload, or the payload and ``ctx``;
    the payload converted to the handler's payload type first if it has one."""
    if handler.payload_type is not None:
        try:
            payload = msgspec.convert(payload, handler.payload_type, strict=False)
        except (msgspec.ValidationError, TypeError) as exc:
            name = handler.payload_type.__name__
            raise _Undecodable(f"payload does not convert to {name}: {exc}") from None
    if handler.takes_context:
        return (payload, ctx)
    if handler.takes_payload:
        return (payload,)
    return ()


def _last_line(config: QueueConfig) -> str:
    return f"{_classify.TIMEOUT_ERROR}: {_classify.timeout_message(config)}\n"


async def _awaited(
    run: Run,
    timeout: asyncio.Timeout,
    config: QueueConfig,
    call: Callable[[], Awaitable[Any]],
) -> None:
    """Await ``call()`` on this loop under ``timeout``."""
    run.deadline = time.monotonic() + config.timeout
    try:
        async with timeout:
            await call()
    except TimeoutError as exc:
        if not timeout.expired():  # the handler's own TimeoutError: an ordinary failure
            raise
        raise _TimedOut(_tracebacks.cancelled_at(exc, _last_line(config))) from None


async def _in_thread(
    run: Run,
    timeout: asyncio.Timeout,
    config: QueueConfig,
    threads: HandlerThreads,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    """Run ``fn(*args)`` in the pool under ``timeout``; an overrun call is abandoned."""
    call = threads.submit(_otel.carry_context(functools.partial(fn, *args)))
    run.call = call
    try:
        async with timeout:
            result = await call.future
            if inspect.isawaitable(result):  # a plain def that returned an awaitable
                await result
    except TimeoutError as exc:
        if not timeout.expired():
            raise
        last_line = _last_line(config)
        where = None
        if not call.abandoned:  # its thread still runs it (set once the call has returned)
            where = _tracebacks.thread_stack(call.thread, last_line)
        raise _TimedOut(where or _tracebacks.cancelled_at(exc, last_line)) from None
    finally:
        run.call = None
        if not call.future.done() or call.future.cancelled():
            threads.abandon(call)

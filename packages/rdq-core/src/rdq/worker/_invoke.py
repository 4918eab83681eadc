"""Calling one handler under its timeout and classifying how the call ended.

``async`` handlers and scheme invokers are awaited on the worker's loop; plain functions run
in the worker's thread pool, and one that overruns its timeout is fenced off (its thread is
abandoned, its result ignored). Whatever the call does, :func:`invoke` returns a
:class:`~rdq.retry.Decision` — or ``None`` when the lease was lost meanwhile (the outcome
must not be written).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from rdq import retry, tracing
from rdq.app import Handler, SchemeInvoker, TaskContext
from rdq.config import QueueConfig
from rdq.retry import Action, Decision
from rdq.spi import Outcome
from rdq.worker._deadlines import Deadlines
from rdq.worker._threads import HandlerThreads, ThreadExit

if TYPE_CHECKING:
    from rdq.worker._run import Run

__all__ = ["INTERRUPTED", "invoke"]

INTERRUPTED = Decision(
    Action.RESCHEDULE,
    Outcome.INTERRUPTED,
    0.0,
    retry.INTERRUPTED_ERROR,
    "the worker shut down before the handler finished",
)


class _Undecodable(Exception):
    """The payload does not convert to the handler's payload type."""


async def invoke(
    run: Run,
    target: Handler | SchemeInvoker,
    ctx: TaskContext | None,
    config: QueueConfig,
    used: int,
    threads: HandlerThreads,
    rng: random.Random | None,
    deadlines: Deadlines,
) -> Decision | None:
    """Call ``target`` for ``run``'s task (attempt ``used`` of ``config.max_attempts``) and
    decide what its ending means. The call's timeout is ``run``'s deadline in ``deadlines``
    (one timer for every running handler): when it passes, the call's task is cancelled and
    the call ends as a timeout. ``CancelledError`` from elsewhere propagates unless the lease
    was lost (``None``) or the worker interrupted the run at shutdown (``INTERRUPTED``).
    ``ctx`` is built here if the target takes one and none was given."""
    current = run.task
    if current is None:
        raise RuntimeError("a run is invoked from the task that runs it")
    cancelling = current.cancelling()
    run.deadline = deadlines.mono() + config.timeout
    deadlines.add(run)
    try:
        if isinstance(target, Handler):
            args = _arguments(target, run.claimed.task.payload, ctx, run)
            if target.is_async:
                await target.fn(*args)
            else:
                await _in_thread(run, config, threads, target.fn, args)
        else:
            await target(run.claimed.task, ctx if ctx is not None else run.context())
    except asyncio.CancelledError as exc:
        if run.expired:
            run.expired = False  # its cancellation is accounted for here
            if current.uncancel() <= cancelling:  # no other cancellation: a timeout
                if run.lost:
                    return None
                where = run.where or _cancelled_at(exc, config)
                return retry.classify_timeout(where, used, config, rng=rng)
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
            retry.UNDECODABLE_PAYLOAD,
            retry.truncate_message(str(exc)),
        )
    except ThreadExit as exc:  # SystemExit, KeyboardInterrupt... in a handler's thread
        return retry.classify_error(exc.original, used, config, rng=rng)
    except BaseException as exc:  # a handler may raise anything, SystemExit included
        if run.lost:
            return None
        return retry.classify_error(exc, used, config, rng=rng)
    finally:
        deadlines.discard(run)
        if run.expired:  # the handler ended otherwise after its timeout cancelled it
            run.expired = False
            current.uncancel()
    return None if run.lost else retry.SUCCESS


def _arguments(
    handler: Handler, payload: Any, ctx: TaskContext | None, run: Run
) -> tuple[Any, ...]:
    """What ``handler`` is called with: nothing, the payload, or the payload and ``ctx``;
    the payload converted to the handler's payload type first if it has one."""
    if handler.payload_type is not None:
        try:
            payload = msgspec.convert(payload, handler.payload_type, strict=False)
        except (msgspec.ValidationError, TypeError) as exc:
            name = handler.payload_type.__name__
            raise _Undecodable(f"payload does not convert to {name}: {exc}") from None
    if handler.takes_context:
        return (payload, ctx if ctx is not None else run.context())
    if handler.takes_payload:
        return (payload,)
    return ()


def _last_line(config: QueueConfig) -> str:
    return f"{retry.TIMEOUT_ERROR}: {retry.timeout_message(config)}\n"


def _cancelled_at(cancelled: asyncio.CancelledError, config: QueueConfig) -> str | None:
    """Where an awaited handler was when its timeout ran out: the frames the cancellation
    went through."""
    timeout = TimeoutError()
    timeout.__context__ = cancelled
    return retry.cancelled_at(timeout, _last_line(config))


async def _in_thread(
    run: Run,
    config: QueueConfig,
    threads: HandlerThreads,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    """Run ``fn(*args)`` in the pool; a call given up on (its timeout ran out, or the worker
    stopped waiting) is abandoned. When the timeout ran out, ``run.where`` says what the
    thread was running then."""
    call = threads.submit(tracing.carry_context(functools.partial(fn, *args)))
    run.call = call
    try:
        result = await call.future
        if inspect.isawaitable(result):  # a plain def that returned an awaitable
            await result
    except asyncio.CancelledError:
        if run.expired and not call.abandoned:  # its thread still runs it
            run.where = retry.thread_stack(call.thread, _last_line(config))
        raise
    finally:
        run.call = None
        if not call.future.done() or call.future.cancelled():
            threads.abandon(call)

"""Tracebacks for attempt records: formatted like Python's, chained causes kept, the engine's
own frames left out, and bounded by :data:`rdq.spi.bounds.MAX_TRACEBACK_LENGTH` — when one is
too long the outermost frames of each exception are cut first, so the innermost ones (where
it failed) stay.

Also where a handler *was* when its timeout ran out: the stack of the coroutine that was
cancelled, or of the thread still running a plain function.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from rdq.spi import bounds

__all__ = [
    "bound_head",
    "bound_tail",
    "cancelled_at",
    "coroutine_stack",
    "format_failure",
    "thread_stack",
]

_ENGINE_FILES = frozenset(
    str(Path(__file__).parent.parent / "worker" / name)
    for name in ("_runner.py", "_invoke.py", "_threads.py")
)
"""The engine's frames around a handler call: not part of the handler's story."""

_LIMITS = (None, -50, -20, -8, -3, -1)
"""Frames kept per exception, tried in turn until the text fits (None: all of them)."""

CUT_NOTE = "[outer frames left out to fit {limit} characters]\n"


def bound_head(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, keeping its start (messages)."""
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def bound_tail(text: str, limit: int = bounds.MAX_TRACEBACK_LENGTH) -> str:
    """``text`` cut to at most ``limit`` characters, keeping its end (tracebacks: the
    innermost frame and the exception are last)."""
    if len(text) <= limit:
        return text
    return "…" + text[len(text) - limit + 1 :]


def _skip_engine(tb: TracebackType | None) -> TracebackType | None:
    """The part of ``tb`` after its innermost engine frame (a handler never calls back into
    the engine, so what follows is the handler's own story)."""
    start = tb
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in _ENGINE_FILES:
            start = tb.tb_next
        tb = tb.tb_next
    return start


def format_failure(exc: BaseException) -> str:
    """The formatted traceback of ``exc`` with its causes and context, without the engine's
    frames, at most ``MAX_TRACEBACK_LENGTH`` characters."""
    budget = bounds.MAX_TRACEBACK_LENGTH
    tb = _skip_engine(exc.__traceback__)
    text = ""
    for limit in _LIMITS:
        try:
            formatted = traceback.TracebackException(
                type(exc), exc, tb, limit=limit, compact=True
            ).format()
            text = "".join(formatted)
        except Exception:  # a broken __str__ or __repr__ somewhere in the chain
            text = f"{type(exc).__name__} (its traceback could not be formatted)\n"
        if limit is not None:
            text = CUT_NOTE.format(limit=budget) + text
        if len(text) <= budget:
            return text
    return bound_tail(text, budget)


def _render(frames: traceback.StackSummary, last_line: str) -> str:
    budget = bounds.MAX_TRACEBACK_LENGTH
    for limit in _LIMITS:
        kept = frames if limit is None else traceback.StackSummary.from_list(frames[limit:])
        text = "Traceback (most recent call last):\n" + "".join(kept.format()) + last_line
        if limit is not None:
            text = CUT_NOTE.format(limit=budget) + text
        if len(text) <= budget:
            return text
    return bound_tail(text, budget)


def _after_engine(frames: list[tuple[FrameType, int]]) -> list[tuple[FrameType, int]]:
    """The frames after the innermost engine frame (the handler's own)."""
    last = -1
    for index, (frame, _) in enumerate(frames):
        if frame.f_code.co_filename in _ENGINE_FILES:
            last = index
    return frames[last + 1 :]


def coroutine_stack(coro: Any, last_line: str) -> str | None:
    """Where a suspended coroutine (chain) is waiting, formatted as a traceback ending with
    ``last_line``; ``None`` if it is not suspended."""
    frames: list[tuple[FrameType, int]] = []
    seen = 0
    while coro is not None and seen < 1000:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append((frame, frame.f_lineno))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        seen += 1
    frames = _after_engine(frames)
    if not frames:
        return None
    return _render(traceback.StackSummary.extract(iter(frames)), last_line)


def thread_stack(thread_id: int | None, last_line: str) -> str | None:
    """What the thread ``thread_id`` runs now (its handler's frames), formatted as a
    traceback ending with ``last_line``; ``None`` if the thread is gone."""
    if thread_id is None:
        return None
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return None
    frames = _after_engine(list(_walk_out(frame))[::-1])
    if not frames:
        return None
    return _render(traceback.StackSummary.extract(iter(frames)), last_line)


def _walk_out(frame: FrameType | None) -> Iterator[tuple[FrameType, int]]:
    while frame is not None:
        yield frame, frame.f_lineno
        frame = frame.f_back


def cancelled_at(exc: BaseException, last_line: str) -> str | None:
    """Where a handler was when its timeout cancelled it: the frames of the
    ``CancelledError`` that became ``exc`` (a ``TimeoutError``), ending with ``last_line``."""
    cancelled = exc.__cause__ or exc.__context__
    if cancelled is None:
        return None
    tb = _skip_engine(cancelled.__traceback__)
    if tb is None:
        return None
    frames = traceback.extract_tb(tb)
    # the innermost frames are asyncio's own (the awaited future): keep them, they say
    # what the handler was awaiting
    return _render(frames, last_line)

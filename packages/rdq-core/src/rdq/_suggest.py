""" "Did you mean …?": the closest of the names a typo was meant to be, one rule for every
surface (the client's unknown handler, the operator's unknown queue, handler or dependency,
an unknown key in a config table).

:func:`difflib.get_close_matches` at its default cut-off (0.6) finds what one or two letters
off, swapped or missing make of a name (``reprots`` → ``reports``, ``prot`` → ``port``)
without offering an unrelated name as a guess."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_match", "did_you_mean"]


def close_match(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name``, or ``None`` when none is close."""
    found = difflib.get_close_matches(name, sorted(set(known)), n=1)
    return found[0] if found else None


def did_you_mean(name: str, known: Iterable[str], *, quote: bool = True) -> str:
    """`` (did you mean 'port'?)`` for the closest known name, else ``""``."""
    match = close_match(name, known)
    if match is None:
        return ""
    return f" (did you mean {match!r}?)" if quote else f" (did you mean {match}?)"

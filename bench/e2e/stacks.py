"""Summarise py-spy collapsed stacks (``--profile`` output): ``python -m bench.e2e.stacks FILE``.

Prints the share of samples per function, inclusive (the function or anything it called is on
the stack) and self (the function is the innermost frame), and optionally the share of
samples whose stack contains each of some ``--match`` substrings.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

__all__ = ["load", "main"]

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")


def _frame_name(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "/src/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match['func']} ({path})"


def load(path: Path) -> list[tuple[list[str], int]]:
    """The stacks of ``path`` (outermost frame first) with their sample counts."""
    stacks = []
    for line in path.read_text().splitlines():
        match = _LINE.match(line)
        if match:
            frames = [_frame_name(f) for f in match["stack"].split(";") if f]
            stacks.append((frames, int(match["count"])))
    return stacks


def main() -> None:
    """Print the summary for each file given."""
    parser = argparse.ArgumentParser(prog="python -m bench.e2e.stacks")
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", action="append", default=[], help="substring of a frame")
    args = parser.parse_args()
    for path in args.files:
        stacks = load(path)
        total = sum(count for _, count in stacks) or 1
        inclusive: Counter[str] = Counter()
        own: Counter[str] = Counter()
        for frames, count in stacks:
            for name in set(frames):
                inclusive[name] += count
            if frames:
                own[frames[-1]] += count
        print(f"== {path} ({total} samples)")
        print("-- inclusive")
        for name, count in inclusive.most_common(args.top):
            print(f"{100 * count / total:5.1f}%  {name}")
        print("-- self")
        for name, count in own.most_common(args.top):
            print(f"{100 * count / total:5.1f}%  {name}")
        for pattern in args.match:
            hits = sum(c for frames, c in stacks if any(pattern in f for f in frames))
            print(f"match {pattern!r}: {100 * hits / total:.1f}%")


if __name__ == "__main__":
    main()

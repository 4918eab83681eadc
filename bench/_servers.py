"""The PostgreSQL a benchmark runs on: the URL given, or a durable throwaway cluster (the
test suite's, from ``rdq_compliance.servers``) for the length of the block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["postgres"]


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from rdq_compliance.servers.postgres import server_url

    with server_url() as found:
        yield found

"""The application the outage scenario's ``rdq worker`` processes run.

``call`` POSTs to the dependency (``OUTAGE_SERVICE``, down during the outage); ``call_b`` does
too, beside it on the same named dependency when ``OUTAGE_SHARED=1`` (``dependency="svc"`` on
both: one breaker); ``healthy`` calls one that stays up (``OUTAGE_HEALTHY``). Queue ``q`` as
the scenario gives it: ``max_attempts=5``, ``Backoff.exponential(base=1, cap=10)``,
concurrency 10, the breaker at its defaults (``OUTAGE_BREAKER=off`` turns it off, to measure
what it saves; ``OUTAGE_BACKOFF=exponential:0.05`` or ``fixed:0.2`` changes the backoff).
Every call is ``response.raise_for_status()`` on httpx: the most common way a handler calls a
service.
"""

from __future__ import annotations

import os

import httpx

import rdq

SERVICE = os.environ.get("OUTAGE_SERVICE", "http://127.0.0.1:18080/")
HEALTHY = os.environ.get("OUTAGE_HEALTHY", "http://127.0.0.1:18081/")
DEPENDENCY = "svc" if os.environ.get("OUTAGE_SHARED") == "1" else None

BACKOFF = os.environ.get("OUTAGE_BACKOFF", "exponential:1")
"""``exponential:BASE`` (capped at 10 s) or ``fixed:DELAY``."""
_kind, _, _seconds = BACKOFF.partition(":")

app = rdq.App()
app.queue(
    "q",
    max_attempts=5,
    backoff=(
        rdq.Backoff.fixed(float(_seconds))
        if _kind == "fixed"
        else rdq.Backoff.exponential(base=float(_seconds or 1), cap=10)
    ),
    concurrency=10,
    breaker=os.environ.get("OUTAGE_BREAKER", "on") != "off",
)

_client: httpx.AsyncClient | None = None


def _http() -> httpx.AsyncClient:
    global _client
    if _client is None:
        _client = httpx.AsyncClient(timeout=5.0)
    return _client


@app.handler("call", queue="q", dependency=DEPENDENCY)
async def call(payload: dict[str, int]) -> None:
    response = await _http().post(SERVICE, json=payload)
    response.raise_for_status()


@app.handler("call_b", queue="q", dependency=DEPENDENCY)
async def call_b(payload: dict[str, int]) -> None:
    response = await _http().post(SERVICE, json=payload)
    response.raise_for_status()


@app.handler("healthy", queue="q")
async def healthy(payload: dict[str, int]) -> None:
    response = await _http().post(HEALTHY, json=payload)
    response.raise_for_status()

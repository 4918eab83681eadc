"""Error messages and tracebacks are scrubbed before they are stored: the store, the logs,
the spans and (through them) the console, CLI and API only ever see the scrubbed text."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rdq
from rdq.config import parse_config
from rdq.errors import ConfigError
from rdq.scrub import Scrubber
from rdq.spi import Status
from rdq_compliance.testing import eventually
from rdq_memory import MemoryStorage

from .conftest import CARD

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJl"
EXPORTER = InMemorySpanExporter()
_EXPORTING: list[TracerProvider] = []


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        (f"card {CARD} declined", "card [card] declined"),
        ("card 4111-1111-1111-1111 declined", "card [card] declined"),
        ("card 4111111111111111", "card [card]"),
        (
            "order 4111111111111112 (not a card: fails Luhn)",
            "order 4111111111111112 (not a card: fails Luhn)",
        ),
        ("id 20240101123000123 at 1700000000000", "id 20240101123000123 at 1700000000000"),
        ("mail ada.lovelace+rdq@example.co.uk failed", "mail [email] failed"),
        (f"Authorization: Bearer {TOKEN}", "Authorization: [redacted]"),
        (f"sent bearer {TOKEN} upstream", "sent bearer [token] upstream"),
        (
            "GET https://bob:hunter2@api.example.com/v1 → 500",
            "GET https://bob:[password]@api.example.com/v1 → 500",
        ),
        (
            "postgresql://rdq:s3cret@db:5432/rdq refused",
            "postgresql://rdq:[password]@db:5432/rdq refused",
        ),
        ("login failed: password=hunter2&user=ada", "login failed: password=[redacted]&user=ada"),
        ('{"api_key": "sk_live_123", "n": 5}', '{"api_key": [redacted], "n": 5}'),
        (
            "{'client_secret': 'abc', 'cvv': 123}",
            "{'client_secret': [redacted], 'cvv': [redacted]}",
        ),
        ('File "/app/pay.py", line 42, in charge', 'File "/app/pay.py", line 42, in charge'),
    ],
)
def test_the_default_rules(text: str, scrubbed: str | None) -> None:
    """Each rule on what it takes out, and what it leaves alone (``None``: unchanged)."""
    scrubbed = text if scrubbed is None else scrubbed
    scrub = Scrubber()
    assert scrub(text) == scrubbed
    assert scrub(scrubbed) == scrubbed  # a second pass changes nothing


def test_a_queue_s_own_rules_and_turning_them_off() -> None:
    _, queues = parse_config(
        {
            "queues": {
                "pay": {"scrub": {"keys": ["iban"], "patterns": ["acct-[0-9]{8}"]}},
                "raw": {"scrub": False},
                "plain": {"scrub": {"defaults": False, "keys": ["pin"]}},
            }
        }
    )
    pay, raw, plain = (queues[q].scrub for q in ("pay", "raw", "plain"))
    assert pay("iban=DE89370400440532013000 acct-12345678 for a@b.io") == (
        "iban=[redacted] [redacted] for [email]"
    )
    assert raw(f"card {CARD}") == f"card {CARD}"
    assert plain(f"pin=1234 card {CARD}") == f"pin=[redacted] card {CARD}"
    for bad, key in (
        ({"scrub": {"patterns": ["("]}}, "queues.q.scrub.patterns[0]"),
        ({"scrub": {"keyz": []}}, "queues.q.scrub.keyz"),
        ({"scrub": "yes"}, "queues.q.scrub"),
        ({"encrypt": "yes"}, "queues.q.encrypt"),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_config({"queues": {"q": bad}})
        assert caught.value.key == key


@pytest.fixture
def spans() -> InMemorySpanExporter:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if provider not in _EXPORTING:
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _EXPORTING.append(provider)
    EXPORTER.clear()
    return EXPORTER


class Lines:
    """A logger that keeps every line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def _log(self, event: str, **fields: Any) -> None:
        with self._lock:
            self.lines.append(f"{event} {fields!r}")

    debug = info = warning = error = exception = _log


@pytest.mark.asyncio
async def test_a_traceback_with_a_card_and_a_bearer_token_is_stored_scrubbed(
    spans: InMemorySpanExporter,
) -> None:
    app = rdq.App()
    app.queue("pay", max_attempts=2)

    @app.handler("charge", queue="pay")
    def charge(payload: dict[str, Any]) -> None:
        secret_local = f"{payload['card']}|{TOKEN}"  # locals are never captured
        headers = {"Authorization": f"Bearer {TOKEN}"}
        message = f"PSP refused card {payload['card']} for {payload['email']} with {headers}"
        raise RuntimeError(message if secret_local else "")

    logs = Lines()
    async with MemoryStorage() as store:
        client = rdq.Client(store, app, keys=None)
        task = await client.submit("charge", {"card": CARD, "email": "ada@example.com"})
        worker = rdq.Worker(app, store, keys=None, poll_max=0.05, logger=logs, maintenance=False)
        running = asyncio.create_task(worker.run())
        try:
            await store.retry_now("pay", [task.id])

            async def dead() -> bool:
                await store.retry_now("pay", [task.id])
                return (await store.get(task.id)).status == Status.DEAD

            await eventually(dead, "dead-lettered", 30)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)
        stored = await store.get(task.id)
    assert len(stored.attempts) == 2
    for attempt in stored.attempts:
        message, traceback = attempt.error_message or "", attempt.traceback or ""
        assert "[card]" in message and "[email]" in message and "[redacted]" in message
        assert "Traceback (most recent call last)" in traceback and "[card]" in traceback
        for text in (message, traceback):
            assert CARD not in text and TOKEN not in text and "ada@example.com" not in text
        assert "raise RuntimeError(message" in traceback  # source lines, never the locals
    logged = "\n".join(logs.lines)
    assert "dead-lettered" in logged and "[card]" in logged
    assert CARD not in logged and TOKEN not in logged and "ada@example.com" not in logged
    finished = [s for s in spans.get_finished_spans() if s.attributes.get("rdq.error_type")]
    assert finished, "the failed attempts are spans"
    for span in finished:
        texts = [str(span.status.description), str(dict(span.attributes or {}))]
        texts += [str(e.attributes) for e in span.events]
        assert "[card]" in texts[0] or "[card]" in texts[1]
        for text in texts:
            assert CARD not in text and TOKEN not in text

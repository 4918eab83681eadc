"""Scrubbing secrets out of error messages and tracebacks before they are stored.

An attempt's ``error_message`` and ``traceback`` are kept in the store and shown by the
console, the CLI, the API, the logs and OpenTelemetry — and exception messages quote what the
handler held: ``CardDeclined: card 4111 1111 1111 1111 for ada@example.com``. The worker runs
both through its queue's :class:`Scrubber` before anything leaves the handler's process, so
every one of those places sees the same scrubbed text; the clear text is never written.

Rules, each replacing what it matches with a ``[…]`` label (the labels never match a rule, so
scrubbing twice changes nothing):

==================  =========================================================  ================
rule                matches                                                    becomes
==================  =========================================================  ================
card numbers        13-19 digits, spaces or dashes between, passing Luhn's     ``[card]``
                    check (so ids and timestamps are left alone)
e-mail addresses    ``name@host.tld``                                          ``[email]``
bearer tokens       ``Bearer <token>`` (any case)                              ``Bearer [token]``
URL passwords       ``scheme://user:password@host``                            ``…user:[password]@``
key names           ``password=…``, ``"api_key": "…"``, ``token: …`` and the   ``key=[redacted]``
                    other names in :data:`DEFAULT_KEYS` plus a queue's own
patterns            a queue's own regular expressions                          ``[redacted]``
==================  =========================================================  ================

Tracebacks never capture local variables (:func:`rdq.retry.format_failure` formats frames and
source lines only), so what a handler held in a variable is never stored unless its message
quotes it — which this scrubber covers.

A queue configures its scrubber in code (``QueueConfig(scrub=Scrubber(keys=("iban",)))``) or
TOML (``[queues.payments.scrub]`` with ``defaults``, ``patterns``, ``keys``; ``scrub = false``
turns it off).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable

from rdq.errors import ConfigError

__all__ = ["DEFAULT_KEYS", "Scrubber"]

DEFAULT_KEYS = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "client_secret",
    "token",
    "access_token",
    "refresh_token",
    "api_key",
    "apikey",
    "authorization",
    "cookie",
    "card_number",
    "cardnumber",
    "cvv",
    "cvc",
    "pan",
    "ssn",
)
"""Key names whose values are scrubbed by default (case does not matter)."""

_CARD = re.compile(r"(?<![\w.])\d(?:[ -]?\d){12,18}(?![\w.])")
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_BEARER = re.compile(r"\b(bearer)\s+(?!\[token\])[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]*):(?!\[password\]@)[^\s/@]+@")


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", match.group(0))
    return "[card]" if _luhn(digits) else match.group(0)


@dataclasses.dataclass(frozen=True, slots=True)
class Scrubber:
    """How a queue's error messages and tracebacks are scrubbed (see the module docstring).

    ``defaults``: the built-in rules (cards, e-mails, bearer tokens, URL passwords and the
    :data:`DEFAULT_KEYS`); ``keys``: more key names whose values are scrubbed; ``patterns``:
    regular expressions whose matches become ``[redacted]``; ``enabled=False`` stores text
    as the handler raised it."""

    defaults: bool = True
    keys: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    enabled: bool = True

    @classmethod
    def off(cls) -> Scrubber:
        return cls(enabled=False)

    def validate(self, key: str = "scrub") -> Scrubber:
        """Self if every rule is valid; ``ConfigError`` naming the key otherwise."""
        for index, name in enumerate(self.keys):
            if not isinstance(name, str) or not re.fullmatch(r"[\w.-]{1,64}", name):
                raise ConfigError(
                    "a key name is 1-64 letters, digits, '_', '.' or '-'", f"{key}.keys[{index}]"
                )
        for index, pattern in enumerate(self.patterns):
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise ConfigError(f"is not a regular expression: {exc}", f"{key}.patterns[{index}]")
        return self

    def __call__(self, text: str | None) -> str | None:
        """``text`` with every rule applied (``None`` stays ``None``)."""
        if text is None or not self.enabled:
            return text
        for rule in _rules(self):
            text = rule(text)
        return text


@functools.lru_cache(maxsize=256)
def _rules(scrubber: Scrubber) -> tuple[Callable[[str], str], ...]:
    """The compiled rules of ``scrubber``, in the order they apply."""
    names = [*(DEFAULT_KEYS if scrubber.defaults else ()), *scrubber.keys]
    rules: list[Callable[[str], str]] = []
    if scrubber.defaults:
        rules += [
            functools.partial(_URL_PASSWORD.sub, r"\1:[password]@"),
            functools.partial(_BEARER.sub, r"\1 [token]"),
            functools.partial(_EMAIL.sub, "[email]"),
            functools.partial(_CARD.sub, _card),
        ]
    if names:
        alternatives = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
        keyed = re.compile(
            rf"""(?i)(?<![\w-])(["']?(?:{alternatives})["']?\s*[:=]\s*)"""
            r"""(?!\[redacted\])(?:"[^"]*"|'[^']*'"""
            r"""|(?:bearer|basic)\s+(?:\[token\]|[^\s"',;&)}\]]+)|[^\s,;&)}\]]+)"""
        )
        rules.append(functools.partial(keyed.sub, r"\1[redacted]"))
    for pattern in scrubber.patterns:
        rules.append(functools.partial(re.compile(pattern).sub, "[redacted]"))
    return tuple(rules)

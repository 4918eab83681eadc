"""``rdq keys``: payload keys — make one, show the keyring, rotate stored payloads to the
active key (see :mod:`rdq.keys` and :func:`rdq.admin.rotate_keys`)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import click

from rdq.admin import Rotation, RotationProgress, rotate_keys
from rdq.audit import JsonLinesAuditSink
from rdq.cli._common import echo_json, json_option, run_async, say, storage_option
from rdq.cli._default import chosen_storage
from rdq.cli._options import _default_actor, actor_options
from rdq.errors import ConfigError
from rdq.keys import KEY_ENV, KEY_FILE_ENV, KEY_PROVIDER_ENV, Keyring, generate_key
from rdq.plugins import open_storage

__all__ = ["keys"]


@click.group()
def keys() -> None:
    """Payload keys: generate one, show the keyring, rotate stored payloads to the active key.

    Keys come from the environment, as for every rdq process: RDQ_PAYLOAD_KEYS
    ("v2:BASE64 v1:BASE64", the first active), RDQ_PAYLOAD_KEYS_FILE (a TOML file) or
    RDQ_PAYLOAD_KEYS_PROVIDER (module:function returning an rdq.keys.Keyring)."""


@keys.command()
@click.option("--version", "version", default="v1", show_default=True, help="Its version name.")
def generate(version: str) -> None:
    """Print a new random AES-256 key as VERSION:BASE64 (for RDQ_PAYLOAD_KEYS)."""
    pair = f"{version}:{generate_key()}"
    try:
        Keyring.parse(pair)  # checks the version name
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint="--version") from None
    click.echo(pair)


@keys.command()
@json_option
def status(as_json: bool) -> None:
    """Show the keyring this environment configures: its versions, the active one, and each
    key's fingerprint (a digest that tells keyrings apart; never the key)."""
    keyring = _keyring()
    rows = [
        {"version": v, "active": v == keyring.active, "fingerprint": keyring.fingerprint(v)}
        for v in keyring.versions
    ]
    if as_json:
        echo_json({"active": keyring.active, "keys": rows})
        return
    for row in rows:
        mark = "active" if row["active"] else "      "
        click.echo(f"{row['version']:<12} {mark}  {row['fingerprint']}")


@keys.command()
@storage_option
@click.option("--queue", "queues", multiple=True, help="Only this queue (repeatable).")
@click.option(
    "--journal",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where the swap of each batch is journaled (default .rdq-rotate-<store>.jsonl); "
    "a rotation run again with the same journal resumes a killed one.",
)
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 1000))
@click.option("--reason", help="Why, for the audit record.")
@actor_options
@json_option
@run_async
async def rotate(
    storage_url: str | None,
    queues: tuple[str, ...],
    journal: Path | None,
    batch: int,
    reason: str | None,
    actor: str | None,
    audit_log: str | None,
    as_json: bool,
) -> None:
    """Re-seal every stored payload under the active key, in place, while workers run.

    Resumable: a rotation stopped by any means (kill -9 included) is finished by running
    the same command again. Tasks running or due within a minute are left for a later run
    (counted as "in motion"); succeeded tasks keep their key until their task_ttl."""
    keyring = _keyring()
    url = chosen_storage(storage_url, existing=True)
    digest = hashlib.blake2b(url.encode(), digest_size=6).hexdigest()
    path = journal or Path(f".rdq-rotate-{digest}.jsonl")
    if path.exists():
        say(f"resuming the rotation journaled in {path}")
    shown = _Shown(as_json)
    sinks = [JsonLinesAuditSink(audit_log)] if audit_log else []
    async with open_storage(url) as storage:
        report = await rotate_keys(
            storage,
            keyring,
            journal=path,
            queues=list(queues) or None,
            actor=actor or _default_actor(),
            reason=reason,
            sinks=sinks,
            batch=batch,
            progress=shown,
        )
    _report(report, as_json)


class _Shown:
    """Progress on standard error: a line every two seconds and one per queue."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.last = time.monotonic()
        self.queue = ""

    def __call__(self, state: RotationProgress) -> None:
        now = time.monotonic()
        if self.quiet or (now - self.last < 2.0 and state.queue == self.queue):
            return
        self.last, self.queue = now, state.queue
        say(
            f"  {state.queue} {state.status}: {state.seen:,} tasks read, "
            f"{state.resealed:,} re-sealed"
        )


def _report(report: Rotation, as_json: bool) -> None:
    if as_json:
        echo_json(
            {
                "active": report.active,
                "resealed": report.resealed,
                "already_current": report.current,
                "clear": report.clear,
                "unreadable": report.unreadable,
                "missing_keys": report.missing_keys,
                "in_motion": report.in_motion,
                "succeeded_old": report.succeeded_old,
                "recovered": report.recovered,
                "queues": report.queues,
                "seconds": report.seconds,
                "complete": report.complete,
            }
        )
        return
    click.echo(
        f"{report.resealed:,} task(s) re-sealed with key {report.active!r} in "
        f"{report.seconds:.1f}s; {report.current:,} already sealed with it"
        + (f"; {report.recovered:,} finished from the journal" if report.recovered else "")
    )
    if report.clear:
        click.echo(f"{report.clear:,} payload(s) stored in clear were left so")
    if report.in_motion:
        click.echo(f"{report.in_motion:,} task(s) running or due soon: run the rotation again")
    if report.succeeded_old:
        click.echo(f"{report.succeeded_old:,} succeeded task(s) keep their key until task_ttl")
    if report.unreadable:
        missing = ", ".join(f"{v} ({n:,})" for v, n in sorted(report.missing_keys.items()))
        click.echo(f"{report.unreadable:,} task(s) sealed with keys this keyring lacks: {missing}")


def _keyring() -> Keyring:
    try:
        keyring = Keyring.from_env()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if keyring is None:
        raise click.ClickException(
            f"no payload keys configured: set {KEY_ENV}, {KEY_FILE_ENV} or {KEY_PROVIDER_ENV}"
        )
    return keyring

"""``rdq backends``: what storage plugins are installed, and which failed to load."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from rdq.cli._common import echo_json, json_option
from rdq.plugins import installed_backends


@click.command()
@json_option
def backends(as_json: bool) -> None:
    """List installed storage backends, their URL schemes and versions, and broken plugins."""
    found, broken = installed_backends()
    if as_json:
        echo_json({"backends": found, "broken": broken})
    else:
        console = Console()
        table = Table(title="storage backends")
        for column in ("scheme", "plugin", "distribution", "version"):
            table.add_column(column)
        for b in found:
            table.add_row(f"{b.scheme}://", b.plugin, b.distribution or "-", b.version or "-")
        console.print(table)
        for p in broken:
            console.print(f"[red]broken[/red] {p.name} from {p.distribution or '?'}: {p.error}")
    if broken:
        raise SystemExit(1)

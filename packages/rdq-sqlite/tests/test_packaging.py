"""The built wheel (not only the editable install) carries the SQL files and the plugin, and
works: a store opened from the installed wheel creates its schema and runs a task."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
SQL = PACKAGE / "src" / "rdq_sqlite" / "sql"

SMOKE = """
import asyncio, sys
from datetime import timedelta
import rdq_sqlite
from rdq import open_storage
from rdq.spi import Envelope

assert rdq_sqlite.__file__.startswith(sys.argv[2]), rdq_sqlite.__file__

async def main():
    async with open_storage(sys.argv[1]) as store:
        await store.migrate()
        await store.enqueue(Envelope(id="a", queue="q", handler_ref="m:f"))
        (claim,) = await store.claim_due("q", 1, timedelta(seconds=5))
        print(type(store).__name__, claim.task.id)

asyncio.run(main())
"""


@pytest.mark.slow
def test_the_wheel_ships_every_statement_and_works_when_installed(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is needed to build the wheel")
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path), str(PACKAGE)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("rdq_sqlite-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    statements = sorted(SQL.rglob("*.sql"))
    assert statements, f"no .sql file under {SQL}: the check below would prove nothing"
    for path in statements:
        assert f"rdq_sqlite/{path.relative_to(SQL.parent).as_posix()}" in names
    assert "rdq_sqlite/py.typed" in names
    assert "sqlite = rdq_sqlite._plugin" in entry_points

    site = tmp_path / "site"
    subprocess.run(
        [uv, "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    url = f"sqlite:///{tmp_path / 'smoke.db'}"
    ran = subprocess.run(
        [sys.executable, "-c", SMOKE, url, str(site)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["SqliteStorage", "a"]

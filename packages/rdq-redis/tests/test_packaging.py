"""The built wheel (not only the editable install) carries the Lua scripts and the plugin."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from rdq_redis._queries import SCRIPT_NAMES

PACKAGE = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_ships_every_lua_script_and_the_entry_points(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is needed to build the wheel")
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path), str(PACKAGE)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("rdq_redis-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    for name in ("_lib", "_flow", "_order", *SCRIPT_NAMES):
        assert f"rdq_redis/lua/{name}.lua" in names
    assert "rdq_redis/py.typed" in names
    assert "redis = rdq_redis._plugin" in entry_points
    assert "rediss = rdq_redis._plugin" in entry_points

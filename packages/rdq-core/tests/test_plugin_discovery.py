"""Storage plugin discovery through the rdq.storage entry points."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import rdq
from rdq.cli import main
from rdq.errors import ConfigError
from rdq.plugins import reload_plugins


@pytest.fixture
def extra_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site directory with one working and one broken third-party plugin distribution."""
    (tmp_path / "rdq_fake_store.py").write_text(
        textwrap.dedent(
            """
            from rdq.plugins import hookimpl
            from rdq_memory import MemoryStorage

            def open_fake(url, **options):
                return MemoryStorage()

            @hookimpl
            def rdq_register_storage(registry):
                registry.add("fake", open_fake)
            """
        )
    )
    (tmp_path / "rdq_broken_store.py").write_text("raise ImportError('libbroken.so missing')\n")
    for dist, module, scheme in [
        ("rdq_fake", "rdq_fake_store", "fake"),
        ("rdq_broken", "rdq_broken_store", "broken"),
    ]:
        info = tmp_path / f"{dist}-1.2.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
        (info / "entry_points.txt").write_text(f"[rdq.storage]\n{scheme} = {module}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reload_plugins()
    yield tmp_path
    monkeypatch.undo()
    reload_plugins()


def test_the_memory_backend_is_installed_and_opens() -> None:
    backends, _ = rdq.installed_backends()
    assert "memory" in {b.scheme for b in backends}
    assert type(rdq.open_storage("memory://")).__name__ == "MemoryStorage"


def test_an_unknown_scheme_lists_the_installed_schemes() -> None:
    with pytest.raises(ConfigError) as caught:
        rdq.open_storage("nosuch://host/db")
    assert "nosuch" in str(caught.value)
    assert "memory" in str(caught.value)


@pytest.mark.parametrize("url", ["", "memory", "/tmp/db", 42])
def test_a_value_that_is_not_a_url_is_a_config_error(url: object) -> None:
    with pytest.raises(ConfigError, match="storage"):
        rdq.open_storage(url)  # type: ignore[arg-type]


def test_a_broken_plugin_is_reported_by_name_and_the_others_still_work(
    extra_plugins: Path,
) -> None:
    backends, broken = rdq.installed_backends()
    fake = next(b for b in backends if b.scheme == "fake")
    assert (fake.distribution, fake.version) == ("rdq_fake", "1.2.3")
    failure = next(b for b in broken if b.distribution == "rdq_broken")
    assert "libbroken.so missing" in failure.error
    assert "broken" in failure.name
    assert type(rdq.open_storage("fake://x")).__name__ == "MemoryStorage"
    with pytest.raises(ConfigError, match=r"libbroken\.so missing"):
        rdq.open_storage("broken://x")


def test_rdq_backends_lists_schemes_versions_and_broken_plugins(extra_plugins: Path) -> None:
    result = CliRunner().invoke(main, ["backends", "--json"])
    assert result.exit_code == 1, "a broken plugin makes the command fail"
    assert '"scheme": "fake"' in result.output
    assert '"version": "1.2.3"' in result.output
    assert "libbroken.so missing" in result.output


def test_plugins_are_not_loaded_at_import_time() -> None:
    code = (
        "import sys, rdq, rdq.spi; "
        "loaded = [m for m in ('rdq_memory', 'asyncpg', 'redis', 'pymongo') if m in sys.modules]; "
        "print(loaded)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

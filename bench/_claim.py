"""The claim function's source, for benchmarks that run copies of it beside the shipped one."""

from __future__ import annotations

from pathlib import Path

MIGRATIONS = Path(__file__).parents[1] / "packages/rdq-postgres/src/rdq_postgres/sql/migrations"
_DEFINES = "FUNCTION {schema}.claim_due("


def claim_due_source() -> tuple[str, str]:
    """(migration file name, its CREATE [OR REPLACE] FUNCTION of ``claim_due()``, to the end of
    the file), from the newest migration that defines the function, ``{schema}`` left in."""
    for path in sorted(MIGRATIONS.glob("*.sql"), reverse=True):
        text = path.read_text()
        at = text.find(_DEFINES)
        if at >= 0:
            return path.name, text[text.rindex("CREATE", 0, at) :]
    raise RuntimeError(f"no migration in {MIGRATIONS} defines claim_due()")

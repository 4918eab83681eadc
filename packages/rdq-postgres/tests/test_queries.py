"""The statement loader: named parameters compiled to ``$n``, fragments and slots filled in,
comments dropped (the Java binding's ``Sql.java`` does the same with the same files)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from rdq_postgres._queries import Queries, compile_statement

_TEMPLATES = {
    "list_tasks": {"status": "DEAD", "at": "dead_lettered_at", "keyset": "{task_keyset}"},
    "list_audit": {"keyset": "{audit_keyset}"},
}


def test_names_become_numbers_in_order_and_casts_quotes_and_comments_stay_apart() -> None:
    statement = compile_statement(
        "t", "SELECT :a::text, ':b', \"x:y\", x::int -- :c\nFROM t WHERE y = :a AND z = :c_2"
    )
    assert statement.text == (
        "SELECT $1::text, ':b', \"x:y\", x::int \nFROM t WHERE y = $1 AND z = $2"
    )
    assert statement.params == ("a", "c_2")
    assert statement.args({"c_2": 2, "a": 1}) == (1, 2)


def test_binding_refuses_a_missing_or_unknown_name() -> None:
    statement = compile_statement("t", "SELECT :a")
    with pytest.raises(TypeError, match="needs :a"):
        statement.args({})
    with pytest.raises(TypeError, match="no parameter :b"):
        statement.args({"a": 1, "b": 2})


def test_every_statement_compiles_with_its_fragments_and_no_slot_left() -> None:
    sql = Queries("kit_1", "kit_1_due")
    folder = resources.files("rdq_postgres").joinpath("sql")
    names = sorted(e.name[:-4] for e in folder.iterdir() if e.name.endswith(".sql"))
    assert "claim" in names and "migrate_prepare" in names
    for name in names:
        if name == "migrate_prepare":
            text = sql.script(name)
        else:
            statement = sql.load(name, **_TEMPLATES.get(name, {}))
            text = statement.text
            assert ":" not in re.sub(r"'[^']*'|::", "", text), name  # every name compiled
            numbers = {int(n) for n in re.findall(r"\$(\d+)", text)}
            assert numbers == set(range(1, len(statement.params) + 1)), name
        assert not re.search(r"\{[a-z_]+\}", text), name
        assert "--" not in text, name


def test_a_fragment_is_indented_as_its_slot_and_slots_may_name_fragments() -> None:
    sql = Queries("rdq", "rdq_due")
    complete = sql.complete.text
    assert "\n        attempt_count = t.attempt_count + 1,\n" in complete
    page = sql.load("list_tasks", status="PENDING", at="due_at", keyset="{task_keyset}")
    assert "AND (due_at, id) > ($" in page.text
    assert {"cursor_at", "cursor_id"} <= set(page.params)
    first = sql.load("list_tasks", status="PENDING", at="due_at", keyset="")
    assert "cursor_at" not in first.params
    with pytest.raises(LookupError, match="no text for"):
        sql.load("list_tasks", status="PENDING")

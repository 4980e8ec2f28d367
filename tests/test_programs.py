"""The loading of step programs (awsflock/stores/programs.py): what the Python fills in is only
what it names, written safely (tests/test_step_programs.py runs the programs themselves)."""

from __future__ import annotations

import pytest

from awsflock.stores import programs
from awsflock.stores.postgresql import schema
from awsflock.stores.redis import layout


def test_a_table_name_goes_into_the_sql_as_one_quoted_identifier():
    function = schema.step_function("locks.v2-x")
    assert 'CREATE OR REPLACE FUNCTION "locks.v2-x_step"(p_op text' in function
    assert 'FROM "locks.v2-x_done" d' in function
    assert "{{" not in function


def test_an_identifier_doubles_its_quotes_and_refuses_what_could_end_a_literal():
    assert programs.Identifier('a"b').quoted() == '"a""b"'
    for bad in ("a'b", "a\0b"):
        with pytest.raises(ValueError):
            programs.Identifier(bad).quoted()


def test_every_placeholder_needs_its_value_and_every_value_its_placeholder():
    with pytest.raises(ValueError, match=r"no value for \['D', 'DI'\]"):
        programs.load("awsflock.stores.postgresql", "done.sql")
    with pytest.raises(ValueError, match=r"no placeholder for \['X'\]"):
        programs.load("awsflock.stores.redis", "audit.lua", X=1)


def test_a_value_is_an_int_or_an_identifier_and_nothing_else():
    values = dict.fromkeys(("LAPSE", "RETAIN", "HISTORY", "KEEP", "MAX_SHARES", "STATE"), 1)
    with pytest.raises(TypeError):
        programs.load("awsflock.stores.redis", "steps.lua", **values, DONE="1; os.exit()")
    with pytest.raises(TypeError):
        programs.load("awsflock.stores.redis", "steps.lua", **values, DONE=True)


def test_the_redis_script_has_its_constants_as_numbers():
    script = layout.script()
    assert "local DONE = " + str(int(layout.DONE_MS)) in script
    assert programs.placeholders(script) == set()
    assert layout.sha(script) == layout.sha(layout.script())

"""``table-create`` on PostgreSQL: the table and its step function, idempotently."""

from __future__ import annotations

from typing import Any, Callable

from awsflock import errors
from awsflock.stores.postgresql import schema
from awsflock.stores.postgresql.translate import no_fsync, not_logged


def create_table(
    name: str,
    where: str,
    run: Callable[[str, Callable[[Any], tuple[bool, bool]]], tuple[bool, bool]],
    progress: Callable[[str], None],
) -> bool:
    """Create table ``name`` and its step function in ``where`` (through ``run``, the store's
    ``run_admin``), or accept them as they are; True if the table was created now. One
    creator at a time (an advisory lock on the name), in one transaction: a failure leaves
    nothing half made. A table of that name that is not an awsflock table of this layout is
    refused."""

    def work(conn: Any) -> tuple[bool, bool]:
        if conn.execute("SELECT current_setting('fsync')").fetchone()[0] == "off":
            raise no_fsync(where)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("awsflock:" + name,))
            exists = _existing(conn, name, where)
            _complete(conn, name, exists)
            return not exists, _replace_function(conn, name)

    created, replaced = run("create_table", work)
    if created:
        progress(f"created table {name!r} and its step function in {where}")
    elif replaced:
        progress(f"updated the step function of table {name!r} in {where}")
    else:
        progress(f"found awsflock table {name!r} and its step function in {where}")
    return created


def _existing(conn: Any, name: str, where: str) -> bool:
    """Whether table ``name`` exists; refused if it does and is not an awsflock table of this
    layout, or is not logged (a crash would empty it)."""
    table = schema.quote(name)
    comment = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL, obj_description(to_regclass(%s), 'pg_class')",
        (table, table),
    ).fetchone()
    exists, layout = bool(comment[0]), comment[1]
    if exists and layout == schema.LAYOUT:
        persistence = conn.execute(
            "SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", (table,)
        ).fetchone()[0]
        if persistence != "p":
            raise not_logged(name, where)
    if exists and layout != schema.LAYOUT:
        columns = conn.execute(
            "SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute"
            " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
            (table,),
        ).fetchone()[0]
        raise errors.TableIncompatible(
            f"table {name!r} in {where} is not an awsflock table (columns: {columns})",
            hint="name another table with ?table= in --store (or --tablename), or drop that one",
        )
    return exists


def _complete(conn: Any, name: str, exists: bool) -> None:
    """Create the table if it does not exist, and whatever of this layout it lacks: its done
    table, the columns added since it was made."""
    table = schema.quote(name)
    if not exists:
        conn.execute(schema.table_statement(name))
        conn.execute(f"COMMENT ON TABLE {table} IS '{schema.LAYOUT}'")
    for statement in schema.done_statements(name):
        conn.execute(statement)
    for column, kind in schema.ADDED_COLUMNS:
        # A table of this layout made before the column existed gets it (its owner runs
        # table-create); the step function needs it.
        if not conn.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s)"
            " AND attname = %s AND NOT attisdropped",
            (table, column),
        ).fetchone():
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def _replace_function(conn: Any, name: str) -> bool:
    """(Re)create the table's step function unless it is this version's already; whether it
    was."""
    function = schema.step_function(name)
    current = conn.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(%s)",
        (schema.quote(schema.function_name(name)) + "(text, text, jsonb)",),
    ).fetchone()
    body = function.split("$body$")[1]
    replaced = current is None or current[0] != body
    if replaced:
        conn.execute(function)
    return replaced

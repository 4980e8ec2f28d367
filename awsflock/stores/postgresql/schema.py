"""The PostgreSQL store's layout: one table and one function, and the GRANTs they need.

The table (``table.sql`` beside this module) holds a row per lock (``slot`` -1: a plain lock's
lease, a pool's size, the lock's line of fair waiters, its state), a row per used pool slot
(``slot`` 0 and up), and a row per audit record (``slot`` -1, ``audit`` set, its key under
``RESERVED_PREFIX``, which no lock name may start with). Rows are never deleted: a lock's row
keeps its fencing token and its state (``awsflock.state``: columns ``state``, ``state_lease``,
``state_ms``) across every grant. The function ``<table>_step`` (``steps.sql``, which
documents every step) is every lock step: it locks the lock's row, checks the step's condition
and writes, in one statement, one round trip, one transaction, and answers with the applied
flag, the server's time and the lock's rows (without the state, which the step ``state``
reads).

The programs are files of their own, read from the installed package (``stores.programs``):
the table's and the function's names go into them as quoted identifiers, the constants as
integers, nothing else.

Time is the server's (``clock_timestamp()``, epoch milliseconds), so no client clock is
trusted and the skew window is 0. A call may pass ``now`` (and ``skew``) instead: the caller's
clock, for the conformance suite and the simulator, which run in virtual time.
"""

from __future__ import annotations

import re

from awsflock.protocol import BAR_KEEP_MS, DONE_MS, LINE_LAPSE_MS
from awsflock.shares import MAX_SHARES
from awsflock.state import MAX_STATE
from awsflock.stores import programs

#: The layout's version, kept in the table's comment; table-create refuses any other.
LAYOUT = "awsflock lock table, layout 1"
#: A table name that quoted stays one identifier, with room for the function's suffix.
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,48}$")

#: An end step that finds nothing ever granted under its lease id bars the id (column
#: ``barred`` of the lock's row: id -> when), so a take of it that lands late is refused; each
#: is kept ``BAR_RETAIN_MS``, however many there are. Answers leave the column out.
BAR_RETAIN_MS = BAR_KEEP_MS
#: Every lease a take took over is kept in the table ``NAME_done`` (``done.sql``: lock,
#: LEASE_ID, how it ended, when) for ``DONE_MS``, however many hand-offs follow: a release or
#: force-release retried after its first try went through unanswered still finds what it did,
#: and a take that lands late under a LEASE_ID already used is refused. The row's own history
#: keeps three.

#: Columns added to the layout (``table.sql``) after tables were made with it: table-create
#: adds them.
ADDED_COLUMNS = (
    ("renewed_ms", "bigint"),
    # Shared holders (awsflock.shares): the head row's group, its shares, a writer's claim.
    ("shared", "boolean NOT NULL DEFAULT false"),
    ("shares", "jsonb NOT NULL DEFAULT '{}'"),
    ("claim_ms", "bigint"),
    # The lease a grant replaced (answers.py's ``prev``; NULL: granted before it was kept).
    ("prev", "jsonb"),
    # A group's first share found ended without its holder's release (answers.py's ``lapse``,
    # in ``prev``'s form; NULL: none).
    ("lapse", "jsonb"),
    # The holder's lock-delay (ms; 0: none): a lease that ends without its holder's release is
    # not taken over before its end plus this (steps.sql).
    ("delay_ms", "bigint NOT NULL DEFAULT 0"),
    # The hold's cap (ms by the server's clock; NULL: no max-hold): no take or renewal sets
    # ``expires_ms`` past it (steps.sql).
    ("cap_ms", "bigint"),
    # The lock's state (awsflock.state) on its row, which is never deleted: the bytes, the
    # lease that wrote them and its stamp (NULL: never written). Only a renew step writes
    # them; answers leave them out (the step ``state`` reads them).
    ("state", "bytea"),
    ("state_lease", "text"),
    ("state_ms", "bigint"),
)

#: The columns a lock's rows are read without (as jsonb less this array): audit records, barred
#: ids and the state, which the step ``state`` reads apart (steps.sql leaves out the same).
HIDDEN = "'{audit,barred,state,state_lease,state_ms}'::text[]"


def check_name(name: str) -> str:
    """``name`` if it can name a lock table (quoted, with its function's suffix, one
    identifier); else a UsageError."""
    if not NAME.match(name):
        from awsflock import errors

        raise errors.UsageError(
            f"{name!r} cannot name a PostgreSQL lock table",
            hint="use 1 to 48 letters, digits, '_', '-' or '.'",
        )
    return name


def function_name(table: str) -> str:
    """The step function's name: the table's, with ``_step``."""
    return table + "_step"


def grants(table: str, role: str, *, read_only: bool = False) -> str:
    """The GRANT statements a role needs to use the table: every command, or (``read_only``)
    only ``status``, ``list`` and ``audit``. ``table-create`` needs CREATE on the schema and
    is best run by the table's owner."""
    t, f, d = quote(table), quote(function_name(table)), quote(done_name(table))
    who = quote(role)
    rights = "SELECT" if read_only else "SELECT, INSERT, UPDATE"
    lines = [
        f"-- awsflock: what role {role} needs on table {table}"
        + (" (status, list, audit only)" if read_only else ""),
        f"GRANT {rights} ON TABLE {t} TO {who};",
        *([] if read_only else [f"GRANT SELECT, INSERT, DELETE ON TABLE {d} TO {who};"]),
        f"GRANT EXECUTE ON FUNCTION {f}(text, text, jsonb) TO {who};",
        "-- and, for whoever runs table-create: CREATE on the schema, e.g.",
        f"-- GRANT CREATE ON SCHEMA public TO {who};",
    ]
    return "\n".join(lines)


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def done_name(table: str) -> str:
    """The table of the leases handed on: the table's name, with ``_done``."""
    return table + "_done"


def step_function(table: str) -> str:
    """The statement that makes (or replaces) table ``table``'s step function: ``steps.sql``
    beside this module, which documents every step's parameters and answer."""
    return _load(
        "steps.sql",
        F=programs.Identifier(function_name(table)),
        T=programs.Identifier(table),
        D=programs.Identifier(done_name(table)),
        LAPSE=int(LINE_LAPSE_MS),
        RETAIN=int(BAR_RETAIN_MS),
        DONE_MS=int(DONE_MS),
        MAX_SHARES=int(MAX_SHARES),
        MAX_STATE=int(MAX_STATE),
    )


def table_statement(table: str) -> str:
    """The CREATE TABLE of lock table ``table`` (``table.sql``)."""
    return _load("table.sql", T=programs.Identifier(table))


def done_statements(table: str) -> list[str]:
    """The statements that make the table of leases handed on beside ``table``, and its index,
    if they are missing (``done.sql``: statements end with ``;`` at the end of a line)."""
    text = _load(
        "done.sql",
        D=programs.Identifier(done_name(table)),
        DI=programs.Identifier(done_name(table) + "_at"),
    )
    return [s for s in re.split(r";[ \t]*$", text, flags=re.MULTILINE) if _code(s)]


def _load(name: str, **values: programs.Value) -> str:
    return programs.load("awsflock.stores.postgresql", name, **values)


def _code(statement: str) -> bool:
    """Whether ``statement`` holds anything but blank lines and ``--`` comments."""
    return any(line.strip() and not line.strip().startswith("--") for line in statement.split("\n"))

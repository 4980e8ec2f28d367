"""psycopg's errors as awsflock's: every failure of a connect or a statement is turned into one
of ``awsflock.errors`` here, with the fix named, and nowhere else.

Whether a failed statement may still have been committed: only when its connection broke
after the statement was sent (the server may have committed and lost the answer). A statement
the server refused with an error (any SQLSTATE outside connection exceptions) was rolled back.
"""

from __future__ import annotations

import dataclasses
import re

from awsflock import errors
from awsflock.stores.remote.link import Translated, unreachable

#: The privilege each store call needs, for "permission denied" messages.
PRIVILEGES = {
    "acquire": "EXECUTE on the step function, and INSERT, UPDATE",
    "renew": "EXECUTE on the step function, and UPDATE",
    "release": "EXECUTE on the step function, and UPDATE",
    "force_release": "EXECUTE on the step function, and UPDATE",
    "resize": "EXECUTE on the step function, and INSERT, UPDATE",
    "join": "EXECUTE on the step function, and UPDATE",
    "beat": "EXECUTE on the step function, and UPDATE",
    "leave": "EXECUTE on the step function, and UPDATE",
    "get": "EXECUTE on the step function, and SELECT",
    "scan": "SELECT",
    "audit": "INSERT, UPDATE",
    "create_table": "CREATE on the schema",
}

#: SQLSTATEs of a refusal that clears up by itself: retried, never applied.
_TRANSIENT = {
    "40001": "a serialization failure",
    "40P01": "a deadlock",
    "55P03": "a lock not available",
    "57014": "the statement timeout",
    "53300": "too many connections",
    "53200": "out of memory",
    "57P03": "the server starting up or shutting down",
}


def no_fsync(where: str) -> errors.ConfigurationError:
    """The refusal of a server that runs with ``fsync=off``."""
    return errors.ConfigurationError(
        f"{where} runs with fsync=off: a lease it grants would not survive a crash",
        hint="set fsync = on in the server's postgresql.conf and reload it",
    )


def not_logged(table: str, where: str) -> errors.ConfigurationError:
    """The refusal of a lock table that is UNLOGGED (or temporary): a crash empties it."""
    return errors.ConfigurationError(
        f"table {table!r} in {where} is not logged: a crash would empty it and forget the "
        "leases it granted",
        hint=f'make it logged: ALTER TABLE "{table}" SET LOGGED',
    )


def translate(
    exc: BaseException, *, operation: str, where: str, table: str, sent: bool
) -> Translated:
    """``exc``, raised by psycopg during ``operation``, as an awsflock error."""
    import psycopg

    if not isinstance(exc, psycopg.Error):
        return Translated(errors.StoreError(f"{where}: {type(exc).__name__}: {exc}"), broken=True)
    failed = _Failed(
        state=exc.sqlstate or "",
        text=str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
        low=str(exc).lower(),
        where=where,
    )
    return (
        _refused(failed, operation, table)
        or _login(failed)
        or _connection(exc, failed, sent)
        or Translated(
            errors.StoreError(f"{where}: {operation} failed: {failed.text}"),
            broken=bool(not failed.state),
        )
    )


@dataclasses.dataclass(frozen=True)
class _Failed:
    """What a psycopg error says: its SQLSTATE ("" where libpq gives none), its first line,
    its whole message in lower case; and ``where``, the server, for messages."""

    state: str
    text: str
    low: str
    where: str


def _refused(failed: _Failed, operation: str, table: str) -> Translated | None:
    """A statement the server refused (rolled back, the connection still good but for a
    server going away or out of connections); None for any other error."""
    state, text, where = failed.state, failed.text, failed.where
    create = f"awsflock table-create --store URL (table {table!r})"
    err: errors.AwsflockError
    if state in ("42P01", "42883", "3F000"):
        err = errors.TableMissing(
            f"table {table!r} is not an awsflock table in {where} (or does not exist): {text}",
            hint=f"create it with `{create}`, or name the right one with ?table= or --tablename",
        )
        return Translated(err, broken=False)
    if state == "42501":
        err = errors.AccessDenied(
            f"{where} denied {operation} on table {table!r} ({text})",
            hint="the role needs "
            + PRIVILEGES.get(operation, "its GRANTs")
            + "; `awsflock grants --role ROLE` prints the GRANT statements for the table's owner",
        )
        return Translated(err, broken=False)
    if state == "25006":
        err = errors.StoreError(
            f"{where} is read-only (a standby, or default_transaction_read_only): {text}",
            hint="point --store at the primary, read-write server",
        )
        return Translated(err, broken=False)
    if state == "22023" and "unknown step" in failed.low:
        # A step function older than this awsflock (installed by an earlier table-create).
        err = errors.ConfigurationError(
            f"the step function of table {table!r} in {where} is older than this awsflock ({text})",
            hint=f"update it with `{create}` (it keeps the table and its leases)",
        )
        return Translated(err, broken=False)
    if state == "55000" and "fsync is off" in failed.low:
        return Translated(no_fsync(where), broken=False)
    if state == "55000" and "table is not logged" in failed.low:
        return Translated(not_logged(table, where), broken=False)
    if state in _TRANSIENT:
        err = errors.Throttled(
            f"{where} refused {operation}: {_TRANSIENT[state]} ({text})", hint="retry"
        )
        return Translated(err, broken=state.startswith("57P") or state.startswith("53"))
    return None


def _login(failed: _Failed) -> Translated | None:
    """A login the server refused: the password, the role, the host, the database; None for
    any other error."""
    state, text, low, where = failed.state, failed.text, failed.low, failed.where
    err: errors.AwsflockError
    if (
        "password authentication failed" in low
        or "no password supplied" in low
        or (state in ("28P01", "28000") and "pg_hba.conf" not in low)
    ):
        err = errors.CredentialsError(
            f"{where} refused the login: {text}",
            hint="check the user and password (in the URL, PGPASSWORD or ~/.pgpass)",
        )
        return Translated(err, broken=True)
    if re.search(r'role ".*" does not exist', low):
        # At connect libpq gives no SQLSTATE: without this it read as "could not be reached".
        err = errors.CredentialsError(
            f"{where} refused the login: {text}",
            hint="check the user in the URL (or PGUSER), or create the role",
        )
        return Translated(err, broken=True)
    if "pg_hba.conf" in low:
        err = errors.AccessDenied(
            f"{where} does not accept this host or user: {text}",
            hint="ask its administrator for a pg_hba.conf entry, or check sslmode",
        )
        return Translated(err, broken=True)
    if state == "3D000" or ("database" in low and "does not exist" in low):
        err = errors.StoreError(
            f"{where}: {text}",
            hint="create the database (createdb NAME), or name another one in the URL",
        )
        return Translated(err, broken=True)
    return None


def _connection(exc: BaseException, failed: _Failed, sent: bool) -> Translated | None:
    """A connection that broke or could not be made, or a URL libpq refused; None for any
    other error."""
    import psycopg

    state, text, low, where = failed.state, failed.text, failed.low, failed.where
    err: errors.AwsflockError
    if not sent and not state and "connection is bad: invalid" in low:
        # libpq refused the URL's own values (sslmode=bogus, a port out of range): no retry
        # can help.
        err = errors.UsageError(
            f"bad PostgreSQL URL: {text.replace('connection is bad: ', '')}",
            hint="fix the URL (see libpq's connection parameters)",
        )
        return Translated(err, broken=True)
    if isinstance(exc, psycopg.OperationalError) and (not state or state[:2] in ("08", "57")):
        # The connection broke or could not be made. A statement already sent may have been
        # committed with only its answer lost.
        return unreachable(where, text, sent=sent)
    if isinstance(exc, psycopg.InterfaceError):
        err = errors.EndpointUnreachable(f"{where}: {text}", hint="retry")
        return Translated(err, broken=True)
    if isinstance(exc, psycopg.ProgrammingError) and "invalid" in low and not state:
        err = errors.UsageError(f"bad PostgreSQL URL: {text}", hint="see `awsflock --help`")
        return Translated(err, broken=True)
    return None

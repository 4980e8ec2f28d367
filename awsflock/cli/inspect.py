"""What operators look at: ``status``, ``list``, ``audit``."""

from __future__ import annotations

import json

import click

from awsflock import errors
from awsflock.cli.app import CONTEXT, cli, emit
from awsflock.cli.lock_options import json_option, slots_option
from awsflock.cli.options import Common, common_options


@cli.command("status", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@common_options
@json_option
@click.option("--show-lease-id", is_flag=True, help="Also show the holder's LEASE_ID.")
@click.option(
    "--state",
    "show_state",
    is_flag=True,
    help="Also show the state kept with the lock (--state-file), one more request.",
)
@slots_option
def status(
    common: Common,
    lock_id: str,
    as_json: bool,
    show_lease_id: bool,
    show_state: bool,
    slots: int | None,
) -> None:
    """Who holds LOCK_ID, since when, until when, with which fencing token.

    For a pool (--slots, or a name only used as a pool) every slot is shown.
    Exit 0 if held (a pool: any slot), 3 if free (released, never taken, or
    expired and not yet reclaimed), 1 on errors.

    \b
    IAM: dynamodb:GetItem (and BatchGetItem with --state).
    """
    from awsflock.cli.status import HELD, kept_view, pool_view, render_pool, render_status, view
    from awsflock.names import check_lock_id, check_slots
    from awsflock.records import Pool

    table = common.table()
    check_lock_id(lock_id)
    pool_size = check_slots(lock_id, slots)
    state = table.state(lock_id)
    now = table.clock.time()
    if isinstance(state, Pool):
        pool = state
        if pool_size and pool.size and pool.size != pool_size:
            raise errors.ConfigurationError(
                f"pool {lock_id!r} has {pool.size} slots, not {pool_size}",
                hint=f"use --slots {pool.size}",
            )
        data = pool_view(pool, now, table.skew, show_lease_id)
        text = render_pool(data)
    else:
        data = view(lock_id, state, now, table.skew, show_lease_id)
        if show_state:
            data["state_kept"] = kept_view(table.store.read_state(lock_id), now)
        text = render_status(data)
    code = 0 if data["state"] == HELD else 3
    try:
        emit(data) if as_json else click.echo(text)
    except BrokenPipeError:
        # `awsflock status L | head -0`: the reader wanted none of it; the status still
        # answers `if awsflock status L >/dev/null`-style checks by its exit code.
        from awsflock.cli.streams import stdout_nowhere

        stdout_nowhere()
    raise click.exceptions.Exit(code)


@cli.command("list", context_settings=CONTEXT)
@common_options
@click.option("--prefix", default="", help="Only locks whose name starts with this.")
@click.option("--held", is_flag=True, help="Only locks held now.")
@click.option("--expired", is_flag=True, help="Only expired, unreclaimed ones.")
@json_option
def list_locks(common: Common, prefix: str, held: bool, expired: bool, as_json: bool) -> None:
    """Every lock in the table, streamed page by page.

    Rows come in DynamoDB's scan order, which is not sorted (sorting would mean
    holding the whole table in memory). --json prints one object per line.

    \b
    IAM: dynamodb:Scan, and DescribeTable (to check first that the table is
    an awsflock table; skipped where it is denied).
    """
    if held and expired:  # no lock is both: the list would be empty, which would mislead
        raise errors.UsageError(
            "--held and --expired contradict each other: no lock is both",
            hint="give one of them, or neither for every lock",
        )
    only = "held" if held else "expired" if expired else None
    from awsflock.cli.status import LIST_HEADER, pool_view, render_list_row, view
    from awsflock.records import LockRecord

    table = common.table()
    header = not as_json  # printed with the first page, so an error leaves stdout empty
    for entry in table.locks(prefix):
        now = table.clock.time()
        if isinstance(entry, LockRecord):
            data = view(entry.lock_id, entry, now, table.skew)
        else:
            data = pool_view(entry, now, table.skew)
        if only and data["state"] != only:
            continue
        if header:
            click.echo(LIST_HEADER)
            header = False
        click.echo(json.dumps(data, sort_keys=True) if as_json else render_list_row(data))
    if header:
        click.echo(LIST_HEADER)


@cli.command("audit", context_settings=CONTEXT)
@click.argument("lock_id", metavar="[LOCK_ID]", required=False, default="")
@common_options
@json_option
def audit(common: Common, lock_id: str, as_json: bool) -> None:
    """List audit records (force-releases), oldest first, for one lock or all.

    \b
    IAM: dynamodb:Scan, and DescribeTable (as for list).
    """
    from awsflock.lock.audit_log import audit_records

    for entry in audit_records(common.table(), lock_id):
        if as_json:
            emit(entry)
        else:
            click.echo(
                f"{entry['at']}  {entry['action']}  {entry['lock_id']}  by {entry['actor']}  "
                f"(holder {entry['holder']}, token {entry['fencing_token']}): {entry['reason']}"
            )

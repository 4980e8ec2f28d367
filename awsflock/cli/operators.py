"""What operators do: ``force-release`` (audited) and ``pool-resize``."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import click

from awsflock import errors
from awsflock.cli import logs
from awsflock.cli.app import CONTEXT, cli, emit
from awsflock.cli.lock_options import json_option
from awsflock.cli.locks import stopped_by_signals
from awsflock.cli.options import Common, common_options

if TYPE_CHECKING:
    from awsflock.records import LockRecord


@cli.command("force-release", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@common_options
@click.option(
    "--reason",
    required=True,
    help="Why; kept in the audit record. Required (at most 1,000 characters).",
)
@click.option("--lease-id", help="The lease to end (as `status --show-lease-id` shows it).")
@click.option("--yes", is_flag=True, help="Do not ask; end whatever lease holds it now.")
@click.option("--actor", help="Who is doing this (default: AWS caller identity, or user@host).")
@click.option("--slot", type=click.IntRange(0, 99), help="For a pool: the slot to end.")
@json_option
def force_release_command(
    common: Common,
    lock_id: str,
    reason: str,
    lease_id: str | None,
    yes: bool,
    actor: str | None,
    slot: int | None,
    as_json: bool,
) -> None:
    """End the current lease on LOCK_ID, whoever holds it, and audit it.

    The lease must be named: --lease-id ID, or an interactive confirmation that
    shows the holder, or --yes. The write is conditional on exactly that lease,
    so a holder that acquired in between is never affected; fencing tokens keep
    going up. The holder's next renewal fails (`awsflock run` stops its command).

    \b
    IAM: dynamodb:GetItem, UpdateItem, PutItem (the audit record).
    """
    from awsflock.lock.admin import force_release

    table = common.table()
    confirm = None
    if lease_id is None:
        if yes:
            confirm = _yes
        elif sys.stdin.isatty():
            if common.log_format == "json":
                # A question and its answer at a terminal are not JSON lines.
                raise errors.UsageError(
                    "force-release cannot ask for confirmation under --log-format json",
                    hint="pass --lease-id ID (see `awsflock status --show-lease-id`) or --yes",
                )
            confirm = _ask
    entry = force_release(
        table, lock_id, reason=reason, lease_id=lease_id, actor=actor, confirm=confirm, slot=slot
    )
    if as_json:
        emit(entry)
    elif not common.quiet:
        logs.say(
            f"force-released {lock_id!r} (was held by {entry['holder']}); audited",
            event="force_release_done",
            lock_id=lock_id,
            owner=entry["holder"],
            fencing_token=entry["fencing_token"],
        )


def _yes(record: LockRecord) -> bool:
    return True


def _ask(record: LockRecord) -> bool:
    import time

    logs.say(f"{record.lock_id!r} is held by {record.describe(time.time())}", event="confirm")
    return click.confirm("End this lease now?", default=False, err=True)


@cli.command("pool-resize", context_settings=CONTEXT)
@click.argument("lock_id", metavar="LOCK_ID")
@common_options
@click.option("--slots", type=click.IntRange(2, 100), required=True, help="The new size.")
def pool_resize(common: Common, lock_id: str, slots: int) -> None:
    """Change the number of slots of pool LOCK_ID.

    Growing is immediate. Shrinking needs the slots that go away to be free.
    Holders still using the old --slots get a clear error until they are
    changed too.

    \b
    IAM: dynamodb:GetItem, UpdateItem.
    """
    from awsflock.lock.admin import resize_pool

    # A signal that would end the process (INT, TERM, HUP, QUIT, USR1, USR2, ALRM) waits until
    # the resize's requests are settled, each within the request timeout: stopped between two
    # of them, a shrink in steps would leave the pool marked, and a request on its way could
    # land after the exit (reviews 49 and 50).
    more = (signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)
    with stopped_by_signals(*more) as (_, received):
        old, new = resize_pool(common.table(), lock_id, slots)
    if not common.quiet:
        logs.say(
            f"pool {lock_id!r} now has {new} slots (was {old})",
            event="pool_resize_done",
            lock_id=lock_id,
        )
    if received:
        logs.say(
            f"signal {received[0]} came while pool-resize ran: it finished first",
            level="warning",
            label="warning",
            event="interrupted",
            lock_id=lock_id,
        )

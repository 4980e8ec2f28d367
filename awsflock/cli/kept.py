"""``acquire --keep-alive``'s side of the CLI: starting the detached renewer for a lease just
taken (giving the lease back if it cannot start), and the hidden ``keep-alive`` command that
renewer runs (``awsflock.supervise.keepalive`` does the renewing)."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

import click

from awsflock import errors
from awsflock.cli import logs
from awsflock.cli.app import CONTEXT, cli
from awsflock.cli.lock_options import lease_option
from awsflock.cli.options import Common, common_options
from awsflock.lock import renewal

if TYPE_CHECKING:
    from awsflock.lock.lease import Lease, LockTable
    from awsflock.lock.set_table import LeaseSet
    from awsflock.supervise.keepalive_plan import KeepAlive


def start_renewer(
    common: Common,
    table: LockTable,
    lease: Lease | LeaseSet,
    follow: int,
    follow_started: str,
    cancel: threading.Event,
) -> None:
    """Start the renewer of a lease just taken (of one lock, or a set's). If the followed
    process is gone, the renewer cannot start, or a signal comes first, the lease is given
    back, and named if that fails."""
    from awsflock.supervise import keepalive, processes

    try:
        if not processes.alive(follow, follow_started):
            raise errors.AwsflockError(
                f"process {follow}, for which the lease was to be kept alive, exited while "
                f"waiting for {lease.lock_id!r}; the lease was given back",
                hint="give --while-pid a process that runs until the lock is released",
            )
        keepalive.spawn(
            [*common.store_options(), "--log-format", common.log_format],
            getattr(lease, "lock_ids", (lease.lock_id,)),
            lease.lease_id,
            lease.lease_duration,
            follow,
            follow_started,
            common.request_timeout,
            env=common.store_env(),
            cancel=cancel,
        )
    except (errors.AwsflockError, KeyboardInterrupt):
        give_back(table, lease)
        raise


def give_back(table: LockTable, lease: Lease | LeaseSet) -> None:
    """Release a lease no LEASE_ID was printed for; if that fails, name it and what frees it
    (one line), so that no lease is left held that nobody knows of."""
    import shlex

    names = getattr(lease, "lock_ids", (lease.lock_id,))
    try:
        if len(names) > 1:
            table.release_set_lease(names, lease.lease_id)
        else:
            table.release_lease(lease.lock_id, lease.lease_id)
    except errors.NotHeld:
        return
    except errors.AwsflockError as exc:
        frees = shlex.join(["awsflock", "release", *names, lease.lease_id])
        logs.say(
            f"could not give back the lease on {lease.lock_id!r} ({exc.one_line()}): it may be "
            f"held until its lease ends, under LEASE_ID {lease.lease_id}: free it with "
            f"`{frees}`",
            level="warning",
            label="warning",
            event="release_failed",
            lock_id=lease.lock_id,
            lease_id=lease.lease_id,
            error=type(exc).__name__,
        )


@cli.command("keep-alive", context_settings=CONTEXT, hidden=True)
@click.argument("lock_ids", metavar="LOCK_ID...", nargs=-1, required=True)
@common_options
@lease_option("1 minute", f"Lease length; renewed {renewal.POLICY.said}.")
@click.option("--while-pid", type=click.IntRange(1), required=True, metavar="PID")
@click.option("--while-pid-start", default="-", metavar="TICKS")
def keep_alive_command(
    common: Common,
    lock_ids: tuple[str, ...],
    lease_duration: float,
    while_pid: int,
    while_pid_start: str,
) -> None:
    """The renewer that `acquire --keep-alive` leaves behind (not for direct use), of one
    lock or of a set's names. Its LEASE_ID comes in its environment, never on its command
    line."""
    import os

    from awsflock.names import check_lease_id
    from awsflock.supervise.keepalive import LEASE_ENV, serve

    lease_id = os.environ.pop(LEASE_ENV, "")
    if not lease_id:
        raise errors.UsageError(f"no LEASE_ID in {LEASE_ENV}", hint="use acquire --keep-alive")
    started = "" if while_pid_start == "-" else while_pid_start

    def render(message: str) -> str:
        return logs.render(
            message,
            level="warning",
            label="warning",
            event="lost",
            logger="awsflock.keepalive",
            fmt=common.log_format,
            lock_id=", ".join(lock_ids),
        )

    code = serve(
        common.table(),
        lock_ids,
        check_lease_id(lease_id),
        lease_duration,
        while_pid,
        started,
        sys.stdout,
        render,
    )
    raise click.exceptions.Exit(code)


def plan_keep_alive(lock_id: str, while_pid: int | None, lease_s: float) -> KeepAlive:
    """Plan --keep-alive (``awsflock.supervise.keepalive_plan``) and say its warning."""
    from awsflock.supervise import keepalive_plan

    source = click.get_current_context().get_parameter_source("lease_duration")
    plan = keepalive_plan.plan(while_pid, lease_s, source != click.core.ParameterSource.DEFAULT)
    if plan.warning:
        logs.say(
            plan.warning,
            level="warning",
            label="warning",
            event="keep_alive_init",
            lock_id=lock_id,
        )
    return plan


def name_the_script(table: LockTable, follow: int) -> None:
    """Record as the holder the script that ran ``acquire`` (the process kept alive for, or
    the caller), not ``acquire`` itself, which is gone once the LEASE_ID is printed: the pid
    ``status`` shows is then alive exactly while the script is."""
    import dataclasses

    from awsflock.supervise import processes

    pid = follow or processes.caller()
    table.identity = dataclasses.replace(table.identity, pid=pid, command=processes.name(pid))
